"""grade's Python driver: runs one submission under one exercise scenario, records observations.

Embedded in the `grade` binary and written to a fresh temporary directory for each run, with its
modules beside it (loaded by path, first of all: `python -I` puts no folder on `sys.path`):
attribution.py (whose call is it), recorder.py (the grader's clocks, the results channel, `Ctx`)
and instruments.py (what the scenarios observe). This file is the pipeline: `run_job`. Protocol:
    python driver.py JOB_JSON            (a nonce arrives as the first line of stdin)
Every observation (metric, trace event, probe status, tensor) leaves on the results channel
(fd `results_fd` of the job, a pipe the grader reads) the moment it is made: see `_Channel`.
Before the submission is imported: the instruments are installed, the scenario's
`before_submission(ctx)` computes the grader's own answers and sends them, and the static audit
(audit.py) of the source is sent. The instruments and the grader's modules are then verified at
every probe boundary and instrument call (`_Watch`). The grader (Rust) re-derives every verdict
from these raw observations.
"""
import contextlib
import gc
import json
import os
import sys
import traceback

ENV_BROKEN = 4  # exit status: torch/safetensors/numpy missing (reported as "could not grade")


def _load_module(name, path, package=False):
    """The module `name` from the file `path` (a package's `__init__.py` when `package`: its
    modules load beside it as `name.<module>`)."""
    import importlib.util

    where = [os.path.dirname(path)] if package else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _sibling(name):
    """The driver's module `name` (name.py beside this file), as `grade_<name>`."""
    return _load_module(f"grade_{name}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))


# in this order (each imports the ones before it), before any code of the submission exists: the
# originals they capture (the clocks, os and json functions) are the real ones
attribution = _sibling("attribution")
recorder = _sibling("recorder")
instruments = _sibling("instruments")
attribution._INTERNAL_FILES.add(_sibling.__code__.co_filename)
SUBMISSION_FILES = attribution.SUBMISSION_FILES
ProbeFailed = recorder.ProbeFailed


def _audit(job):
    """The static audit's findings for the submission (audit.py, before anything of it runs)."""
    path = job.get("audit") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "audit.py")
    try:
        audit = _load_module("grade_audit", path)
        with open(job["submission"], encoding="utf-8", errors="replace") as fh:
            source = fh.read()
        return audit.audit(source, "submission.py", job.get("audit_allow") or ())
    except Exception as e:  # the grader's own failure: visible, and it fails the criterion
        return [{"line": 0, "col": 0, "code": "error", "what": "audit",
                 "zh": f"静态审查本身失败：{e!r}", "en": f"the static audit itself failed: {e!r}"}]
    finally:
        sys.modules.pop("grade_audit", None)


def _load_policy(ctx, job):
    """The course's Python (policy.py, configured with the job's policy): refusals found while the
    submission runs are sent at once as `integrity.policy.<line>` (once per line), like `_tamper`,
    below the recorder's gate (the guard that refuses acts on the submission's behalf)."""
    path = job.get("policy_py") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy.py")
    policy = _load_module("grade_policy", path)
    policy.configure(job.get("policy") or {}, SUBMISSION_FILES)
    attribution._TRANSPARENT_FILES.update({policy.__file__, os.path.abspath(policy.__file__)})
    lines = set()

    def refused(finding):
        if finding["line"] in lines:
            return
        lines.add(finding["line"])
        ctx._channel.record_ungated("metric", f"integrity.policy.{finding['line']}", finding)

    policy.report = refused
    return policy


def main():
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    run_job(sys.argv[1], nonce)


def _libraries_configured(torch):
    """torch's CPU libraries read their environment once, at their first use, and keep what they
    read for the whole process: MKL at its first GEMM (`MKL_CBWR`, `MKL_ENABLE_INSTRUCTIONS`),
    oneDNN at its first primitive (`ONEDNN_MAX_CPU_ISA`, its primitive cache's capacity, JIT
    dumps: GELU's forward and backward are oneDNN's on CPU), ATen at its first vectorised kernel
    (`ATEN_CPU_CAPABILITY`). First used here, before the submission exists, they run in the
    grader's configuration whatever the submission sets at its import (red team 40: those set,
    one op run, and the environment put back before any sealed call: every step, the grader's
    own too, 1.15-2.2x slower). A few small ops, ~1 ms once the libraries are loaded."""
    a = torch.ones(64, 64, requires_grad=True)
    x = torch.ones(8, 64, 256, requires_grad=True)
    ((a @ a).sum() + torch.nn.functional.gelu(x).sum() + torch.ones(64).add_(1.0).sum()).backward()


