#!/usr/bin/env bash
# The whole test suite: set-up if needed, then every Rust test (rubric engine on recorded
# observations, spec errors, model parity with Python, end-to-end runs of the real binary on every
# fixture with insta snapshots).
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
# test-only: the JUnit XML and JSON schema validators (tests/batch.rs, tests/platforms.rs)
.venv/bin/python -c 'import xmlschema, jsonschema' 2>/dev/null ||
  .venv/bin/python -m pip install --quiet --disable-pip-version-check xmlschema jsonschema
# test-only: notebooks executed headless through a real kernel (tests/jupyter_magic.rs)
.venv/bin/python -c 'import nbclient, ipykernel, nbformat' 2>/dev/null ||
  .venv/bin/python -m pip install --quiet --disable-pip-version-check nbclient ipykernel nbformat
# test-only: tmux drives `grade watch` in a terminal (tests/student_loop.rs)
if ! command -v tmux >/dev/null; then
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  $sudo apt-get update -qq && $sudo apt-get install -y -qq tmux >/dev/null
fi
# test-only: headless Chromium renders the HTML reports (tests/batch.rs); CJK glyphs for its screenshots
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y chromium fonts-wqy-zenhei >/dev/null ||
      { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium fonts-wqy-zenhei >/dev/null; }
  else
    echo "note: chromium missing and not root: the rendered-page checks need it (apt-get install -y chromium)" >&2
  fi
fi
# One cold compile per fresh clone: lesson 05's shared inductor cache (.cache/inductor) filled by
# the course's own solution before any test grades lesson 05. A student's run (grade batch) grades
# on a copy of the shared cache and never writes it back: with the cache cold, each compiled
# TinyGPT from scratch (~30 s of CPU) besides lesson 05's own first gradings.
if [ -z "$(ls -A .cache/inductor 2>/dev/null)" ]; then
  echo "test: filling lesson 05's compile cache (one grading of its solution) …" >&2
  target/debug/grade exercise 05-compile --solution --device cpu >/dev/null ||
    echo "test: that grading did not pass; lesson 05's tests will say why" >&2
fi
cargo test --quiet "$@"
