#!/usr/bin/env bash
# The whole test suite: set-up if needed, then every Rust test (rubric engine on recorded
# observations, spec errors, model parity with Python, end-to-end runs of the real binary on every
# fixture with insta snapshots).
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
# test-only: the JUnit XML schema validator (tests/batch.rs)
.venv/bin/python -c 'import xmlschema' 2>/dev/null ||
  .venv/bin/python -m pip install --quiet --disable-pip-version-check xmlschema
cargo test --quiet "$@"
