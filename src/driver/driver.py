"""grade's Python driver: runs one submission under one exercise scenario, records observations.

Embedded in the `grade` binary and written to a fresh temporary directory for each run. Protocol:
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
import json
import os
import sys
import threading
import time
import timeit
import traceback

ENV_BROKEN = 4  # exit status: torch/safetensors/numpy missing (reported as "could not grade")
_perf_counter = time.perf_counter  # the driver's own clock, captured before any student code
_T0 = _perf_counter()
# the clock the grader (Rust's `Instant`) starts the run on: where the driver's stage timings begin
_clock_gettime, _CLOCK_MONOTONIC = time.clock_gettime, time.CLOCK_MONOTONIC
_T0_MONO = _clock_gettime(_CLOCK_MONOTONIC)
_os_open, _os_read, _os_close, _os_write = os.open, os.read, os.close, os.write
_json_dumps = json.dumps  # the recorder calls what it bound here, never a module attribute
_SCHEDSTAT = "/proc/thread-self/schedstat"  # ns on a CPU, ns waiting on a run queue, timeslices


def _run_queue_s():
    """Seconds the calling thread has spent runnable but waiting for a CPU (the kernel's
    schedstat `run_delay`; opened at each read, so a forked child reads its own)."""
    fd = _os_open(_SCHEDSTAT, os.O_RDONLY)
    try:
        return int(_os_read(fd, 128).split()[1]) / 1e9
    finally:
        _os_close(fd)


_process_time, _thread_time = time.process_time, time.thread_time
import gc as _gc_module  # noqa: E402

_gc_isenabled, _gc_disable, _gc_enable = _gc_module.isenabled, _gc_module.disable, _gc_module.enable


def _cost_clock():
    """The grader's clock for what a computation costs: the wall clock minus the time the
    calling thread waited for a CPU, plus the CPU time the process's other threads spent.
    Running, sleeping and blocking (on the device, a lock, I/O) all count; being descheduled on
    a busy machine does not, so two calls compared on it cost what they would on an idle
    machine, whatever else competes for the cores. Work the process itself runs beside the
    calling thread (torch's intra-op threads, set to many more than the cores, crowding the
    calling thread off its CPU) is its own cost, not the machine's load: graded runs use one
    intra-op thread, so there it adds nothing."""
    return _perf_counter() - _run_queue_s() + (_process_time() - _thread_time())


try:  # kernels without schedstat: the wall clock (comparisons then rely on interleaving alone)
    _run_queue_s()
except (OSError, ValueError, IndexError):
    _cost_clock = _perf_counter  # noqa: F811


class ProbeFailed(Exception):
    """A probe cannot go on; the message says why (it becomes the criterion's reason)."""


class _Channel:
    """The results channel (fd `results_fd` of the job, a pipe the grader reads while the run goes
    on). Every record leaves the process the moment it is made, so nothing recorded can be
    rewritten later; the grader, not this process, assembles them. Protocol (version 2):

        GRADE-RESULTS 2 <nonce>\n                    once, before the submission is imported
        J <bytes>\n<json>                            a record: ["metric", key, value],
                                                     ["event", stream, fields], ["trace", name, stream],
                                                     ["rows", name, [rows]], ["row", name, row],
                                                     ["probe", name, record], ["audit", findings],
                                                     ["tick", name] (an instrument was called),
                                                     ["tally", name, n] (its count read: n calls)
        T <bytes>\n<safetensors>                     one named tensor
        J ... ["timings", {...}]                     just before END: where the driver's time went
                                                     (evidence for `timings` in the report, no criterion)
        END <records> <driver seconds>\n             last: how many records came before

    A key, trace name, tensor or probe end written twice, bytes after `END`, a count that does
    not match, or a tally that is not the ticks sent before it fail the run on the grader's side."""

    def __init__(self, fd, nonce):
        global _safetensors_save
        from safetensors.torch import save as _safetensors_save  # bound before the submission exists

        self.fd = fd
        self.sent = 0
        self.spent = 0.0  # seconds spent making and sending records (gate, encoding, writes)
        self._put(b"GRADE-RESULTS 2 %s\n" % nonce.encode())

    def _put(self, data):
        view = memoryview(data)
        while view:
            view = view[_os_write(self.fd, view):]

    def _send(self, data):
        """Send one record, unless the submission is making it (`_forged`): then it is dropped and
        the attempt itself is sent as tampering."""
        forged = _forged()
        if forged is not None:
            _tamper(f"{forged} called by the submission (the grader's recorder)")
            return
        self._put(data)
        self.sent += 1

    def _encode(self, rec):
        """One JSON record as the channel frames it (`J <bytes>` and the JSON)."""
        try:
            doc = _json_dumps(rec, allow_nan=False, separators=(",", ":"))
        except (ValueError, TypeError):
            doc = _json_dumps(_plain(rec), allow_nan=False, separators=(",", ":"))
        data = doc.encode()
        return b"J %d\n" % len(data) + data

    def record(self, *rec):
        t = _perf_counter()
        self._send(self._encode(rec))
        self.spent += _perf_counter() - t

    def tensor(self, name, t):
        t0 = _perf_counter()
        blob = _safetensors_save({name: t})
        self._send(b"T %d\n" % len(blob) + blob)
        self.spent += _perf_counter() - t0

    def record_ungated(self, *rec):
        """Send a record the grader itself decided on below the recorder's gate (`_forged`):
        tampering seen, a policy refusal made on the submission's behalf."""
        self._put(self._encode(rec))
        self.sent += 1

    def close(self, driver_s):
        if _forged() is not None:
            _tamper("_Channel.close called by the submission (the grader's recorder)")
            return
        self._put(b"END %d %r\n" % (self.sent, driver_s))
        os.close(self.fd)


def _plain(x):
    """JSON has no NaN/inf and no arbitrary objects: keep them visible as text."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return repr(x)
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return repr(x)[:200]


class _Traces(dict):
    """`ctx.traces`: assigning a trace sends it. A list that was the live `ctx.trace` (whose
    events already left one by one) is sent as its stream's name only; any other list is sent
    whole, now. Nothing is kept here: what was recorded is the grader's, out of the process."""

    def __init__(self, ctx):
        super().__init__()
        self._ctx = ctx

    def __setitem__(self, name, rows):
        sid = self._ctx._streams.pop(id(rows), (None, None))[0]
        if sid is not None:
            self._ctx._channel.record("trace", name, sid)
        else:
            self._ctx._channel.record("rows", name, list(rows))

    def setdefault(self, name, default=None):  # noqa: D401 - the lib's old append pattern
        raise RuntimeError("grader bug: use ctx.append_row(name, row) to add to a trace")


class Ctx:
    """What a scenario gets: the job, torch, the submission, and places to put observations.

    Observations leave at once (`_Channel`): `metric`, `event` (into the live `ctx.trace`),
    `append_row`, `save_tensor`, assigning `ctx.traces[name]`. No copy stays in the process
    (`metrics` and `traces` stay empty), so nothing recorded can be read or rewritten by the
    submission; `probes` holds only each probe's status."""

    def __init__(self, job, nonce, channel):
        self.job = job
        self._channel = channel
        self._streams = {}  # id(list) -> (stream id, the list): live traces not yet named
        self._next_stream = 0
        self._trace = None
        self._trace_sid = None
        self.params = job["params"]
        self.model_cfg = job["model"]
        self.device = job["device"]
        self.seed = job["seed"]
        self.metrics = {}
        self.traces = _Traces(self)
        self.probes = {}
        self.sub = None
        self.clock = _perf_counter  # the grader's own clock (never virtual, never recorded)
        # the grader's clock for comparing two calls' costs: on CUDA the wall clock (a sync that
        # yields the CPU while the device works would count its queue time as waiting)
        self.cost_clock = _perf_counter if str(self.device).startswith("cuda") else _cost_clock
        # the instruments' call counters (`ckpt`: every torch.utils.checkpoint.checkpoint call,
        # `empty_cache`: every torch.cuda.empty_cache() call): see tick() and tally()
        self._counts = {}
        self._counts_lock = threading.Lock()
        self.ckpt_depth = 0  # checkpoint() calls running now (their first forward, not a recompute)
        # set by a scenario: what saved-tensors hooks entered now are handed goes to the trace
        # (`saved` events, _install_saved_hooks)
        self.observe_saves = False
        self.current_probe = None  # the probe running now (names `forwards.<probe>` traces)
        self.lib = None  # grade_lib (src/driver/lib/): instruments the scenarios share
        self.virtual_now = None  # set by a scenario: the submission's clocks then read this (seconds)
        self.ProbeFailed = ProbeFailed
        self.attributed = attributed  # the attribution rule, for grade_lib's instruments
        self.watch = None  # _Watch, from just before the submission is imported
        # seconds of the grader's cost clock spent recording stamped events (a clock read's
        # `timer`, a handed-over call's `call`) outside the calls: carried as `g` on each, so a
        # window's time of the submission's own leaves the grader's writing out (measurement.rs)
        self.overhead = 0.0
        # where the driver's time went (seconds; `timings` record, sent by write()): its stages in
        # order, and each probe's start (since the driver began), length and recording time
        self.stage_s = {}
        self.probe_times = []

    # -- observations -------------------------------------------------------------------------
    @property
    def trace(self):
        """The event list being recorded (`ctx.trace = trace = []` opens a stream whose events
        leave as they happen; `ctx.traces[name] = trace` names it)."""
        return self._trace

    @trace.setter
    def trace(self, rows):
        self._trace = rows
        if rows is None:
            self._trace_sid = None
            return
        sid = self._next_stream
        self._next_stream += 1
        self._streams[id(rows)] = (sid, rows)
        self._trace_sid = sid

    def tamper(self, what):
        """The submission reached into the grader's work (`what`): the integrity gate fails."""
        _tamper(what)

    def metric(self, key, value):
        value = _metric_value(value)
        self._channel.record("metric", key, value)

    def save_tensor(self, name, t):
        t = t.detach().to("cpu", copy=True).contiguous()
        self._channel.tensor(name, t)

    def tick(self, name):
        """One more call of instrument `name`, sent at once (`["tick", name]`)."""
        with self._counts_lock:
            self._counts[name] = self._counts.get(name, 0) + 1
            self._channel.record("tick", name)

    def tally(self, name):
        """How many calls of instrument `name` so far. The number is sent (`["tally", name, n]`)
        and the grader checks it against the ticks it received: a counter the submission rewrote
        (it lives in this process) fails the run as tampered, so a count read here is the truth."""
        with self._counts_lock:
            n = self._counts.get(name, 0)
            self._channel.record("tally", name, n)
            return n

    def event(self, kind, **fields):
        if self._trace is not None:
            fields["e"] = kind
            self._channel.record("event", self._trace_sid, fields)
            self._trace.append(fields)

    def append_row(self, name, row):
        """Add one row to trace `name` (sent now)."""
        self._channel.record("row", name, row)

    def probe(self, name):
        return _Probe(self, name)

    def audit(self, findings):
        self._channel.record("audit", findings)

    # -- output -------------------------------------------------------------------------------
    def write(self):
        """Close the channel: the driver's timings, then `END` with the number of records sent."""
        self._channel.record("timings", {
            "t0": _T0_MONO, **self.stage_s, "probes": self.probe_times,
            "channel_s": self._channel.spent, "recording_s": self.overhead,
            "end_s": _perf_counter() - _T0,
        })
        self._channel.close(_perf_counter() - _T0)


def _metric_value(value):
    """What a metric holds: a number, text, None, or a list of numbers (else its repr)."""
    if isinstance(value, (list, tuple)):  # a list of numbers stays a JSON list (else repr)
        try:
            items = [v.item() if hasattr(v, "item") else v for v in value]
        except Exception:  # e.g. a tensor of several elements
            items = [None]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items) and all(
            v == v and v not in (float("inf"), float("-inf")) for v in items
        ):
            return [float(v) if isinstance(v, float) else v for v in items]
        return repr(value)[:200]
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return repr(value)  # JSON has no NaN/inf: keep it visible as text
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str)):
        return value
    return repr(value)[:200]


