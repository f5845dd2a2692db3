#!/usr/bin/env bash
# The whole test suite: set-up if needed, then every Rust test (rubric engine on recorded
# observations, spec errors, model parity with Python, end-to-end runs of the real binary on every
# fixture with insta snapshots).
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
cargo test --quiet "$@"
