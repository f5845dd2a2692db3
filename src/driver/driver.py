"""grade's Python driver: runs one submission under one exercise scenario, records observations.

Embedded in the `grade` binary and written to a fresh temporary directory for each run. Protocol:
    python driver.py JOB_JSON            (a nonce arrives as the first line of stdin)
It writes one frame (observations: metrics, traces, probe errors, the nonce; and the tensors) to
the results channel, fd `results_fd` of the job, a pipe the grader reads. Everything the submission could tamper with is captured before the
submission is imported; the grader (Rust) re-derives every verdict from these raw observations.
"""
import json
import os
import sys
import time
import timeit
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
        self.clock = _perf_counter  # the grader's own clock (never virtual, never recorded)
        self.ckpt_calls = 0  # every torch.utils.checkpoint.checkpoint call, traced or not
        self.empty_cache_calls = 0  # every torch.cuda.empty_cache() call (counted on CPU too)
        self.current_probe = None  # the probe running now (names `forwards.<probe>` traces)
        self.lib = None  # lib.py: instruments the scenarios share
        self.virtual_now = None  # set by a scenario: the submission's clocks then read this (seconds)
        self.ProbeFailed = ProbeFailed

    # -- observations -------------------------------------------------------------------------
    def metric(self, key, value):
        if isinstance(value, (list, tuple)):  # a list of numbers stays a JSON list (else repr)
            try:
                items = [v.item() if hasattr(v, "item") else v for v in value]
            except Exception:  # e.g. a tensor of several elements
                items = [None]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items) and all(
                v == v and v not in (float("inf"), float("-inf")) for v in items
            ):
                self.metrics[key] = [float(v) if isinstance(v, float) else v for v in items]
            else:
                self.metrics[key] = repr(value)[:200]
            return
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
        """One frame on the results channel (a pipe the grader reads while the run goes on; fd
        `results_fd`): `GRADE-RESULTS 1 <json bytes> <safetensors bytes>\n`, then both. Nothing
        is written to the run's directory, where the submission (or a process it left behind)
        could rewrite it before the grader reads it."""
        from safetensors.torch import save

        blob = save(self.tensors)
        doc = json.dumps(
            {
                "nonce": self._nonce,
                "probes": self.probes,
                "metrics": self.metrics,
                "traces": self.traces,
                "driver_s": _perf_counter() - _T0,
            },
            allow_nan=False,
        ).encode()
        view = memoryview(b"GRADE-RESULTS 1 %d %d\n" % (len(doc), len(blob)) + doc + blob)
        fd = self.job["results_fd"]
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)


class _Probe:
    def __init__(self, ctx, name):
        self.ctx, self.name = ctx, name

    def __enter__(self):
        self.start = _perf_counter()
        self.ctx.current_probe = self.name
        self.ctx.probes[self.name] = {"ok": False, "error": "did not finish", "seconds": None}
        return self

    def __exit__(self, etype, exc, tb):
        rec = self.ctx.probes[self.name]
        rec["seconds"] = _perf_counter() - self.start
        self.ctx.trace = None
        self.ctx.virtual_now = None
        self.ctx.current_probe = None
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
        ctx.ckpt_calls += 1
        ctx.event("ckpt", grad=torch.is_grad_enabled(), reentrant=kwargs.get("use_reentrant"))
        return real_checkpoint(function, *args, **kwargs)

    counting_checkpoint.__wrapped__ = real_checkpoint
    counting_checkpoint.__doc__ = real_checkpoint.__doc__
    cp_mod.checkpoint = counting_checkpoint

    counting_empty_cache = _install_empty_cache(ctx, torch)
    _install_clocks(ctx)
    _install_cuda_events(ctx, torch)

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
        "torch.testing.assert_close": (lambda: torch.testing.assert_close, torch.testing.assert_close),
        "torch.cuda.empty_cache": (lambda: torch.cuda.empty_cache, counting_empty_cache),
        "torch.cuda.memory.empty_cache": (lambda: torch.cuda.memory.empty_cache, counting_empty_cache),
    }
    for name in ("metric", "save_tensor", "event", "probe", "write"):  # the driver's own recorder
        watched[f"Ctx.{name}"] = (lambda n=name: getattr(Ctx, n), getattr(Ctx, name))
    for name in CLOCKS:
        watched[f"time.{name}"] = (lambda n=name: getattr(time, n), getattr(time, name))
    watched["timeit.default_timer"] = (lambda: timeit.default_timer, timeit.default_timer)
    if torch.cuda.is_available():
        watched["torch.cuda.Event"] = (lambda: torch.cuda.Event, torch.cuda.Event)
        watched["torch.cuda.synchronize"] = (lambda: torch.cuda.synchronize, torch.cuda.synchronize)
        watched["torch.cuda.max_memory_allocated"] = (
            lambda: torch.cuda.max_memory_allocated,
            torch.cuda.max_memory_allocated,
        )
    return watched


