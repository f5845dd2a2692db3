#!/usr/bin/env bash
# PrairieLearn external-grading entrypoint, inside the course image (Containerfile): a question's
# info.json names it with the exercise id,
#   "entrypoint": "/course/examples/prairielearn/entrypoint.sh 04-checkpoint"
# It grades $GRADE_PL_ROOT/student/exercise.py (or exercise.ipynb; else the only .py/.ipynb
# there) and writes $GRADE_PL_ROOT/results/results.json in PrairieLearn's format: score in [0, 1],
# one test per criterion, the student's report as `output`. Could not grade (no submission, a
# broken course, the grader failing): `gradable: false` with a `message`, which costs the student
# no attempt.
# Environment: GRADE_PL_ROOT (default /grade), GRADE_ROOT (the course; default /course),
# GRADE_TIMEOUT (seconds; default timeout_s of exercise.yaml; keep it under info.json's timeout,
# at most 600), GRADE_LANG (zh or en; default zh), GRADE_BIN (default $GRADE_ROOT/target/debug/grade).
set -u
exercise=${1:-${GRADE_EXERCISE:-}}
root=${GRADE_PL_ROOT:-/grade}
course=${GRADE_ROOT:-/course}
results=$root/results
mkdir -p "$results"

submission=$root/student/exercise.py
if [ ! -f "$submission" ]; then
  if [ -f "$root/student/exercise.ipynb" ]; then
    submission=$root/student/exercise.ipynb
  else
    shopt -s nullglob
    found=("$root"/student/*.py "$root"/student/*.ipynb)
    [ "${#found[@]}" -eq 1 ] && submission=${found[0]}
  fi
fi

args=(--root "$course" exercise "$exercise" --submission "$submission"
      --format prairielearn --lang "${GRADE_LANG:-zh}")
[ -z "${GRADE_TIMEOUT:-}" ] || args+=(--timeout "$GRADE_TIMEOUT")
"${GRADE_BIN:-$course/target/debug/grade}" "${args[@]}" >"$results/results.json.part"
rc=$?
echo "grade exit code: $rc (0 pass, 1 fail, 2 could not grade)"
if [ "$rc" -le 2 ] && [ -s "$results/results.json.part" ]; then
  mv "$results/results.json.part" "$results/results.json"
else
  rm -f "$results/results.json.part"
  printf '{"gradable": false, "message": "%s (exit %d)"}\n' \
    "could not grade: the grader itself failed / 无法评分：评分器自身出错" "$rc" \
    >"$results/results.json"
fi
exit 0