_MISSING = object()


class _Watch:
    """The grader's instruments, verified around every call into the submission (each probe's
    start and end) and at every instrument call (each clock read, checkpoint and empty_cache
    call), not only at the end: the watched functions' identities, and every function, class,
    table and object the grader's own modules (`grade_lib`, the scenario, the course model) held
    before the submission was imported. A patch seen once is sent at once
    (`integrity.seen.<name>`), so restoring it afterwards hides nothing."""

    def __init__(self, ctx, watched, modules):
        self.ctx = ctx
        self.items = list(watched.items())
        dicts = {name: mod if isinstance(mod, dict) else mod.__dict__ for name, mod in modules.items()}
        self.modules = [
            (name, d, [(k, v) for k, v in d.items() if not k.startswith("__")]) for name, d in dicts.items()
        ]
        self.classes = [(cls, dict(cls.__dict__)) for cls in (Ctx, _Channel, _Traces, _Probe, _Watch)]
        self.seen = set()

    def check(self, where):
        bad = [name for name, (now, orig) in self.items if now() is not orig]
        for mname, d, snap in self.modules:
            bad.extend(f"{mname}.{k}" for k, v in snap if d.get(k, _MISSING) is not v)
        for cls, snap in self.classes:
            d = cls.__dict__
            bad.extend(f"{cls.__name__}.{k}" for k, v in snap.items() if d.get(k, _MISSING) is not v)
        for name in bad:
            if name not in self.seen:
                self.seen.add(name)
                self.ctx._channel.record("metric", f"integrity.seen.{name}", where)
        return sorted(set(bad) | self.seen)


