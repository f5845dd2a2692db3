#!/usr/bin/env bash
# Benchmark of `grade batch` (issue 8): grades the same N lesson-04 submissions as N cold
# `grade exercise` processes and as one `grade batch`, and prints seconds per submission for each,
# the speed-up, and the grader's own overhead per submission next to one `import torch`.
#
#   scripts/bench-batch.sh [N=30] [JOBS=default]
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
  mkdir -p "$class/s$(printf %02d "$i")" && cp "$src" "$class/s$(printf %02d "$i")/exercise.py"
  i=$((i + 1))
done
mkdir -p "$class/zz-empty"
subs=("$class"/s*/exercise.py)
n=${#subs[@]}

t() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; echo "$(date +%s.%N) - $s" | bc; }

imp=$(t "$PY" -c 'import torch')
starter=$(t "$GRADE" exercise 04-checkpoint --device cpu --seed 1)
echo "import torch (one cold interpreter): ${imp} s"
echo "grade exercise on the starter (fails at once: the grader's cold overhead per submission): ${starter} s"

s=$(date +%s.%N)
for f in "${subs[@]}"; do "$GRADE" exercise 04-checkpoint --submission "$f" --device cpu --seed 1 >/dev/null 2>&1 || true; done
cold=$(echo "$(date +%s.%N) - $s" | bc)

s=$(date +%s.%N)
"$GRADE" batch "$class" --exercise 04-checkpoint --out "$tmp/out" --device cpu --seed 1 ${JOBS:+--jobs $JOBS} >/dev/null 2>&1 || true
batch=$(echo "$(date +%s.%N) - $s" | bc)

echo "submissions: $n (+1 folder without submission), cores: $(nproc)"
printf 'cold grade exercise: %.1f s total, %.2f s per submission\n' "$cold" "$(echo "$cold / $n" | bc -l)"
printf 'grade batch:         %.1f s total, %.2f s per submission\n' "$batch" "$(echo "$batch / $n" | bc -l)"
printf 'speed-up: %.2fx\n' "$(echo "$cold / $batch" | bc -l)"
