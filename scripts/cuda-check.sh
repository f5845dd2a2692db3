#!/usr/bin/env bash
# Every CUDA check in one go, for whoever first has a GPU (a few minutes):
#   1. `grade check --device cuda`: each lesson's reference solution, starter and every fixture
#      graded on the GPU against tests/fixtures/<ID>/expected.yaml (CUDA-only criteria such as
#      peak_memory_drops apply there; a fixture's `cuda:` list names what it must fail on CUDA only);
#   2. the unsynchronised-timing demonstration: lesson 04's `no_sync` fixture graded on CUDA,
#      where `compare_sync` must fail (and the timing it reported visibly differs);
#   3. the end-to-end tests (they grade with `--device auto`, i.e. on the GPU).
# Prints one verdict summary at the end; exit 0 only when every part passed.
# Usage: scripts/cuda-check.sh [EXERCISE_ID...]
set -uo pipefail
cd "$(dirname "$0")/.."
./setup.sh || exit 2
bin=target/debug/grade
python=.venv/bin/python
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "cuda-check: torch sees no CUDA device here; nothing to check" >&2
  exit 2
fi
"$python" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'
declare -A result
start=$(date +%s)

echo "== 1. grade check --device cuda $*"
"$bin" check --device cuda --lang en "$@"
result[check]=$?

echo "== 2. lesson 04 no_sync on CUDA: compare_sync must fail"
out=$("$bin" exercise 04-checkpoint --device cuda --format json \
  --submission tests/fixtures/04-checkpoint/no_sync.py)
echo "$out" | "$python" -c '
import json, sys
r = json.load(sys.stdin)
for v in r["verdicts"]:
    if v["id"] in ("compare_sync", "compare_time_agrees", "peak_memory_drops"):
        print(f"  {v[\"id\"]:<22} {v[\"status\"]:<5} {v[\"measured\"][\"en\"]}")
ok = any(v["id"] == "compare_sync" and v["status"] == "FAIL" for v in r["verdicts"])
sys.exit(0 if ok else 1)'
result[no_sync]=$?

echo "== 3. end-to-end tests on the GPU"
cargo test --quiet --test e2e
result[e2e]=$?

echo
echo "cuda-check summary ($(( $(date +%s) - start )) s):"
status=0
for k in check no_sync e2e; do
  if [ "${result[$k]}" -eq 0 ]; then echo "  PASS  $k"; else echo "  FAIL  $k (exit ${result[$k]})"; status=1; fi
done
exit $status