class _Probe:
    def __init__(self, ctx, name):
        self.ctx, self.name = ctx, name

    def __enter__(self):
        if self.ctx.watch is not None:
            self.ctx.watch.check(f"before probe {self.name}")
        self.start = _perf_counter()
        self.channel0 = self.ctx._channel.spent
        self.ctx.current_probe = self.name
        self.ctx.probes[self.name] = {"ok": False, "error": "did not finish", "seconds": None}
        self.ctx._channel.record("probe", self.name, None)  # started
        return self

    def __exit__(self, etype, exc, tb):
        rec = self.ctx.probes[self.name]
        rec["seconds"] = _perf_counter() - self.start
        self.ctx.probe_times.append({
            "name": self.name, "start_s": self.start - _T0, "seconds": rec["seconds"],
            "channel_s": self.ctx._channel.spent - self.channel0,
        })
        if self.ctx.watch is not None:
            self.ctx.watch.check(f"after probe {self.name}")
        self.ctx.trace = None
        self.ctx.virtual_now = None
        self.ctx.current_probe = None
        swallow = True  # the next probe still runs
        if exc is None:
            rec.update(ok=True, error=None)
            swallow = False
        elif isinstance(exc, KeyboardInterrupt):
            return False
        elif isinstance(exc, ProbeFailed):
            rec["error"] = str(exc)
        elif isinstance(exc, SystemExit):
            rec["error"] = f"the submission called sys.exit({exc.code!r}) during this probe"
        else:
            rec["error"] = _describe(exc, tb)
        self.ctx._channel.record("probe", self.name, dict(rec))
        return swallow


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
        if ctx.watch is not None:
            ctx.watch.check("during checkpoint()")
        ctx.tick("ckpt")
        ctx.event("ckpt", grad=torch.is_grad_enabled(), reentrant=kwargs.get("use_reentrant"))
        ctx.ckpt_depth += 1  # what runs now runs inside a checkpoint (grade_lib.steps: a block's layers)
        try:
            return real_checkpoint(function, *args, **kwargs)
        finally:
            ctx.ckpt_depth -= 1

    _entry(counting_checkpoint)
    counting_checkpoint.__wrapped__ = real_checkpoint
    counting_checkpoint.__doc__ = real_checkpoint.__doc__
    cp_mod.checkpoint = counting_checkpoint

    observed_hooks = _install_saved_hooks(ctx, torch)
    counting_empty_cache = _install_empty_cache(ctx, torch)
    _install_clocks(ctx)
    _install_cuda_events(ctx, torch)
    threads = _install_threads(ctx)

    watched = {
        "torch.utils.checkpoint.checkpoint": (lambda: cp_mod.checkpoint, counting_checkpoint),
        "torch.autograd.graph.saved_tensors_hooks": (
            lambda: torch.autograd.graph.saved_tensors_hooks,
            observed_hooks,
        ),
        "torch.Tensor.backward": (lambda: torch.Tensor.backward, torch.Tensor.backward),
        "torch.autograd.backward": (lambda: torch.autograd.backward, torch.autograd.backward),
        "torch.allclose": (lambda: torch.allclose, torch.allclose),
        "torch.equal": (lambda: torch.equal, torch.equal),
        "torch.testing.assert_close": (lambda: torch.testing.assert_close, torch.testing.assert_close),
        "torch.cuda.empty_cache": (lambda: torch.cuda.empty_cache, counting_empty_cache),
        "torch.compiler.is_compiling": (lambda: torch.compiler.is_compiling, torch.compiler.is_compiling),
        "torch.cuda.memory.empty_cache": (lambda: torch.cuda.memory.empty_cache, counting_empty_cache),
    }
    for name in ("metric", "save_tensor", "event", "append_row", "probe", "audit", "write"):  # the recorder
        watched[f"Ctx.{name}"] = (lambda n=name: getattr(Ctx, n), getattr(Ctx, name))
    for name in CLOCKS:
        watched[f"time.{name}"] = (lambda n=name: getattr(time, n), getattr(time, name))
    watched["timeit.default_timer"] = (lambda: timeit.default_timer, timeit.default_timer)
    watched.update(threads)
    watched["ctx.clock"] = (lambda: ctx.clock, _perf_counter)
    watched["ctx.cost_clock"] = (lambda: ctx.cost_clock, ctx.cost_clock)
    if torch.cuda.is_available():
        watched["torch.cuda.Event"] = (lambda: torch.cuda.Event, torch.cuda.Event)
        watched["torch.cuda.synchronize"] = (lambda: torch.cuda.synchronize, torch.cuda.synchronize)
        watched["torch.cuda.max_memory_allocated"] = (
            lambda: torch.cuda.max_memory_allocated,
            torch.cuda.max_memory_allocated,
        )
    return watched


