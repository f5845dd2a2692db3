"""grade's Python driver: runs one submission under one exercise scenario, records observations.

Embedded in the `grade` binary and written to a fresh temporary directory for each run. Protocol:
    python driver.py JOB_JSON            (a nonce arrives as the first line of stdin)
It writes OUT/observations.json (metrics, traces, probe errors, the nonce) and
OUT/tensors.safetensors. Everything the submission could tamper with is captured before the
submission is imported; the grader (Rust) re-derives every verdict from these raw observations.
"""
import json
import os
import sys
import time
import traceback

ENV_BROKEN = 4  # exit status: torch/safetensors/numpy missing (reported as "could not grade")
_perf_counter = time.perf_counter  # the driver's own clock, captured before any student code
_T0 = _perf_counter()


class ProbeFailed(Exception):
    """A probe cannot go on; the message says why (it becomes the criterion's reason)."""


class Ctx:
    """What a scenario gets: the job, torch, the submission, and places to put observations."""

    def __init__(self, job, nonce):
        self.job = job
        self._nonce = nonce
        self.params = job["params"]
        self.model_cfg = job["model"]
        self.device = job["device"]
        self.seed = job["seed"]
        self.metrics = {}
        self.traces = {}
        self.probes = {}
        self.tensors = {}
        self.sub = None
        self.trace = None  # the event list being recorded, if any
        self.clock = _perf_counter
        self.ProbeFailed = ProbeFailed

    # -- observations -------------------------------------------------------------------------
    def metric(self, key, value):
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
            self.metrics[key] = repr(value)  # JSON has no NaN/inf: keep it visible as text
        elif isinstance(value, bool) or value is None or isinstance(value, (int, float, str)):
            self.metrics[key] = value
        else:
            self.metrics[key] = repr(value)[:200]

    def save_tensor(self, name, t):
        self.tensors[name] = t.detach().to("cpu", copy=True).contiguous()

    def event(self, kind, **fields):
        if self.trace is not None:
            fields["e"] = kind
            self.trace.append(fields)

    def probe(self, name):
        return _Probe(self, name)

    # -- output -------------------------------------------------------------------------------
    def write(self):
        from safetensors.torch import save_file

        out = self.job["out_dir"]
        save_file(self.tensors, os.path.join(out, "tensors.safetensors"))
        doc = {
            "nonce": self._nonce,
            "probes": self.probes,
            "metrics": self.metrics,
            "traces": self.traces,
            "driver_s": _perf_counter() - _T0,
        }
        tmp = os.path.join(out, "observations.json.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, allow_nan=False)
        os.replace(tmp, os.path.join(out, "observations.json"))


class _Probe:
    def __init__(self, ctx, name):
        self.ctx, self.name = ctx, name

    def __enter__(self):
        self.start = _perf_counter()
        self.ctx.probes[self.name] = {"ok": False, "error": "did not finish", "seconds": None}
        return self

    def __exit__(self, etype, exc, tb):
        rec = self.ctx.probes[self.name]
        rec["seconds"] = _perf_counter() - self.start
        self.ctx.trace = None
        if exc is None:
            rec.update(ok=True, error=None)
            return False
        if isinstance(exc, KeyboardInterrupt):
            return False
        if isinstance(exc, ProbeFailed):
            rec["error"] = str(exc)
        elif isinstance(exc, SystemExit):
            rec["error"] = f"the submission called sys.exit({exc.code!r}) during this probe"
        else:
            rec["error"] = _describe(exc, tb)
        return True  # swallow: the next probe still runs


def _describe(exc, tb):
    """`Type: message (file.py:line in func)` pointing at the submission's frame when there is one."""
    frames = traceback.extract_tb(tb)
    where = ""
    for fr in reversed(frames):
        if fr.filename.endswith("submission.py"):
            where = f" (submission.py:{fr.lineno} in {fr.name})"
            break
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ((f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__) + where)[:400]


def _instrument(ctx):
    """Wrap what the scenarios observe; return the originals to check integrity at the end."""
    import torch
    import torch.utils.checkpoint as cp_mod

    real_checkpoint = cp_mod.checkpoint

    def counting_checkpoint(function, *args, **kwargs):
        ctx.event("ckpt", grad=torch.is_grad_enabled(), reentrant=kwargs.get("use_reentrant"))
        return real_checkpoint(function, *args, **kwargs)

    counting_checkpoint.__wrapped__ = real_checkpoint
    counting_checkpoint.__doc__ = real_checkpoint.__doc__
    cp_mod.checkpoint = counting_checkpoint

    real_clocks = {}
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "time"):
        real = getattr(time, name)
        real_clocks[name] = real

        def clock(_real=real, _name=name):
            # only the submission's own clock reads are events (torch may read clocks too)
            if ctx.trace is not None and sys._getframe(1).f_code.co_filename.endswith("submission.py"):
                ctx.event("timer", clock=_name)
            return _real()

        setattr(time, name, clock)

    watched = {
        "torch.utils.checkpoint.checkpoint": (lambda: cp_mod.checkpoint, counting_checkpoint),
        "torch.autograd.graph.saved_tensors_hooks": (
            lambda: torch.autograd.graph.saved_tensors_hooks,
            torch.autograd.graph.saved_tensors_hooks,
        ),
        "torch.Tensor.backward": (lambda: torch.Tensor.backward, torch.Tensor.backward),
        "torch.autograd.backward": (lambda: torch.autograd.backward, torch.autograd.backward),
        "torch.allclose": (lambda: torch.allclose, torch.allclose),
        "torch.equal": (lambda: torch.equal, torch.equal),
        "time.perf_counter": (lambda: time.perf_counter, time.perf_counter),
    }
    if torch.cuda.is_available():
        watched["torch.cuda.synchronize"] = (lambda: torch.cuda.synchronize, torch.cuda.synchronize)
        watched["torch.cuda.max_memory_allocated"] = (
            lambda: torch.cuda.max_memory_allocated,
            torch.cuda.max_memory_allocated,
        )
    return watched


def _load_submission(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module
    spec.loader.exec_module(module)
    return module


def main():
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    with open(sys.argv[1]) as f:
        job = json.load(f)
    sys.path.insert(0, job["course_path"])

    try:  # the grader's own environment; a failure here is the grader's, not the submission's
        import numpy  # noqa: F401  (safetensors.torch needs it to write)
        import safetensors.torch  # noqa: F401
        import torch
    except ImportError as e:
        print(f"grade driver: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(ENV_BROKEN)
    open(os.path.join(job["out_dir"], "env-ok"), "w").close()

    torch.set_num_threads(int(job.get("threads", 1)))
    torch.manual_seed(job["seed"])
    ctx = Ctx(job, nonce)
    watched = _instrument(ctx)

    import importlib.util

    spec = importlib.util.spec_from_file_location("grade_scenario", job["scenario"])
    scenario = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scenario)

    with ctx.probe("load"):
        ctx.sub = _load_submission(job["submission"])
    if ctx.sub is not None:
        scenario.run(ctx)

    tampered = sorted(name for name, (now, orig) in watched.items() if now() is not orig)
    ctx.metric("integrity.tampered", ", ".join(tampered) if tampered else "none")
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
