#!/usr/bin/env python3
"""Grade every lesson's solution, starter and fixtures with `grade batch` (warm interpreter,
--jobs 2) and compare each failed set with tests/fixtures/ID/expected.yaml (CPU): the batch
path (forks of the warm interpreter) must judge every submission as `grade check` does.

    python3 scripts/batch-vs-expected.py [ID ...]      (needs PyYAML; builds nothing: run
                                                        `cargo build --bins` first)
Measured here (2 cores): all six lessons, 115/115 as expected, 2 min 41 s."""
import json, os, shutil, subprocess, sys, tempfile

import yaml

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ids = sys.argv[1:] or ["01-metrics", "02-profiler", "03-memory", "04-checkpoint", "05-compile", "06-sync"]
bad = total = 0
for ex in ids:
    exp = yaml.safe_load(open(f"{root}/tests/fixtures/{ex}/expected.yaml"))
    tmp = tempfile.mkdtemp()
    cls = os.path.join(tmp, "class")
    want = {}
    def put(name, src, fails):
        os.makedirs(os.path.join(cls, name))
        shutil.copy(src, os.path.join(cls, name, "exercise.py"))
        want[name] = fails
    for f in sorted(os.listdir(f"{root}/tests/fixtures/{ex}")):
        if f.endswith(".py"):
            stem = f[:-3]
            v = exp[stem]
            fails = v if isinstance(v, list) else (v.get("fail") or []) + (v.get("cpu") or [])
            put(stem, f"{root}/tests/fixtures/{ex}/{f}", sorted(fails))
    put("solution", f"{root}/solutions/{ex}/exercise.py", [])
    put("starter", f"{root}/exercises/{ex}/exercise.py", None)
    out = os.path.join(tmp, "out")
    subprocess.run([f"{root}/target/debug/grade", "batch", cls, "--exercise", ex, "--out", out,
                    "--jobs", "2", "--device", "cpu"], env={**os.environ, "GRADE_ROOT": root, "CI": "1"},
                   capture_output=True)
    for name, fails in want.items():
        rec = json.load(open(f"{out}/records/{ex}/{name}.json"))
        failed = sorted(v["id"] for v in rec["verdicts"] if v["status"] == "FAIL")
        ok = (failed != []) if fails is None else failed == fails
        total += 1
        if not ok:
            bad += 1
            print(f"{ex} {name}: failed {failed}, expected {fails}; {rec.get('run_failure')}")
    print(f"{ex}: {len(want)} graded")
    shutil.rmtree(tmp, ignore_errors=True)
print(f"batch vs expected.yaml: {total - bad}/{total} as expected")
sys.exit(1 if bad else 0)