def _install_saved_hooks(ctx, torch):
    """`torch.autograd.graph.saved_tensors_hooks`, observed (issue 38: a number is believed only
    when the grader saw the work that made it). While a scenario sets `ctx.observe_saves`, hooks
    entered then push a pack hook that first records what autograd hands it (`saved` events in the
    active trace: the hooks' entry `h`, the storage's `data_ptr` `p` and `nbytes` `n`), then calls
    the submission's; the grader then knows which bytes a submission's hooks were handed in which
    forward (lesson 04: `activation_bytes` is held to them). Always, while the grader measures
    saved bytes (`lib.saved_bytes`), what the submission's pack hook returns is reported to that
    measure (`lib.SAVES_SINKS`): its hooks, innermost, replace the grader's, and what autograd
    keeps is what they return (red team 6: hooks that park every save in a numpy arena, or that
    hide the saves of a forward that checkpoints nothing). Torch's own subclasses of the real
    class (checkpoint's) are not touched. A submission's subclass derives
    from this class (the policy's `bases:` name resolves to it)."""
    import torch.autograd.graph as graph_mod

    real = graph_mod.saved_tensors_hooks
    push = torch._C._autograd._push_saved_tensors_default_hooks
    entries = [0]

    class saved_tensors_hooks(real):
        def __enter__(self):
            def pack(t, _pack=self.pack_hook):
                kept = _pack(t)
                sinks = getattr(ctx.lib, "SAVES_SINKS", None)
                if sinks:  # the grader measures saved bytes now: what autograd keeps is `kept`
                    sinks[-1](t, kept)
                return kept

            _entry(pack)
            if ctx.observe_saves:
                entries[0] += 1
                h = entries[0]
                ctx.event("hooks", h=h)  # entered here: before which forwards (lesson 04)

                def pack(t, _pack=pack, _h=h):
                    try:
                        s = t.untyped_storage()
                        ptr, n = s.data_ptr(), s.nbytes()
                    except (RuntimeError, NotImplementedError, TypeError):
                        ptr = n = None  # no storage to name: nothing the contract counts
                    if ptr is not None:
                        ctx.event("saved", h=_h, p=ptr, n=n)
                    return _pack(t)

                # torch calls it, from the submission's own frame when the op that saves is a C
                # builtin called there (`torch.mul(x, s)` inside the submission's hooks): an entry,
                # as `HostReads.__torch_function__` is; only torch holds it
                _entry(pack)

            push(pack, self.unpack_hook)

    _entry(saved_tensors_hooks.__enter__)  # the submission enters its hooks (`hooks` event)
    saved_tensors_hooks.__module__ = real.__module__
    saved_tensors_hooks.__qualname__ = real.__qualname__
    saved_tensors_hooks.__doc__ = real.__doc__
    graph_mod.saved_tensors_hooks = saved_tensors_hooks
    return saved_tensors_hooks


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


