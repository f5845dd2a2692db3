"""Runs files under the course's Python (src/driver/policy.py) for tests/policy.rs.

    python policy_cases.py POLICY_JSON POLICY_PY FILE...

Prints one JSON list: per file, the findings made before it ran (`static`), the refusals made while
it ran (`runtime`), the error it ended with (`error`, or null) and the graph breaks torch.compile
saw while it ran (`graph_breaks`)."""
import importlib.util
import json
import os
import sys
import traceback

import torch  # noqa: F401  (the policy judges tensors once torch is imported, as in the driver)

policy_json, policy_py, files = sys.argv[1], sys.argv[2], sys.argv[3:]
spec = importlib.util.spec_from_file_location("grade_policy", policy_py)
policy = importlib.util.module_from_spec(spec)
sys.modules["grade_policy"] = policy  # as the driver loads it (torch.compile looks its guards up by module)
spec.loader.exec_module(policy)
with open(policy_json) as fh:
    rules = json.load(fh)

results = []
for path in files:
    path = os.path.abspath(path)
    policy.configure(rules, {path})
    runtime = []
    policy.report = runtime.append
    breaks = 0
    out = {"file": os.path.basename(path), "static": [], "runtime": runtime, "error": None}
    with open(path, encoding="utf-8") as fh:
        code, found = policy.compile_source(fh.read(), path)
    out["static"] = found
    if not found:
        cwd = os.getcwd()
        os.chdir(os.path.dirname(path))
        try:
            policy.run(code, path, name="case_" + os.path.basename(path)[:-3])
        except BaseException as e:  # noqa: BLE001 - a refusal is a BaseException
            tb = traceback.extract_tb(e.__traceback__)
            line = next((f.lineno for f in reversed(tb) if f.filename == path), None)
            out["error"] = {"type": type(e).__name__, "message": str(e)[:300], "line": line}
        finally:
            os.chdir(cwd)
        dynamo = sys.modules.get("torch._dynamo.utils")
        if dynamo is not None:
            breaks = sum(dynamo.counters["graph_break"].values())
            dynamo.counters.clear()
    out["graph_breaks"] = breaks
    results.append(out)
print(json.dumps(results))
