#!/usr/bin/env bash
# Benchmark of `grade batch` (issue 8): grades the same N lesson-04 submissions as N cold
# `grade exercise` processes and as one `grade batch`, and prints seconds per submission for each,
# the speed-up, and the grader's own overhead per submission next to one `import torch`.
#
#   scripts/bench-batch.sh [N=30] ["JOBS..."="default 1 … cores"]   (default: no --jobs flag,
#                                                                      i.e. one run per core)
#   SKIP_COLD=1 scripts/bench-batch.sh     # only the batches, and their verdict checks
#   SKIP_FRESH=1                           # skip the batch with a fresh interpreter per run
#
# After the batch, every student's outcome is checked: solution copies and the fixtures that
# expected.yaml lists with `[]` pass, every other submission fails, the empty folder is a
# "no submission" row.
#
# The class: solution copies, every fixture of tests/fixtures/04-checkpoint, a few hostile
# submissions, one folder with no submission (not counted in the cold runs).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-30}
JOBS=${2:-}
cargo build --bins -q
GRADE=$PWD/target/debug/grade
PY=${GRADE_PYTHON:-$PWD/.venv/bin/python}
export GRADE_ROOT=$PWD CI=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
class=$tmp/class
mkdir -p "$class"
srcs=(tests/fixtures/04-checkpoint/*.py tests/fixtures/hostile/read_solution.py
      tests/fixtures/hostile/segfault.py tests/fixtures/hostile/abort.py)
i=0
while [ "$i" -lt $((N - 1)) ]; do
  if [ $((i % 4)) -eq 0 ]; then src=solutions/04-checkpoint/exercise.py
  else src=${srcs[$(( (i / 4 * 3 + i % 4) % ${#srcs[@]} ))]}; fi
  id=s$(printf %02d "$i")
  mkdir -p "$class/$id" && cp "$src" "$class/$id/exercise.py"
  stem=$(basename "$src" .py)
  if [ "$src" = solutions/04-checkpoint/exercise.py ] ||
     { [[ $src == tests/fixtures/04-checkpoint/* ]] &&
       grep -q "^$stem: \[\]" tests/fixtures/04-checkpoint/expected.yaml; }; then
    echo "$id pass" >>"$tmp/expected"
  else echo "$id fail" >>"$tmp/expected"; fi
  i=$((i + 1))
done
mkdir -p "$class/zz-empty"
subs=("$class"/s*/exercise.py)
n=${#subs[@]}

t() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; echo "$(date +%s.%N) - $s" | bc; }

echo "zz-empty no_submission" >>"$tmp/expected"
if [ -z "${SKIP_COLD:-}" ]; then
imp=$(t "$PY" -c 'import torch')
starter=$(t "$GRADE" exercise 04-checkpoint --device cpu --seed 1)
echo "import torch (one cold interpreter): ${imp} s"
echo "grade exercise on the starter (fails at once: the grader's cold overhead per submission): ${starter} s"

s=$(date +%s.%N)
for f in "${subs[@]}"; do "$GRADE" exercise 04-checkpoint --submission "$f" --device cpu --seed 1 >/dev/null 2>&1 || true; done
cold=$(echo "$(date +%s.%N) - $s" | bc)
fi

# one batch per --jobs value (default: 1 and every value up to the cores), then the fresh-interpreter
# batch (GRADE_ZYGOTE=off) at the default --jobs, for the zygote's share of the speed-up
check() {
"$PY" - "$1/grades.json" "$tmp/expected" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
want = dict(l.split() for l in open(sys.argv[2]))
got = {r["student"]: ("no_submission" if r["outcome"] != "graded"
                      else "pass" if r["summary"]["failed"] == 0 else "fail") for r in g["grades"]}
bad = {s: (want[s], got.get(s)) for s in want if got.get(s) != want[s]}
print(f"verdicts as expected: {len(want) - len(bad)}/{len(want)}" + (f"; unexpected: {bad}" if bad else ""))
PY
}
echo "submissions: $n (+1 folder without submission), cores: $(nproc)"
[ -n "${SKIP_COLD:-}" ] ||
  printf 'cold grade exercise:            %6.1f s total, %.2f s per submission\n' "$cold" "$(echo "$cold / $n" | bc -l)"
for j in ${JOBS:-default $(seq 1 "$(nproc)")}; do
  flag=(--jobs "$j") label="--jobs $j"
  [ "$j" = default ] && flag=() label="(default jobs = $(nproc))"
  s=$(date +%s.%N)
  "$GRADE" batch "$class" --exercise 04-checkpoint --out "$tmp/out-$j" --device cpu --seed 1 "${flag[@]}" >/dev/null 2>&1 || true
  batch=$(echo "$(date +%s.%N) - $s" | bc)
  printf 'grade batch %-22s (zygote): %6.1f s total, %.2f s per submission' "$label" "$batch" "$(echo "$batch / $n" | bc -l)"
  [ -n "${SKIP_COLD:-}" ] || printf ', speed-up %.2fx' "$(echo "$cold / $batch" | bc -l)"
  printf '; '; check "$tmp/out-$j"
done
if [ -z "${SKIP_FRESH:-}" ]; then
  s=$(date +%s.%N)
  GRADE_ZYGOTE=off "$GRADE" batch "$class" --exercise 04-checkpoint --out "$tmp/out-fresh" --device cpu --seed 1 --jobs 1 >/dev/null 2>&1 || true
  batch=$(echo "$(date +%s.%N) - $s" | bc)
  printf 'grade batch --jobs 1  (fresh interpreter per run, GRADE_ZYGOTE=off): %.1f s total, %.2f s per submission' "$batch" "$(echo "$batch / $n" | bc -l)"
  [ -n "${SKIP_COLD:-}" ] || printf ', speed-up %.2fx' "$(echo "$cold / $batch" | bc -l)"
  printf '; '; check "$tmp/out-fresh"
fi