# Files of the submission (set by run_job before it is imported): a call is attributed to the
# submission when `attributed()` finds one of them on the stack (see there).
SUBMISSION_FILES = set()


def _stdlib_dirs():
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths}
    dirs |= {paths[k] for k in ("stdlib", "platstdlib") if k in paths}  # unresolved, as frames name them
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


_STDLIB = _stdlib_dirs()


# torch's own folder (set by run_job once torch is imported): torch's frames are opaque, except
# torch.utils.benchmark, which times a statement on its caller's behalf as timeit does.
_TORCH_DIR = "\0"
_TORCH_BENCHMARK = "\0"
# torch's decorator wrapper (`torch.no_grad()(fn)` calls fn from there): it acts on its caller's
# behalf, as functools does
_TORCH_CONTEXTLIB = "\0"


_TRANSPARENT_FILES = set()  # the policy's guards (policy.py): they act on the submission's behalf


def _timeit_files():
    import timeit

    return {timeit.__file__, os.path.realpath(timeit.__file__)}


_TIMEIT_FILES = _timeit_files()


def _transparent(filename):
    """A frame that acts on its caller's behalf: the standard library (`timeit`, `statistics`,
    `functools`, …), code generated at run time (`<timeit-src>`, `<string>`,
    `exec(compile(src, "<x>", "exec"))`), and installed third-party libraries other than torch
    (numpy reading a tensor for `np.isnan(t)`), plus `torch.utils.benchmark` (torch's timeit).
    torch's other frames are opaque: what torch does for itself (dynamo timing its compile,
    the profiler's clock) is nobody's."""
    if filename.startswith("<") or filename in _TRANSPARENT_FILES or filename == _TORCH_CONTEXTLIB:
        return True
    if "-packages" not in filename:
        return filename.startswith(_STDLIB)
    if filename.startswith(_TORCH_DIR):
        return filename.startswith(_TORCH_BENCHMARK)
    return True


def _reads_for_itself(filename):
    """Is a clock read made directly by code of this file the library's own? A library frame that
    calls a clock itself stamps its own records (`logging` stamps every record it makes, asyncio
    its loop): not a read the submission made, whoever called the library. The code that reads a
    clock *for* its caller is the exception: timeit (its generated loop `<timeit-src>`), code
    generated at run time, the policy's substitutes, torch.utils.benchmark."""
    if filename.startswith("<") or filename in _TRANSPARENT_FILES or filename in _TIMEIT_FILES:
        return False
    if "-packages" not in filename:
        return filename.startswith(_STDLIB)
    return not filename.startswith(_TORCH_DIR)  # torch's frames: `attributed` says whose


