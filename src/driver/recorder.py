"""The driver's recorder: the grader's clocks, the results channel and what a scenario writes to it.

Part of grade's Python driver (driver.py loads it beside itself as `grade_recorder`, before any
code of the submission exists; embedded in the `grade` binary, src/runner/mod.rs). It owns:
the grader's own clocks (`_perf_counter`, the cost clock `_cost_clock`), `_Channel` (every record
leaves the process the moment it is made, through one gate: `_forged`), `Ctx` (what a scenario
gets: metrics, events, traces, tensors, probes, ticks and tallies), `_Watch` (the instruments and
the grader's modules verified at every probe boundary and instrument call) and `_Probe`.
"""
import gc
import json
import os
import threading
import time
import traceback

import grade_attribution
from grade_attribution import _forged, _tamper, attributed, in_course

_HERE = (lambda: None).__code__.co_filename  # this file, as its code names it
grade_attribution._INTERNAL_FILES.add(_HERE)
_perf_counter = time.perf_counter  # the driver's own clock, captured before any student code
# where the run began on it and on the clock the grader (Rust's `Instant`) starts the run on:
# where the driver's stage timings begin (set again by driver.run_job)
_T0 = _perf_counter()
_clock_gettime, _CLOCK_MONOTONIC = time.clock_gettime, time.CLOCK_MONOTONIC
_T0_MONO = _clock_gettime(_CLOCK_MONOTONIC)
_os_open, _os_write = os.open, os.write
_json_dumps = json.dumps  # the recorder calls what it bound here, never a module attribute
_SCHEDSTAT = "/proc/thread-self/schedstat"  # ns on a CPU, ns waiting on a run queue, timeslices


_os_pread, _getpid, _get_ident = os.pread, os.getpid, threading.get_ident
_SCHEDSTAT_FDS = {}  # (pid, thread) -> the calling thread's schedstat, open


def _run_queue_s():
    """Seconds the calling thread has spent runnable but waiting for a CPU (the kernel's
    schedstat `run_delay`). Each thread's file stays open and is read again from its start: an
    open() at each read cost 20 µs in the sandbox (Landlock walks the path), most of the cost
    clock's time and all of it after the clock's value was taken (the grader's seconds then
    counted as a window's own). A forked child, or another thread, opens its own."""
    key = (_getpid(), _get_ident())
    fd = _SCHEDSTAT_FDS.get(key)
    if fd is None:
        fd = _SCHEDSTAT_FDS[key] = _os_open(_SCHEDSTAT, os.O_RDONLY)
    return int(_os_pread(fd, 128, 0).split()[1]) / 1e9


_process_time, _thread_time = time.process_time, time.thread_time
_gc_get_threshold, _gc_set_threshold = gc.get_threshold, gc.set_threshold