def run_job(job_path, nonce):
    """Grade one job; never returns (os._exit). Called by main() in a fresh interpreter, or by
    zygote.py in a child forked from a warm one (torch already imported)."""
    t0 = recorder.start_clock()
    clock = recorder._perf_counter
    with open(job_path) as f:
        job = json.load(f)
    sys.path.insert(0, job["course_path"])
    attribution.know_course(job["course_path"])

    try:  # the grader's own environment; a failure here is the grader's, not the submission's
        import numpy  # noqa: F401  (safetensors.torch needs it to write)
        import safetensors.torch  # noqa: F401
        import RestrictedPython  # noqa: F401  (the course's Python: policy.py)
        import torch
    except ImportError as e:
        print(f"grade driver: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(ENV_BROKEN)
    open(os.path.join(job["out_dir"], "env-ok"), "w").close()
    stage_s, lap = {}, [clock()]

    def stage(name):  # the seconds since the last stage ended, as `name` (the `timings` record)
        now = clock()
        stage_s[name] = now - lap[0]
        lap[0] = now

    stage_s["imports_s"] = lap[0] - t0
    torch.set_num_threads(int(job.get("threads", 1)))
    torch.manual_seed(job["seed"])
    _libraries_configured(torch)
    instruments._profiler_without_inductor(torch)
    instruments._dynamo_on_demand(torch)
    attribution.know_torch(torch)
    ctx = attribution._ctx = recorder.Ctx(job, nonce, recorder._Channel(job["results_fd"], nonce))
    ctx.stage_s = stage_s
    watched = instruments._instrument(ctx)

    lib_py = job.get("lib") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "__init__.py")
    ctx.lib = _load_module("grade_lib", lib_py, package=True)
    attribution._guard_lib(ctx.lib)
    scenario = _load_module("grade_scenario", job["scenario"])
    scenario.ProbeFailed = ProbeFailed  # what each scenario's run() binds it to, bound now
    stage("setup_s")  # the channel, the instruments, grade_lib and the scenario loaded

    # The grader's own answers, computed before the submission exists and sent at once; nothing
    # of them stays behind (the hook keeps no reference; a collection frees what it made). The
    # collection looks at what the hook made only: everything older is frozen around it (a full
    # collection of the ~180k objects torch's import leaves is 80 ms; this one is ~1 ms), and
    # thawed before the submission runs, so its collections cost what they cost anywhere.
    before = getattr(scenario, "before_submission", None)
    if before is not None:
        gc.freeze()
        try:
            before(ctx)
            del before
            gc.collect()
        finally:
            gc.unfreeze()
    stage("before_submission_s")

    SUBMISSION_FILES.update({job["submission"], os.path.abspath(job["submission"])})
    policy = _load_policy(ctx, job)
    # The submission compiled in the course's Python: what it may not use is found before any of
    # it runs, and sent with the static audit (both leave now: reported even if the import
    # crashes the interpreter). A refused submission is not imported (the policy is a gate).
    syntax = None
    try:
        with open(job["submission"], encoding="utf-8", errors="replace") as fh:
            source = fh.read()
        if job.get("policy") is None:  # GRADE_POLICY=off (the sandbox's own tests): plain Python
            code, refused = compile(source, job["submission"], "exec"), []
        else:
            code, refused = policy.compile_source(source, job["submission"])
    except (SyntaxError, ValueError) as e:
        code, refused, syntax = None, [], e
    ctx.audit(_audit(job) + refused)
    import course.model as course_model

    ctx.watch = recorder._Watch(
        ctx,
        watched,
        # the driver's own globals too (each module's): its captured clocks and os functions
        {"grade_driver": globals(), "grade_attribution": attribution, "grade_recorder": recorder,
         "grade_instruments": instruments, **attribution._lib_modules(ctx.lib),
         "grade_scenario": scenario, "course.model": course_model, "grade_policy": policy},
    )
    stage("audit_s")  # the course's Python loaded, the submission compiled under it, the static audit
    with ctx.probe("load"):
        if syntax is not None:
            raise syntax
        if refused:
            f = refused[0]
            more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            raise ProbeFailed(f"the course's Python refused submission.py:{f['line']}: {f['en']}{more}")
        # what the lesson's instruments must hold from before the submission runs at all (lesson
        # 06: the CPU device boundary): work done at import is the submission's too
        around = getattr(scenario, "around_import", None)
        with around(ctx) if around is not None else contextlib.nullcontext():
            ctx.sub = policy.run(code, job["submission"], plain=job.get("policy") is None)
    stage("import_s")  # the `load` probe: the submission's own import
    if ctx.sub is not None:
        scenario.run(ctx)
    stage("scenario_s")  # every probe after the import

    tampered = ctx.watch.check("end")
    ctx.metric("integrity.tampered", ", ".join(tampered) if tampered else "none")
    stage("end_check_s")
    ctx.write()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the submission's atexit handlers and lingering threads


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # the driver itself failed: tell the grader on stderr, exit non-zero
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