def attributed(frame, files=None):
    """The frame of `files` (default: the submission's) that a call made in `frame` is attributed
    to, or None. The rule, the same for every instrument (clocks, `empty_cache`, CUDA events,
    read-backs, constants): walk up from `frame` through standard-library and generated frames;
    the first other frame decides. So `timeit.Timer(stmt, timer=time.perf_counter).repeat(...)`
    called by the submission reads the clock on the submission's behalf, code the submission
    built with `exec(compile(...))` is the submission's, and a read made by torch or by the
    grader is nobody's."""
    files = SUBMISSION_FILES if files is None else files
    f = frame
    while f is not None:
        name = f.f_code.co_filename
        if name in files:
            return f
        if not _transparent(name):
            return None
        f = f.f_back
    return None


# The grader's own files whose functions the submission has no business calling directly: the
# driver (this file) and grade_lib's modules (added when it is loaded). What the submission is handed or what
# torch calls on its behalf from its frames (the clocks, the checkpoint counter, the read-back
# modes, the observed model's forward) is an *entry* (`_ENTRIES`, code objects).
_INTERNAL_FILES = {_run_queue_s.__code__.co_filename}
_ENTRIES = set()
_TAMPERED = set()
_ctx = None  # the run's Ctx (run_job), for `_tamper`


def _entry(fn):
    """Mark `fn` as an entry: the submission may call it (see `_INTERNAL_FILES`)."""
    _ENTRIES.add(fn.__code__)
    return fn


def _forged():
    """Is a record being made on the submission's own initiative? Walking up from the recorder
    (`_Channel._send`'s caller), the last frame before the first submission frame that is not a
    transparent one (`_transparent`) is the function the submission called. A record is the
    submission's forgery when that function is the grader's own internal code (`_INTERNAL_FILES`)
    and not an entry: `ctx.event(...)`, `observer.forward(...)`, `channel.record(...)` called by
    the submission, however it got hold of them. Records made below torch (a hook that torch calls
    during the submission's forward), below an entry (a clock read) or below a scenario's function
    handed to the submission (`step()`, `sync()`) are the grader's. Returns the called function's
    name, or None."""
    if not SUBMISSION_FILES:
        return None
    f = sys._getframe(1)
    called = f.f_code
    f = f.f_back
    while f is not None:
        code = f.f_code
        name = code.co_filename
        if name in SUBMISSION_FILES:
            if called.co_filename in _INTERNAL_FILES and called not in _ENTRIES:
                return getattr(called, "co_qualname", called.co_name)
            return None
        if not _transparent(name):
            called = code
        f = f.f_back
    return None


def _tamper(what):
    """The submission reached into the grader (`what`): sent at once as `integrity.seen.<what>`
    (so the run's observations are not trusted) and kept for `integrity.tampered`."""
    ctx = _ctx
    if ctx is None or what in _TAMPERED:
        return
    _TAMPERED.add(what)
    if ctx.watch is not None:
        ctx.watch.seen.add(what)
    ctx._channel.record_ungated("metric", f"integrity.seen.{what}", ctx.current_probe or "?")


def _grader_only(fn, label):
    """`fn` (a helper of grade_lib) that records tampering when the submission calls it itself."""

    def guarded(*args, **kwargs):
        if _from_submission(2):
            _tamper(f"{label} called by the submission (a grader helper)")
        return fn(*args, **kwargs)

    guarded.__name__, guarded.__qualname__, guarded.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return guarded


def _lib_modules(lib):
    """`grade_lib` and its modules (`grade_lib.memory`, …), by name."""
    prefix = lib.__name__ + "."
    return {name: mod for name, mod in list(sys.modules.items()) if name == lib.__name__ or name.startswith(prefix)}


def _guard_lib(lib):
    """The library's module-level helpers (in the package and each of its modules) become
    grader-only (`_grader_only`); its `ENTRY_POINTS` (what torch or the submission may call: the
    observed forward, the read-back modes) are entries."""
    import types

    modules = _lib_modules(lib)
    files = {mod.__file__ for mod in modules.values()}
    _INTERNAL_FILES.update(files)
    for fn in getattr(lib, "ENTRY_POINTS", ()):
        _entry(fn)
    for mod in modules.values():
        for name, fn in list(vars(mod).items()):
            if (
                not name.startswith("_")
                and isinstance(fn, types.FunctionType)
                and fn.__code__.co_filename in files
                and fn.__code__ not in _ENTRIES
            ):
                setattr(mod, name, _grader_only(fn, f"grade_lib.{name}"))


def _from_submission(depth=2):
    """Was the function `depth` frames up called on the submission's behalf (`attributed`)?"""
    try:
        return attributed(sys._getframe(depth)) is not None
    except ValueError:
        return False