def _cost_clock():
    """The grader's clock for what a computation costs: the wall clock minus the time the
    calling thread waited for a CPU, plus the CPU time the process's other threads spent.
    Running, sleeping and blocking (on the device, a lock, I/O) all count; being descheduled on
    a busy machine does not, so two calls compared on it cost what they would on an idle
    machine, whatever else competes for the cores. Work the process itself runs beside the
    calling thread (torch's intra-op threads, set to many more than the cores, crowding the
    calling thread off its CPU) is its own cost, not the machine's load: graded runs use one
    intra-op thread, so there it adds nothing.

    The wall clock and the run-queue wait are one reading: the wait is read before and after the
    wall clock and again until both agree (it grows only when the thread was switched out). A
    thread preempted between the two reads, as it may be in the very `pread` of schedstat, had
    the whole wait left out of one stamp and not the other: 9 ms of "own" or asleep time in a
    careful window beside busy loops (2026-12-07)."""
    while True:
        r = _run_queue_s()
        p = _perf_counter()
        if _run_queue_s() == r:
            return p - r + (_process_time() - _thread_time())


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
        # the grader's weights and batch, read before the submission exists (see `inputs`)
        with open(job["inputs"], "rb") as f:
            self._inputs = f.read()
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
        # the grader's clock of work (CPU seconds of the process's threads), read beside the cost
        # clock at every stamp (`w`): what a span cost less what it computed is the seconds its
        # thread was neither on a CPU nor waiting for one (a sleep, a blocking wait), no work
        # of a step's on a CPU device (measurement.rs `asleep`). None on CUDA (a sync that
        # blocks is the device's work) and on kernels without schedstat (waiting for a CPU
        # would pass for a sleep)
        schedstat = self.cost_clock is _cost_clock and _cost_clock is not _perf_counter
        self.work_clock = _process_time if schedstat else None
        # the instruments' call counters (`ckpt`: every torch.utils.checkpoint.checkpoint call,
        # `empty_cache`: every torch.cuda.empty_cache() call): see tick() and tally()
        self._counts = {}
        self._counts_lock = threading.Lock()
        self.ckpt_depth = 0  # checkpoint() calls running now (their first forward, not a recompute)
        self.ckpt_grads = []  # ... autograd on or off where each was called, outermost first
        # set by a scenario: what saved-tensors hooks entered now are handed goes to the trace
        # (`saved` events, _install_saved_hooks)
        self.observe_saves = False
        self.current_probe = None  # the probe running now (names `forwards.<probe>` traces)
        self.lib = None  # grade_lib (src/driver/lib/): instruments the scenarios share
        self.virtual_now = None  # set by a scenario: (family, ns) -> what the submission's clocks then read
        self.ProbeFailed = ProbeFailed
        self.attributed = attributed  # the attribution rule, for grade_lib's instruments
        self.in_course = in_course  # whether a frame runs the course package's code
        self.watch = None  # _Watch, from just before the submission is imported
        # seconds of the grader's cost clock spent recording stamped events (a clock read's
        # `timer`, a handed-over call's `call`) outside the calls: carried as `g` on each, so a
        # window's time of the submission's own leaves the grader's writing out (measurement.rs)
        self.overhead = 0.0
        # handed-over calls running now (`lib.integrity`'s call stamps): their seconds are the work's
        self.calls_open = 0
        # the grader's own work, no forgery walk for its records (`grade_attribution._GRANTED`):
        # raised by `lib.sealed` and around the recording of a stamped clock read
        self.granted = grade_attribution._GRANTED
        # where the driver's time went (seconds; `timings` record, sent by write()): its stages in
        # order, and each probe's start (since the driver began), length and recording time
        self.stage_s = {}
        self.probe_times = []

    def inputs(self):
        """The grader's weights and batch (`inputs.safetensors`), fresh tensors on every call, as the
        file was before the submission was imported: read once at set-up, so nothing the run does
        to the file afterwards (its folder is read-only to the run as well) reaches a scenario
        (red team 14 rewrote it during its import, shrinking the work)."""
        from safetensors.torch import load

        return load(self._inputs)

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

    def work(self):
        """`work_clock`'s value now, or None where there is none (the `w` of a stamp)."""
        return None if self.work_clock is None else self.work_clock()

    def event(self, kind, **fields):
        if self._trace is not None:
            fields["e"] = kind
            self._channel.record("event", self._trace_sid, fields)
            self._trace.append(fields)

    def event_after_stamp(self, stamp, kind, **fields):
        """`event`, for one stamped at `stamp` (the cost clock, read just before): its recording is
        the grader's own seconds, not the submission's (`overhead`, as a clock read's, left out of
        the window it falls in), run with the collector off so that none of the submission's code
        (a finalizer of its garbage) runs inside it and passes for the grader's. `g`: the grader's
        recording seconds before it, as on a read (a read's own recording ends at the next event
        that carries one: measurement.rs)."""
        was = gc.isenabled()
        if was:
            gc.disable()
        try:
            self.event(kind, g=self.overhead, **fields)
        finally:
            if was:
                gc.enable()
            # inside a handed-over call its seconds are already the call's (the work), not the
            # window's own: counted again as the grader's they would leave the window twice
            if not self.calls_open:
                self.overhead += self.cost_clock() - stamp

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
    """One probe: its start and end sent, its failure kept to itself (the next probe still runs).

    Python's automatic garbage collection is off while a probe runs, as `timeit` turns it off
    while it times: a collection falls wherever an allocation crosses a threshold — most often
    one of the grader's own (a recorded stamp) — and a young-generation pass after the grader's
    setup lasts milliseconds, a full one 50–150 ms once inductor is loaded; inside a window, that
    pause would be charged to the submission's own time (05-compile's `real_calls_match_windows`
    failed a careful timer so in CI) or to the step it interrupted. Memory then does not depend
    on where a collection fell either. A `gc.collect()` the submission calls still runs (and is
    its own time); collection resumes, as it was, when the probe ends. Off by a zero threshold
    (Python's documented switch), not `gc.disable()`: `gc.isenabled()` stays what the integrity
    gate checks, so a `gc.disable()` the submission leaves behind is still named."""

    def __init__(self, ctx, name):
        self.ctx, self.name = ctx, name

    def __enter__(self):
        if self.ctx.watch is not None:
            self.ctx.watch.check(f"before probe {self.name}")
        self.gc_threshold = _gc_get_threshold()
        _gc_set_threshold(0)
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
        _gc_set_threshold(*self.gc_threshold)
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



def start_clock():
    """The run begins now (`_T0`, `_T0_MONO`): what the stage timings and probe starts count from."""
    global _T0, _T0_MONO
    _T0, _T0_MONO = _perf_counter(), _clock_gettime(_CLOCK_MONOTONIC)
    return _T0