# The clocks a submission may time with: name -> (family, nanoseconds?). Reads of one family pair
# up into windows; `_ns` reads keep their integer value so durations are rebuilt exactly.
CLOCKS = {
    "perf_counter": ("perf_counter", False),
    "perf_counter_ns": ("perf_counter", True),
    "monotonic": ("monotonic", False),
    "monotonic_ns": ("monotonic", True),
    "time": ("time", False),
    "time_ns": ("time", True),
}


def _from_submission(depth=2):
    """Was the function `depth` frames up called from the submission's own code?"""
    try:
        return sys._getframe(depth).f_code.co_filename.endswith("submission.py")
    except ValueError:
        return False


def _install_clocks(ctx):
    """Wrap every clock of `CLOCKS` (and `timeit.default_timer`, which `import torch` bound to the
    unwrapped perf_counter): each read the submission makes is a `timer` event carrying the value
    returned, so the grader rebuilds every window's duration. During a virtual-time probe the
    submission's reads return the simulated device's clock instead."""
    import timeit

    for name, (family, ns) in CLOCKS.items():
        real = getattr(time, name)

        def clock(_real=real, _family=family, _ns=ns):
            mine = _from_submission()
            if mine and ctx.virtual_now is not None:
                secs = float(ctx.virtual_now())
                value = int(round(secs * 1e9)) if _ns else secs
            else:
                value = _real()
            if mine and ctx.trace is not None:
                if _ns:
                    ctx.event("timer", clock=_family, v=value / 1e9, ns=value)
                else:
                    ctx.event("timer", clock=_family, v=value)
            return value

        clock.__name__ = name
        setattr(time, name, clock)
    timeit.default_timer = time.perf_counter


def _install_empty_cache(ctx, torch):
    """Count the submission's `torch.cuda.empty_cache()` calls (an `empty_cache` event in the active
    trace), on CPU too, where the real one does nothing: calling it to "fix" memory is a mistake on
    any device. Calls from torch itself or the grader are not counted."""
    import torch.cuda.memory as cuda_memory

    real = cuda_memory.empty_cache

    def empty_cache():
        if _from_submission():
            ctx.empty_cache_calls += 1
            ctx.event("empty_cache")
        return real()

    empty_cache.__wrapped__ = real
    empty_cache.__doc__ = real.__doc__
    torch.cuda.empty_cache = cuda_memory.empty_cache = empty_cache
    return empty_cache


def _install_cuda_events(ctx, torch):
    """On CUDA, `torch.cuda.Event(enable_timing=True)` is a clock too: `record()` is a read of the
    device's own clock (no host sync needed), `elapsed_time()` gives the window's duration."""
    if not torch.cuda.is_available():
        return
    base = torch.cuda.Event
    counter = [0]

    class Event(base):
        def record(self, stream=None):
            if _from_submission():
                counter[0] += 1
                self._grade_id = counter[0]
                ctx.event("timer", clock="cuda_event", id=counter[0])
            return super().record(stream)

        def elapsed_time(self, end_event):
            ms = super().elapsed_time(end_event)
            a, b = getattr(self, "_grade_id", None), getattr(end_event, "_grade_id", None)
            if a is not None and b is not None:
                ctx.event("elapsed", a=a, b=b, v=ms / 1e3)
            return ms

    Event.__name__ = Event.__qualname__ = "Event"
    torch.cuda.Event = Event


def _load_module(name, path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _load_submission(path):
    return _load_module("submission", path)


def main():
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    run_job(sys.argv[1], nonce)


def run_job(job_path, nonce):
    """Grade one job; never returns (os._exit). Called by main() in a fresh interpreter, or by
    zygote.py in a child forked from a warm one (torch already imported)."""
    global _T0
    _T0 = _perf_counter()
    with open(job_path) as f:
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

    lib_py = job.get("lib") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib.py")
    ctx.lib = _load_module("grade_lib", lib_py)
    scenario = _load_module("grade_scenario", job["scenario"])

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