def _from_submission_past_torch(depth=2):
    """As `_from_submission`, past torch's own frames first (as lib.HostReads attributes a
    read-back): a counted call the submission makes through a torch wrapper
    (`torch.no_grad()(torch.cuda.empty_cache)()`) is still its own. For what hiding would help a
    submission (a call counted against it); clocks keep the plain rule (torch's own clock reads,
    dynamo timing its compile, are nobody's)."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return False
    while f is not None and f.f_code.co_filename.startswith(_TORCH_DIR):
        f = f.f_back
    return f is not None and attributed(f) is not None


def _install_clocks(ctx):
    """Wrap every clock of `CLOCKS` (and `timeit.default_timer`, which `import torch` bound to the
    unwrapped perf_counter): each read the submission makes is a `timer` event carrying the value
    returned, so the grader rebuilds every window's duration. A read a library makes for itself
    (`_reads_for_itself`: a `logging` record's stamp) is not the submission's. During a
    virtual-time probe the submission's reads return the simulated device's clock instead."""
    import timeit

    for name, (family, ns) in CLOCKS.items():
        real = getattr(time, name)

        def clock(_real=real, _family=family, _ns=ns):
            # a library reading the clock for itself (logging's record stamps) is nobody's
            mine = not _reads_for_itself(sys._getframe(1).f_code.co_filename) and _from_submission()
            if mine and ctx.watch is not None:
                ctx.watch.check("during a clock read")
            stamped = mine and ctx.trace is not None
            # the grader's recording of a stamped read runs none of the submission's code: no
            # garbage collection (a finalizer of its garbage, a generator's `finally`) inside it,
            # where its seconds would be taken for the grader's own (`g`, subtracted from windows)
            gc_was = stamped and _gc_isenabled()
            if gc_was:
                _gc_disable()
            try:
                # `c`: the grader's cost clock where the value is read, after the grader's own
                # check: what the window's work is compared with (`call` events)
                c = ctx.cost_clock() if stamped else None
                if mine and ctx.virtual_now is not None:
                    secs = float(ctx.virtual_now())
                    value = int(round(secs * 1e9)) if _ns else secs
                else:
                    value = _real()
                if c is not None:
                    # `g`: the grader's own seconds spent recording so far (`Ctx.overhead`)
                    if _ns:
                        ctx.event("timer", clock=_family, v=value / 1e9, ns=value, c=c, g=ctx.overhead)
                    else:
                        ctx.event("timer", clock=_family, v=value, c=c, g=ctx.overhead)
                    ctx.overhead += ctx.cost_clock() - c
            finally:
                if gc_was:
                    _gc_enable()
            return value

        clock.__name__ = name
        _entry(clock)
        setattr(time, name, clock)
    timeit.default_timer = time.perf_counter


def _install_empty_cache(ctx, torch):
    """Count the submission's `torch.cuda.empty_cache()` calls (an `empty_cache` event in the active
    trace), on CPU too, where the real one does nothing: calling it to "fix" memory is a mistake on
    any device. Calls from torch itself or the grader are not counted."""
    import torch.cuda.memory as cuda_memory

    real = cuda_memory.empty_cache

    def empty_cache():
        if _from_submission_past_torch():
            ctx.tick("empty_cache")
            ctx.event("empty_cache")
        return real()

    _entry(empty_cache)
    empty_cache.__wrapped__ = real
    empty_cache.__doc__ = real.__doc__
    torch.cuda.empty_cache = cuda_memory.empty_cache = empty_cache
    return empty_cache


# What a thread the submission starts means: torch keeps its modes and saved-tensors hooks per
# thread, and so the grader's instruments made of them (the read-back counter, the bytes a forward
# keeps, the saved-bytes hooks) see only the thread that called the submission.
THREAD_FINDING = {
    "code": "threads",
    "what": "thread started",
    "zh": "评分期间启动了线程：评分器的测量工具（和 torch 的 mode、saved-tensors hooks 一样）只看得到"
          "调用你的那个线程，别的线程里做的事不会被测量；请在调用你的线程上完成（见 README 的接口说明）",
    "en": "starts a thread while being graded: the grader's instruments (like torch's modes and "
          "saved-tensors hooks) see only the thread that called you, so work done in another thread "
          "goes unmeasured; do it on the calling thread (see the contract in README.md)",
}


def _install_threads(ctx):
    """A thread started on the submission's behalf (`attributed`: `threading.Thread.start`, a
    `concurrent.futures` pool's `submit`, `_thread.start_new_thread`) is a runtime finding of the
    audit, sent at once as `integrity.thread.<line>` (once per line): the integrity criterion fails,
    naming the line. Threads torch starts for itself are nobody's. Returns the watched entries."""
    import _thread
    import threading

    watched, lines = {}, set()
    for mod, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                      (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
        real = getattr(mod, name, None)
        if real is None:
            continue

        def start(*args, _real=real, **kwargs):
            f = attributed(sys._getframe(1))
            if f is not None and f.f_lineno not in lines:
                lines.add(f.f_lineno)
                ctx._channel.record("metric", f"integrity.thread.{f.f_lineno}",
                                    dict(THREAD_FINDING, line=f.f_lineno, col=0))
            return _real(*args, **kwargs)

        _entry(start)
        start.__name__ = start.__qualname__ = name
        start.__doc__ = real.__doc__
        setattr(mod, name, start)
        watched[f"{mod.__name__}.{name}"] = (lambda m=mod, n=name: getattr(m, n), start)
    return watched


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
                ctx.event("timer", clock="cuda_event", id=counter[0], c=ctx.cost_clock())
            return super().record(stream)

        def elapsed_time(self, end_event):
            ms = super().elapsed_time(end_event)
            a, b = getattr(self, "_grade_id", None), getattr(end_event, "_grade_id", None)
            if a is not None and b is not None:
                ctx.event("elapsed", a=a, b=b, v=ms / 1e3)
            return ms

    _entry(Event.record)
    _entry(Event.elapsed_time)
    Event.__name__ = Event.__qualname__ = "Event"
    torch.cuda.Event = Event



def _profiler_without_inductor(torch):
    """Every profiler start asks `hasattr(torch, "_inductor")` (torch/profiler/profiler.py,
    `prepare_trace`) only to read inductor's cudagraphs switch, which is off unless inductor is
    loaded; torch's lazy module `__getattr__` answers by importing inductor and with it dynamo
    (~0.8 s of a cold grading of lessons 02 and 06). Asked from that frame while inductor is not
    loaded, the answer is "no attribute": what it would be if torch did not import on `hasattr`.
    Every other lookup goes to torch's own `__getattr__`; once inductor is imported (by
    `torch.compile`, or by anyone) the attribute is in the module and this is never asked."""
    lazy = torch.__dict__.get("__getattr__")
    prepare = getattr(getattr(torch.profiler.profiler, "_KinetoProfile", None), "prepare_trace", None)
    if lazy is None or prepare is None:
        return
    asker = prepare.__code__

    def __getattr__(name):
        if name == "_inductor" and sys._getframe(1).f_code is asker:
            raise AttributeError(name)
        return lazy(name)

    torch.__getattr__ = __getattr__

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
    _TRANSPARENT_FILES.update({policy.__file__, os.path.abspath(policy.__file__)})
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


def run_job(job_path, nonce):
    """Grade one job; never returns (os._exit). Called by main() in a fresh interpreter, or by
    zygote.py in a child forked from a warm one (torch already imported)."""
    global _T0, _T0_MONO
    _T0, _T0_MONO = _perf_counter(), _clock_gettime(_CLOCK_MONOTONIC)
    with open(job_path) as f:
        job = json.load(f)
    sys.path.insert(0, job["course_path"])

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
    stage_s, lap = {}, [_perf_counter()]

    def stage(name):  # the seconds since the last stage ended, as `name` (the `timings` record)
        now = _perf_counter()
        stage_s[name] = now - lap[0]
        lap[0] = now

    stage_s["imports_s"] = lap[0] - _T0
    torch.set_num_threads(int(job.get("threads", 1)))
    torch.manual_seed(job["seed"])
    _profiler_without_inductor(torch)
    global _ctx, _TORCH_DIR, _TORCH_BENCHMARK, _TORCH_CONTEXTLIB
    _TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
    _TORCH_BENCHMARK = os.path.join(_TORCH_DIR, "utils", "benchmark") + os.sep
    _TORCH_CONTEXTLIB = os.path.join(_TORCH_DIR, "utils", "_contextlib.py")
    ctx = _ctx = Ctx(job, nonce, _Channel(job["results_fd"], nonce))
    ctx.stage_s = stage_s
    watched = _instrument(ctx)

    lib_py = job.get("lib") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "__init__.py")
    ctx.lib = _load_module("grade_lib", lib_py, package=True)
    _guard_lib(ctx.lib)
    scenario = _load_module("grade_scenario", job["scenario"])
    scenario.ProbeFailed = ProbeFailed  # what each scenario's run() binds it to, bound now
    stage("setup_s")  # the channel, the instruments, grade_lib and the scenario loaded

    # The grader's own answers, computed before the submission exists and sent at once; nothing
    # of them stays behind (the hook keeps no reference; a collection frees what it made).
    before = getattr(scenario, "before_submission", None)
    if before is not None:
        before(ctx)
        del before
        import gc

        gc.collect()
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

    ctx.watch = _Watch(
        ctx,
        watched,
        # the driver's own globals too: its captured clocks and os functions
        {"grade_driver": globals(), **_lib_modules(ctx.lib), "grade_scenario": scenario,
         "course.model": course_model, "grade_policy": policy},
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
