"""Lesson 2 scenario: what the grader runs against profile_training(), top_ops() and verify().

Each probe records raw observations (metrics, event traces); verdicts are decided in Rust from
rubrics/02-profiler.yaml. Probes:
  reference  the grader's own profile of the same TinyGPT training step, made before the
             submission is imported (schedule warmup=1, active=steps): its ranking by a
             cost load cannot reorder (`least_cost`: least self time of a call × calls, per op
             and input shapes; `reference.top`) and its event count (`reference.events`;
             record_shapes/profile_memory do not change the count, with_stack adds about 60%)
  profile    the submission's profile_training(train_step, steps=...), called twice. Every call
             of the grader's train_step is a `step` event saying whether a profiler was recording
             (`active`, torch's own flag); the profiler's switches are `profiler` events between
             them; a `recorded` event, sent as a recording stops, for each step whose work (its
             GEMM calls, as many as a step of the grader's own profile holds, stamped inside the
             step's window) is in that recording's raw results. From those results — the last
             recording of the call, parsed by torch's own code in the grader's, never from the
             object returned, which must merely be the torch profiler holding them — the grader
             records the event count, the ranking top_ops must reproduce (`profile.runN.topK`),
             and every operator by name with its call count (`profile.runN.calls`; a with_stack
             profile's Python-function rows, named by frame and address, left out), and every
             row of its key_averages() as it is (`profile.runN.rows`: a row top_ops lists must be
             one of these, with the same self time and calls)
  top_ops    the submission's top_ops(prof, k) for each k and each run (`top_ops.runN.topK`)
  verify     the submission's verify(op, baseline_step, candidate_step) in three calls
             (`verify.call1..3`), each with a candidate whose truth the grader draws per grading
             from this process's secret (`candidate_draw`): fast (¼ of the op's work) or slow
             (4×), its output right or one element off; both speeds and both answers occur
             among the three calls, and each call's truth goes to Rust with its answer
             (`verify.callN.truth.*`, the rubric's `same_as`). Red team 5 answered outputs_close
             by call number, red team 7 by elimination over a published set of three: no fixed
             answer, order or elimination is right in advance (a blind guess: 1 in 6).
             Every step call is a `step` event (variant baseline/candidate, its input's
             fingerprint `fp` — Rust labels it against the first step's —, whether a profiler
             was recording) and, when a recording holds its calls of the op, a `recorded` event;
             warm-up = whole calls made with nothing recording before the first recorded one
             (each recording window is also a pair of `timer` reads, `profiler#N`, which no
             criterion reads now). The grader times the op inside every call itself, so the
             submission's per-step numbers are checked against the very calls it profiled.
             Each step's output goes back as an `Output` (a tensor watched by `OutputWatch`):
             the first torch call that reads it is an `output_read {id, variant}` event, and
             outputs_close is believed only when a baseline and a candidate output made on one
             input were read in that call (Rust, `outputs_read`).

Instrument: when this scenario is loaded (before the submission is imported) the profiler's
switches in torch.autograd.profiler (_prepare_profiler, _enable_profiler, _disable_profiler —
used by torch.profiler.profile and torch.autograd.profiler.profile alike) are wrapped: each real
switch is a `profiler {switch: prepare|enable|disable}` event in the active trace, and each
recording window is a pair of `timer` reads (`profiler#N`). The watch keeps no phase: the grader
derives each step's phase (none → warmup → record → none) in Rust from the order of the switch
events before it (`phase` check kind), so nothing the submission can reach says "warm-up".
`profiler.tampered` names any switch that was replaced by the end. `_disable_profiler`'s return —
torch's raw results of the recording, before the submission gets them back — is kept in the
watch's record of the call (`CallRecord`): what a recording holds is read there (issue 38: the
grader's own record, not the submission's object; a paused collection or a profile of other work
is seen).

Out of the submission's reach (issue 17): the grader's own profile (`reference.*`) is made and
recorded in `before_submission`, before the submission is imported; its recomputation of each
returned profile (`profile.runN.*`) is made from the grader's own copy of the recording's raw
results and recorded as soon as profile_training returns, before top_ops runs; the op time of each verify call is an event of that call (`step_done {op_us}`),
and the per-step mean over the profiled calls is computed in Rust (`per_call` check kind), so no
Python object holds an answer the submission could rewrite. The candidates' truth (which is
faster, which is wrong) is the rubric's.
"""
import itertools
import math
import os
import random
import sys
import time
from bisect import bisect_left as _bisect_left, bisect_right as _bisect_right
from copy import copy as _copy
from hashlib import sha256 as _sha256
from types import SimpleNamespace as _Namespace

import numpy as _np
import torch
import torch.autograd.profiler as _autograd_profiler
import torch.autograd.profiler_util as _profiler_util
import torch.profiler.profiler as _torch_profiler

from course import Config, TinyGPT

_allclose = torch.allclose
_profiler_enabled = torch._C._autograd._profiler_enabled
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
# what the grader reads of a profiler's results, bound before the submission is imported: torch's
# own parser of a recording's raw results and its event list (the same code `key_averages()`
# runs), the clock torch stamps every recorded event with (unix ns), the profile types
_time_ns = time.time_ns
_record_function = torch.autograd.profiler.record_function
_no_grad = torch.no_grad
_parse_kineto = _autograd_profiler.profile._parse_kineto_results
_EventList = _profiler_util.EventList
_CUDA = torch.profiler.ProfilerActivity.CUDA
_PROFILES = {
    _torch_profiler.profile: "profiler",  # torch.profiler.profile: its autograd profile inside
    _torch_profiler._KinetoProfile: "profiler",
    _autograd_profiler.profile: None,  # torch.autograd.profiler.profile: itself
}
# the ops whose recorded calls prove a training step's work was recorded (its GEMMs: every
# linear, attention product and their gradients)
MATMULS = frozenset({"aten::mm", "aten::addmm", "aten::bmm"})
# the ops of the profile the grader makes for top_ops() (`Lesson.foreign`): five drawn per grading
FOREIGN_OPS = ("tanh", "sigmoid", "exp", "relu", "neg", "abs", "sin", "cos")
_TorchProfile = torch.profiler.profile
_lib = sys.modules.get("grade_lib")  # the driver loads grade_lib before this module
_sealed = _lib.sealed
ProbeFailed = Exception  # replaced by the driver's class in run()


def _fingerprint(x):
    """What identifies an input handed to a step: shape, strides (its memory layout), dtype,
    device and a digest of its bytes. Equal values in another layout are another input (red team
    25: the candidate timed on its own column-major copy of x, the warm-up on a transposed one:
    the op takes another kernel path on another layout)."""
    if not isinstance(x, torch.Tensor):
        return f"not a tensor: {type(x).__name__}"
    # (a copy of the grader's, hashed in place: SHA-256 has the CPU's instructions, ~4x
    # blake2b's speed on a step's 0.5 MiB input, which two fingerprints per step pay)
    flat = x.detach().to("cpu", copy=True).contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy() if flat.numel() else b""
    return f"{tuple(x.shape)} {tuple(x.stride())} {x.dtype} {x.device} {_sha256(raw).hexdigest()[:32]}"


ROLES = ("baseline", "candidate")
# The step's real bottleneck, drawn per grading from the process's secret (below): one op of this
# pool run inside every training step on a tensor of the grader's, sized by `reference()` so that
# it costs about as much as the model's own step, twice its largest GEMM or more, and so leads
# the step's ranking on any machine (red team 7: a top_ops() naming the GEMMs every TinyGPT step
# is known to be dominated by, in a fixed order, with their numbers looked up, found "the
# bottleneck" without ranking anything). It runs inside a `record_function("prepare_batch")`
# range, as a data step of a training loop would: ranked by total time, that range leads, not
# the op (the outer wrappers lead by total time, which is the lesson's point).
HOT_OPS = {
    "sort": lambda t: torch.sort(t, -1).values,
    "logcumsumexp": lambda t: torch.logcumsumexp(t, -1),
    "mode": lambda t: torch.mode(t, -1).values,
    "topk": lambda t: torch.topk(t, 8, -1).values,
    "lgamma": lambda t: torch.lgamma(t),
    "digamma": lambda t: torch.digamma(t),
    "polygamma": lambda t: torch.polygamma(1, t),
    "i0": lambda t: torch.i0(t),
    "i1": lambda t: torch.special.i1(t),
}
# (no op that records itself nested in an event of its own name, as kthvalue and median do: that
# row's total time counts the work twice and would lead a by-total ranking over the range; the
# tensors hold values in [0.5, 1.5), away from the gamma functions' poles)
# (ops whose work per element is large, so the tensor stays small: an elementwise op of the same
# cost needs ~100 MB, whose allocations made its time swing 2× between steps)
HOT_COLS, HOT_MAX_ROWS = 256, 1 << 15  # the hot tensor: [rows, 256] float32, at most 32 MiB
HOT_DECOY_ROWS = 8  # the other ops of the pool run in the range too, on 8 rows (a few µs each)
HOT_SHARE = 0.8  # its op's time over the model's own step's, by the grader's clock
HOT = {}  # "kind" and "ops" ((op, x) pairs) once reference() has sized them: each step runs op(x)


VERIFY_CALLS = 3
# What verify() is handed, drawn per grading from a secret of this process (os.urandom, when the
# scenario is loaded, before the import), not from the seed, which torch hands back
# (`torch.initial_seed()`). Red team 5 answered outputs_close by call number while the order was
# fixed; red team 7, with the order drawn, by elimination over the published set (two right, one
# wrong, the slow one right): 1 in 2. Now each call's speed and rightness are drawn, with both
# speeds and both answers among the calls (so no constant answer is ever right for all of them):
# 6 of the 8 patterns of answers are possible, and a blind guess is right in 1 of 6 gradings.
_SECRET = random.SystemRandom().getrandbits(64)


def candidate_draw(ops):
    """This grading's candidates, one per verify call: (speed "fast"/"slow", right: bool, the
    op named: one of `ops`, at least two of them among the calls, so no name written down in
    advance is the one asked about in every call; red team 25 ignored `op`)."""
    rng = random.Random(f"{_SECRET}/verify/draw")
    while True:
        calls = tuple((rng.choice(("fast", "slow")), rng.random() < 0.5, rng.choice(ops))
                      for _ in range(VERIFY_CALLS))
        if all(len({c[i] for c in calls}) >= 2 for i in range(3)):
            return calls


def whole_linear(a, b):
    """Do two recordings of s₁ and s₂ steps hold the same work, per step and per recording? Each
    operator's calls in the whole recording (work between the steps included) must be α·s + β in
    both, with whole α, β ≥ 0: work done every step, and work done once per recording (red team
    28: 600 extra calls of an op the training also makes, in the first call's recording only,
    between its steps, where neither the per-step rows nor the names showed them). "yes", or the
    first operators that fit no such count."""
    (s1, c1), (s2, c2) = a, b
    bad = []
    for name in sorted(set(c1) | set(c2)):
        n1, n2 = c1.get(name, 0), c2.get(name, 0)
        if s1 == s2:
            ok = n1 == n2
        else:
            alpha, rest = divmod(n1 - n2, s1 - s2)
            ok = rest == 0 and alpha >= 0 and n1 - alpha * s1 >= 0
        if not ok:
            bad.append(f"{name}: {n1} in {s1} steps, {n2} in {s2}")
    return "yes" if not bad else "; ".join(bad[:4]) + (f"; … {len(bad) - 4} more" if len(bad) > 4 else "")


def faster_held(rec, waits, truth):
    """What `faster` is held to in one verify call: the truth, unless the machine's load could
    have reversed what the call's profiles show. A profile's self time is wall time: a step
    preempted inside its op's calls (a busy machine: other gradings, other jobs) reads slower than
    its work, and a 4x-faster candidate measured in three steps has read slower than the baseline
    beside three other gradings. The grader's reading of the recorded steps (torch's parse, the
    figure `verify_times_agree` holds the reported times to) shows one variant faster; when that
    is not the truth, and each variant's recorded steps waited for a CPU (`waits`: wall less cost
    clock, inside the step) long enough on average to account for it, the answer is held to what
    the profiles show, the number a careful student reads; otherwise to the truth. A submission
    gains nothing by it: the reported times must still be the profile's, and `faster` must follow
    them."""
    mean = {}
    for variant in ("baseline", "candidate"):
        ks = [k for k, v, _, _ in (rec.credited if rec is not None else ()) if v == variant and k in rec.self_us]
        if not ks:
            return truth
        mean[variant] = (sum(rec.self_us[k] for k in ks) / len(ks),
                         sum(waits.get(k, 0.0) for k in ks) / len(ks) * 1e6)
    (b, wb), (c, wc) = mean["baseline"], mean["candidate"]
    shown = c < b
    if shown == truth:
        return truth
    # could the work, each figure less its waits at most, be the truth?
    return shown if (c - wc < b if truth else c > b - wb) else truth


def steps_draw(choices):
    """The `steps` each profile_training() call is handed: two different values of `choices`,
    in an order drawn per grading (red team 25: `steps` ignored and 3 written in, while the
    grader always asked for 3)."""
    return random.Random(f"{_SECRET}/profile/steps").sample([int(c) for c in choices], 2)


def profiler_settings(args):
    """What a recording was made with, as a string (`ProfilerConfig` keeps its fields in C++):
    the profiler kind, record_shapes, profile_memory, with_stack, with_flops, with_modules, and
    the experimental config's fields (its pickled state: red team 28 changed only those)."""
    names = ("kind", "record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
    out = [f"{n}={getattr(a, 'name', a)}" for n, a in zip(names, args)]
    if len(args) > 6:
        try:
            state = args[6].__getstate__()
        except (AttributeError, TypeError, RuntimeError):
            state = type(args[6]).__name__
        out.append(f"experimental={state!r}")
    return ", ".join(out)


class CallRecord:
    """What the grader saw of one call of the submission's function (kept in the watch, never
    handed over): the steps it ran, each with its window on torch's event clock, and the raw
    results of every recording that stopped during the call, as torch returned them."""

    def __init__(self):
        self.pending = []  # (id, variant, t0, t1, {op: calls needed} or None: the watch's)
        self.windows = []  # (results, activities) of each recording stopped, in order
        self.stops = []  # when each of them stopped (torch's event clock, ns)
        self.credited = []  # (id, variant, {op: calls}, index of the recording) of each step seen recorded
        # (t0, t1, index of the recording) of each step seen recorded (torch's event clock, ns)
        self.spans = []
        # (t0, t1) of the grader's own records at the profiler's switches, sealed: a recording
        # holds their writes (a with_stack profile lists them), and they are the grader's
        self.own = []
        self.settings = []  # what each recording stopped was made with (`profiler_settings`)
        self.self_us = {}  # id -> the op's self time in a verify step seen recorded (torch's parse)


class ProfilerWatch:
    """Wraps the profiler's switches: a `profiler {switch}` event per real switch, and the
    recording windows as `timer` pairs. No phase is kept here (see the module docstring).

    Each recording's results (`_disable_profiler`'s return, straight from torch) are the
    grader's record of what was profiled: a step that ran inside the recording counts as
    recorded (a `recorded {id, variant, ops}` event, sent as the recording stops) only when the
    results hold its work — for each of its ops, at least as many calls as the step makes,
    stamped inside its window — so a step run while collection was paused (even for part of
    it), or under a profiler that records no CPU ops, is not;
    and the profile the submission returns is ranked from these results, never from the object."""

    NAMES = ("_prepare_profiler", "_enable_profiler", "_disable_profiler")

    def __init__(self):
        self.ctx = None
        self.windows = 0
        self.call = None  # CallRecord of the submission's call running now
        self.activities = None  # of the recording running now
        self.step_need = None  # {GEMM: calls} of one training step, from the grader's own profile
        self.real = {n: getattr(_autograd_profiler, n) for n in self.NAMES}
        self.mine = {}
        for n in self.NAMES:
            wrapper = getattr(self, n)
            wrapper.__func__.__wrapped__ = self.real[n]
            self.mine[n] = wrapper
            setattr(_autograd_profiler, n, wrapper)
        # the settings of each config torch's profilers make (`ProfilerConfig` is opaque once
        # made): both torch.profiler.profile and the older autograd profile make theirs through
        # this name; the config a recording starts with is looked up by identity
        self.configs = {}  # id(config) -> (config, settings); the last few only
        self.settings = None  # of the recording running now
        self.filters = {}  # the activity filters of the last prepare
        real_config = self.real_config = _autograd_profiler.ProfilerConfig
        configs = self.configs

        def ProfilerConfig(*args, **kwargs):
            config = real_config(*args, **kwargs)
            if len(configs) > 16:
                configs.clear()
            configs[id(config)] = (config, profiler_settings(args))
            return config

        ProfilerConfig.__wrapped__ = real_config
        self.mine["ProfilerConfig"] = ProfilerConfig
        _autograd_profiler.ProfilerConfig = ProfilerConfig

    def begin(self):
        self.call = CallRecord()

    def end(self):
        rec, self.call = self.call, None
        return rec

    def ran(self, k, variant, t0, t1, need=None):
        """A step the grader handed over ran from t0 to t1 (torch's event clock); `need`: the
        calls of each op its work makes (None: a training step, `step_need`). A recording that
        stopped while the step ran holds part of it: the step is judged against it now (issue 38,
        round 4: a step a recording stopped inside was left pending and dropped, so a recording
        could hold a step's work that no count saw), and stays pending for a later one."""
        rec = self.call
        if rec is None:
            return
        p = (k, variant, t0, t1, need)
        for i, stop in enumerate(rec.stops):
            if t0 < stop < t1:
                self._judge([p], i)
        rec.pending.append(p)

    def _event(self, kind, **fields):
        if self.ctx is not None:
            self.ctx.event(kind, **fields)

    def _mark(self, clock):
        if self.ctx is not None:
            self.ctx.event("timer", clock=clock, v=self.ctx.clock())

    def _own(self, *records):
        """Write the grader's `records` (thunks) of a switch sealed (nothing of the submission's
        runs inside), their window noted in the call's record (`CallRecord.own`): a recording
        that holds their writes holds the grader's work, as a step's records are."""
        rec, ctx = self.call, self.ctx
        if rec is None or ctx is None:
            for r in records:
                r()
            return
        with _sealed(ctx):
            t0 = _time_ns()
            for r in records:
                r()
            rec.own.append((t0, _time_ns()))

    def _prepare_profiler(self, *args, **kwargs):
        # the activities' filters (`activities={CUDA: [...]}`): part of the recording's settings,
        # and a filtered CUDA is no CUDA activity recorded in full
        filters = kwargs.get("activity_filter", args[2] if len(args) > 2 else None)
        self.filters = {str(k).rsplit(".", 1)[-1]: sorted(map(str, v)) for k, v in (filters or {}).items()}
        out = self.real["_prepare_profiler"](*args, **kwargs)
        self._own(lambda: self._event("profiler", switch="prepare"))
        return out

    def _enable_profiler(self, *args, **kwargs):
        out = self.real["_enable_profiler"](*args, **kwargs)
        self.activities = args[1] if len(args) > 1 else kwargs.get("activities")
        config = args[0] if args else kwargs.get("config")
        known = self.configs.get(id(config))
        self.settings = known[1] if known is not None and known[0] is config else "a config of its own"
        self.windows += 1
        self._own(lambda: self._event("profiler", switch="enable"), lambda: self._mark(f"profiler#{self.windows}"))
        return out

    def _disable_profiler(self, *args, **kwargs):
        self._own(lambda: self._mark(f"profiler#{self.windows}"), lambda: self._event("profiler", switch="disable"))
        stop = _time_ns()
        result = self.real["_disable_profiler"](*args, **kwargs)
        if self.call is not None:
            kept = frozenset(a for a in self.activities or () if str(a).rsplit(".", 1)[-1] not in self.filters)
            self.call.windows.append((result, kept))
            acts = sorted(str(a).rsplit(".", 1)[-1] for a in self.activities or ())
            self.call.settings.append(f"{self.settings}, activities={'+'.join(acts)}, filters={self.filters}")
            self.call.stops.append(stop)
            self._credit(stop)
        return result

    def _credit(self, stop):
        """The steps that ended before this recording stopped, judged against its results."""
        rec = self.call
        judged = [p for p in rec.pending if p[3] <= stop]
        rec.pending = [p for p in rec.pending if p[3] > stop]
        if judged:
            self._judge(judged, len(rec.windows) - 1)

    def _judge(self, judged, window):
        """Each step of `judged` counts as recorded (a `recorded` event) when the results of the
        call's recording number `window` hold its work (see the class's doc)."""
        rec = self.call
        result, activities = rec.windows[window]
        needs = [self.step_need if p[4] is None else p[4] for p in judged]
        names = frozenset(MATMULS).union(*(n for n in needs if n))
        stamps = {}
        for e in result.events():
            n = e.name()
            if n in names:
                stamps.setdefault(n, []).append(e.start_ns())
        for v in stamps.values():
            v.sort()
        own = None  # the self time of each verify step's op calls in this recording (parsed once)
        for (k, variant, t0, t1, _), need in zip(judged, needs):
            ops = {}
            for n in names if need is None else need:
                v = stamps.get(n, ())
                ops[n] = _bisect_right(v, t1) - _bisect_left(v, t0)
            if need is None:  # the grader's own profile, measuring what a step makes
                ok = sum(ops.values()) > 0
            else:
                ok = all(ops[n] >= c for n, c in need.items())
            # one recording holds one step's calls: a call of the other step in a recording that
            # already holds some of this one's is not profiled on its own ("a profile of its own
            # for each step, or one per call"; red team 6 recorded both, interleaved, in one)
            mixed = variant is not None and any(
                w == window and v is not None and v != variant for _, v, _, w in rec.credited)
            if ok and not mixed:
                rec.credited.append((k, variant, ops, window))
                rec.spans.append((t0, t1, window))
                total = sum(ops.values())
                if variant is None:
                    self._event("recorded", id=k, ops=total)
                else:
                    if own is None:
                        own = self._self_times(result, names, activities)
                    self_us = sum(t for n in need for s, t in own.get(n, ()) if t0 <= s <= t1)
                    rec.self_us[k] = self_us
                    self._event("recorded", id=k, variant=variant, ops=total, self_us=self_us)
            elif sum(ops.values()) > 0:  # some of its work, not all: not profiled, but in the profile
                self._event("recorded_part", id=k, ops=sum(ops.values()))

    def _self_times(self, result, names, activities):
        """{op: [(start on torch's event clock in ns, self time in µs)]} of the recording's calls
        of `names`: torch's own parse of the results (what `key_averages()` sums: self device time
        on CUDA, self CPU time otherwise), so a step's `self_us` is the very figure its profile
        holds for it (issue 38: the submission's per-step time is held to this, not to a clock)."""
        use_device = "cuda" if _CUDA in activities else None
        cuda = self.ctx is not None and str(self.ctx.device).startswith("cuda")
        events = _EventList(_parse_kineto(_Namespace(use_device=use_device), result), use_device=use_device)
        events._build_tree()
        start = result.trace_start_ns()
        out = {}
        for e in events:
            if e.name in names:
                t = e.self_device_time_total if cuda else e.self_cpu_time_total
                out.setdefault(e.name, []).append((start + round(e.time_range.start * 1000), float(t)))
        return out

    def tampered(self):
        return [n for n in self.mine if getattr(_autograd_profiler, n) is not self.mine[n]]


WATCH = ProfilerWatch()  # installed now: the scenario is loaded before the submission

_Tensor = torch.Tensor
_mm, _addmm, _bmm = torch.mm, torch.addmm, torch.bmm  # the products verify's steps make
_np_bool = _np.bool_
_no_subclass = torch._C.DisableTorchFunctionSubclass  # bound before the submission is imported


class OutputWatch:
    """The outputs the steps of the verify call running now handed back, and which of them the
    submission read: the first torch function or method that takes one (`torch.allclose`, `a - b`,
    `.numpy()`, `.tolist()`, `assert_close`, …) is an `output_read {id, variant}` event in the
    call's trace, sent as it happens (red team 5: outputs_close answered by call number, no output
    ever looked at). Rust believes outputs_close only when a baseline output and a candidate
    output, made on one input, were both read in that call (`outputs_read`)."""

    def __init__(self):
        self.ctx = None
        self.live = None  # {id(output): (output, step id, variant)} of the call now; None between
        self.read = set()
        self.busy = 0  # a grader step is running: what it reads (an output fed back as x) is nobody's

    def begin(self, ctx):
        self.ctx, self.live, self.read = ctx, {}, set()

    def end(self):
        self.live, self.read = None, set()

    def hand(self, out, k, variant):
        """`out` as handed back to the submission: an `Output` (the same tensor, watched)."""
        if self.live is None or not isinstance(out, _Tensor):
            return out
        o = out.as_subclass(Output)
        self.live[id(o)] = (o, k, variant)
        return o

    def carry(self, src, out):
        """What a call that keeps the values made of a watched output (a detached view, a copy, a
        reshape, a cast) is that output to the watch: reading it reads the output, and the call
        itself read nothing (red team 7: `.detach()` of each output counted as reading it, with
        no value looked at)."""
        live = self.live
        hit = live.get(id(src)) if live else None
        if hit is None or hit[0] is not src or self.busy or not isinstance(out, _Tensor):
            return out
        o = out.as_subclass(Output)
        live[id(o)] = (o, hit[1], hit[2])
        return o

    def note(self, args, kwargs):
        live = self.live
        if not live or self.busy:
            return
        found = []
        _tensors(args, found, 0)
        if kwargs:
            _tensors(tuple(kwargs.values()), found, 0)
        for t in found:
            hit = live.get(id(t))
            if hit is not None and hit[0] is t and hit[1:] not in self.read:
                self.read.add(hit[1:])
                self.ctx.event("output_read", id=hit[1], variant=hit[2])


def _tensors(xs, out, depth):
    """The tensors among `xs` (lists, tuples and dicts opened three levels deep: `torch.stack([a, b])`)."""
    for x in xs:
        if isinstance(x, _Tensor):
            out.append(x)
        elif depth < 3 and isinstance(x, (list, tuple)):
            _tensors(x, out, depth + 1)
        elif depth < 3 and isinstance(x, dict):
            _tensors(tuple(x.values()), out, depth + 1)


OUTPUTS = OutputWatch()


# What a torch call may ask of an output without reading a value: its metadata (red team 6: a
# baseline output "read" through `.shape`, and the candidate's compared with a baseline rebuilt
# elsewhere). Anything else takes its values (or could).
_METADATA = frozenset((
    "shape", "size", "dim", "ndim", "ndimension", "dtype", "device", "layout", "numel", "nelement",
    "__len__", "stride", "storage_offset", "is_contiguous", "requires_grad", "is_cuda", "is_cpu",
    "element_size", "is_floating_point", "is_complex", "names", "nbytes", "itemsize", "grad_fn",
    "is_leaf", "__hash__",
    # where the values are, not what they are (red team 12: `data_ptr()` and `is_same_size` of
    # each output were "reads" of outputs never compared)
    "data_ptr", "is_same_size", "get_device", "is_pinned", "is_shared",
))

# calls that hand back the output's values unread (a view, a copy, a cast): their result is
# watched as the same output (`OutputWatch.carry`)
_CARRIES = frozenset((
    "detach", "clone", "contiguous", "view", "view_as", "reshape", "reshape_as", "flatten", "ravel",
    "to", "float", "double", "cpu", "cuda",
))


class Output(torch.Tensor):
    """A verify step's output, as the submission gets it: a plain tensor in every respect but one,
    that the first torch call taking it that reads values is noted (`OutputWatch`; asking its
    shape or dtype reads none). What it computes is torch's own, with the subclass off, so the
    result is a plain tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name == "__get__":  # a property's getter (`.shape`, `.dtype`): the property's name
            name = getattr(getattr(func, "__self__", None), "__name__", "")
        if name in _CARRIES and args and isinstance(args[0], Output):
            with _no_subclass():
                out = func(*args, **(kwargs or {}))
            return OUTPUTS.carry(args[0], out)
        if name not in _METADATA:
            OUTPUTS.note(args, kwargs)
        with _no_subclass():
            return func(*args, **(kwargs or {}))


def every_row(events, cuda, averages=None):
    """Every key_averages() row of a recording (torch's EventList, as `prof.key_averages()`
    makes them: ProfilerStep markers and a with_stack profile's Python-function rows included),
    by self time (device time on CUDA); stable sort, as sorted(..., reverse=True) orders ties.
    What any row a submission lists must be (`profile.runN.rows`): its name, self time, calls.
    `averages`: `events.key_averages()` when already made."""
    rows = []
    for e in events.key_averages() if averages is None else averages:
        t = e.self_device_time_total if cuda else e.self_cpu_time_total
        rows.append({"e": "op", "name": e.key, "self_us": float(t), "calls": int(e.count)})
    rows.sort(key=lambda r: r["self_us"], reverse=True)
    return rows


def ranking(rows):
    """The grader's own ranking of a recording: its rows (`every_row`) without the ProfilerStep
    markers, in the same order."""
    return [r for r in rows if not r["name"].startswith("ProfilerStep")]


def operator_rows(events, rows):
    """`rows` without the Python-function rows of a `with_stack=True` profile: their names carry
    frames and memory addresses (`<built-in method ... at 0x...>`, `file.py(N): f`), so two runs
    of the same work never name them alike. What a run recorded is its operators."""
    python = {e.name for e in events if getattr(e, "is_python_function", False)}
    return [r for r in rows if r["name"] not in python]


_EDGE_NS = 2_000  # a parsed event's start is rounded to the µs: what a step's edges may be off by


def in_steps(events, rec):
    """The events of the call's last recording that ran inside a step the grader saw recorded in
    it (its window on torch's event clock), and the ProfilerStep markers: what the recording holds
    of the training. Work the submission ran between the steps (a large op of its own, made to
    top the ranking: red team 6; a Python loop of its own in a with_stack profile: red team 17)
    is no part of the training's profile, so no row of it is one the grader ranks or one
    top_ops() may list."""
    last = len(rec.windows) - 1
    steps = sorted((t0, t1) for t0, t1, w in rec.spans if w == last)
    # the steps' windows, and the grader's own sealed records at the switches (`CallRecord.own`)
    spans = sorted(steps + list(rec.own))
    start = rec.windows[last][0].trace_start_ns()

    def encloses_step(e):
        """Does a with_stack frame of the grader's `train_step` hold one of the steps' windows
        (its own frame: what its self time is, besides the step's, is the grader's code)?"""
        a = start + round(e.time_range.start * 1000)
        b = start + round(e.time_range.end * 1000)
        i = _bisect_left(steps, (a - _EDGE_NS,))  # the first step that began after the frame did
        return i < len(steps) and steps[i][1] <= b + _EDGE_NS

    def inside(e):
        if e.name.startswith("ProfilerStep"):
            return True  # the markers
        if getattr(e, "is_python_function", False) and _graders(e, encloses_step):
            return True
        # every other event by where it ran, a with_stack profile's Python frames too: a frame
        # has self time of its own (red team 17: a pure-Python loop of the submission's between
        # the steps, all self time, ranked first as "the bottleneck"), whatever file it is in
        # (red team 18: the submission's own work run through the grader's files); the grader's
        # records of a step are written inside its window (`train_step`)
        t = start + round(e.time_range.start * 1000)  # µs in the parse: ±1 µs at the edges
        i = _bisect_right(spans, (t + _EDGE_NS, float("inf"))) - 1
        return i >= 0 and spans[i][0] - _EDGE_NS <= t <= spans[i][1] + _EDGE_NS

    kept = _EventList([e for e in events if inside(e)], use_device=getattr(events, "_use_device", None))
    kept._tree_built = True  # the events keep the tree `events` built (building again adds children twice)
    return kept


def _of(e, code):
    """Is `e` torch's Python-tracer event of a frame of `code`? The tracer names it `path(first
    line): name`, the path its file's own, whole or shortened to a tail (`02-profiler/scenario.py`
    under a folder on sys.path)."""
    tail = f"({code.co_firstlineno}): {code.co_name}"
    if not e.name.endswith(tail):
        return False
    path, full = e.name[: -len(tail)], code.co_filename
    return bool(path) and full.endswith(path) and (path == full or full[-len(path) - 1] == os.sep)


def _graders(e, encloses_step):
    """Is a with_stack profile's Python frame `e` one of the grader's own frames around the steps,
    known by its code, not its file (red team 18 ran its own work through grader files): the
    grader's `train_step` around a step it ran, the watch's switch wrappers, and the seal and
    bookkeeping those call themselves (careful students 19: under load their self time, outside
    the steps' windows, ranked in a careful with_stack profile's top 5), and a built-in any of
    those frames calls itself (the seal's `getattr`s outside the windows: ranked third in a
    careful with_stack profile, four calls more in the whole recording than in the training's,
    2026-12-07). A Python frame a built-in or a collection runs inside them is an event of its
    own, held to the windows."""
    if _of(e, _TRAIN_STEP_CODE):
        return encloses_step(e)
    if any(_of(e, c) for c in _WATCH_CODES):
        return True
    up = getattr(e, "cpu_parent", None)
    if up is None:
        return False
    if e.name.startswith("<built-in") and getattr(up, "is_python_function", False):
        return _graders(up, encloses_step)
    caller = (_of(up, _TRAIN_STEP_CODE) and encloses_step(up)) or any(_of(up, c) for c in _WATCH_CODES)
    return caller and any(_of(e, c) for c in _CALLED_CODES)


def recorded_events(prof, rec):
    """The grader's own record of the profile profile_training() returned: torch's parse of the
    raw results of the last recording that stopped during the call (what a torch profile object
    reports: a profiler that records again starts a new profile), as an EventList; or the reason
    there is none (a str). The returned object must be the torch profiler whose results those
    are; anything else (an object of the submission's own, a profile of other work) is not the
    profile of this call. Nothing is read from the object but which results it holds."""
    if not rec.windows:
        return "profile_training() recorded nothing: no profiler recording stopped during the call"
    result, activities = rec.windows[-1]
    elsewhere = [k for k, _, _, w in rec.credited if w != len(rec.windows) - 1]
    if elsewhere:
        return (
            f"profile_training() recorded {len(elsewhere)} training step(s) in a recording before its last one: "
            "the profile it returns (a torch profile holds its last recording) must hold the recorded steps"
        )
    kind = type(prof)
    if kind not in _PROFILES:
        return (
            "profile_training() must return the torch.profiler.profile object that recorded the steps; "
            f"got {kind.__name__}"
        )
    inner = getattr(prof, _PROFILES[kind]) if _PROFILES[kind] else prof
    if getattr(inner, "kineto_results", None) is not result:
        return (
            "profile_training() must return the profiler that recorded the steps: the object returned "
            "does not hold the last recording made during the call"
        )
    use_device = getattr(inner, "use_device", None)
    events = _EventList(_parse_kineto(_Namespace(use_device=use_device), result), use_device=use_device)
    events._build_tree()
    return events, activities


def hand_over(prof, events, averages=None):
    """Once the grader's answers about a recording are sent, give its parse of the recording to
    the profile object when the object has not parsed it yet: torch would parse the same results
    the same way when top_ops() first asks, so the grading pays for one parse, not two. With
    `averages` (the grader's `events.key_averages()`), the parse's `key_averages()` with torch's
    default grouping hands out a copy of those rows instead of aggregating the events again, as
    it would on every call (each row copied: what a submission does to its rows stays its own).
    What the object holds from then on is no concern of the grader's (its answers have left)."""
    key = _PROFILES.get(type(prof), 0)
    inner = prof if key is None else getattr(prof, key, None) if key else None
    if (
        inner is not None
        and getattr(inner, "_function_events", 0) is None
        and getattr(inner, "_needs_processing", False)
        and not getattr(inner, "acc_events", False)
    ):
        if averages is not None:
            aggregate = events.key_averages

            def key_averages(group_by_input_shapes=False, group_by_stack_n=0, group_by_overload_name=False):
                if group_by_input_shapes or group_by_stack_n or group_by_overload_name:
                    return aggregate(group_by_input_shapes, group_by_stack_n, group_by_overload_name)
                return _EventList([_copy(a) for a in averages], use_device=averages._use_device,
                                  profile_memory=averages._profile_memory, with_flops=averages._with_flops)

            events.key_averages = key_averages
        inner._function_events = events
        inner._needs_processing = False


def least_cost(prof, cuda, recorded=1, steps=1):
    """The grader's ranking of its own profile, made so that load cannot reorder it: calls of one
    op with the same input shapes do the same work, and a busy machine only ever adds time to a
    call (a preempted process bills the pause to the op it was in), so an op's cost is the least
    self time of a call × the number of calls, summed over its shapes. Rows: name, `self_us` (that
    cost) and `calls`, for `steps` steps from a profile of `recorded` steps alike."""
    groups = {}
    for e in prof.events():
        if e.name.startswith("ProfilerStep"):
            continue
        t = e.self_device_time_total if cuda else e.self_cpu_time_total
        g = groups.setdefault((e.name, str(e.input_shapes)), [math.inf, 0])
        g[0] = min(g[0], float(t))
        g[1] += 1
    cost, calls = {}, {}
    for (name, _), (least, n) in groups.items():
        cost[name] = cost.get(name, 0.0) + least * n
        calls[name] = calls.get(name, 0) + n
    rows = [{"e": "op", "name": n, "self_us": c * steps / recorded, "calls": calls[n] * steps // recorded}
            for n, c in cost.items()]
    rows.sort(key=lambda r: r["self_us"], reverse=True)
    return rows


def number(v, *, integral=False, what="value"):
    """A submission's number as a plain int/float (lib.number: numpy scalars, 0-d tensors, any
    numbers.Real accepted), or the reason it is not one (a str)."""
    if _lib is None:  # grade_lib missing: the old rule
        if hasattr(v, "item") and getattr(v, "numel", lambda: 1)() == 1:
            v = v.item()
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and v == v
        return (int(v) if integral else v) if ok else f"{what} is not a number: {v!r}"[:120]
    try:
        x = _lib.number(v, integral=integral, what=what)
    except TypeError as e:  # lib.NotANumber
        return str(e)[:160]
    return x if x == x else f"{what} is NaN"


def boolean(v):
    """`True`/`False` from a bool, a numpy bool or a one-element plain tensor; None otherwise. Only
    those exact types: reading the answer runs none of the submission's code (red team 12: an
    object of its own whose `.item()` ran after verify() returned, calling a kept step to learn
    the truth)."""
    if type(v) is bool:
        return v
    if type(v) is _np_bool:
        return bool(v)
    if type(v) in (_Tensor, Output) and v.numel() == 1 and v.dtype == torch.bool:
        with _no_subclass():
            return bool(v.item())
    return None


# The probes use these helpers through default arguments bound when this module was loaded
# (before the submission is imported): replacing them in this module afterwards
# (`sys.modules["grade_scenario"].ranking = ...`) changes nothing the grader computes, and the
# driver's watch names the replacement in `integrity.tampered`.


class Lesson:
    def __init__(self, ctx):
        self.ctx = ctx
        self.device = torch.device(ctx.device)
        self.cuda = self.device.type == "cuda"
        inputs = ctx.inputs()
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.batch = {
            "idx": inputs["batch/idx"].to(self.device),
            "targets": inputs["batch/targets"].to(self.device),
        }
        self.profiles = {}

    def need(self, name):
        fn = getattr(self.ctx.sub, name, None)
        if not callable(fn):
            raise ProbeFailed(f"exercise.py defines no function `{name}` (see the contract in README.md)")
        return fn

    def activities(self):
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        return acts

    def model(self):
        m = self.ctx.model_cfg
        cfg = Config(
            vocab=m["vocab"],
            seq_len=m["seq_len"],
            d_model=m["d_model"],
            n_heads=m["n_heads"],
            n_blocks=m["n_blocks"],
            dropout=0.0,
        )
        model = TinyGPT(cfg)
        model.load_state_dict(self.weights, strict=True)
        return model.to(self.device).train()

    def train_step(self, _enabled=_profiler_enabled, _watch=WATCH, _now=_time_ns):
        """One training step (zero_grad, forward + loss, backward) of a fresh model; every call
        is a `step` event saying whether a profiler was recording (torch's own flag), and its
        window is handed to the watch, which sends `recorded` when a recording holds its GEMMs."""
        ctx, model, batch = self.ctx, self.model(), self.batch
        ids = itertools.count()

        hot = HOT.get("ops") or ()

        def train_step():
            # none of the submission's code runs inside (a hook, a finalizer), from the first
            # clock read to the last: the step's window holds the grader's work only, its records
            # of the step included (a with_stack profile lists their writes), so every event of a
            # recording is held to these windows, whoever's frame it is (red team 18 ran its own
            # work through the grader's files between the steps: the course's Python's guards,
            # the clock wrappers; a frame's file says nothing about when it ran)
            with _sealed(ctx):
                k = next(ids)
                t0 = _now()
                ctx.event("step", id=k, active=bool(_enabled()))
                if hot:  # the step's real bottleneck (`HOT_OPS`) among decoys, in a range of
                    with _record_function("prepare_batch"):  # its own, as a data step would be
                        for op, x in hot:
                            op(x)
                model.zero_grad(set_to_none=True)
                _, loss = model(batch["idx"], batch["targets"])
                loss.backward()
                out = loss.detach()  # inside the step's window: every op of the step is in it
                ctx.event("step_done", id=k)
                t1 = _now()
            _watch.ran(k, None, t0, t1)
            return out

        return train_step

    def size_hot(self, _now=_time_ns, _sync=_synchronize):
        """Draw this grading's hot op (`HOT_OPS`, the process's secret) and size its tensor: the
        model's own step and the op on a small tensor timed in turn, three pairs on the grader's
        clock (each pair in the same moment, so load stretches both), the tensor's rows scaled
        so that the op takes `HOT_SHARE` of a step. Once per grading, before any step is profiled."""
        if HOT:
            return
        rng = random.Random(f"{_SECRET}/hot")
        kind = rng.choice(sorted(HOT_OPS))
        op = HOT_OPS[kind]
        gen = torch.Generator().manual_seed(rng.getrandbits(62))
        rows = 256
        model, batch = self.model(), self.batch
        sync = _sync if self.cuda else (lambda: None)

        def step():
            model.zero_grad(set_to_none=True)
            _, loss = model(batch["idx"], batch["targets"])
            loss.backward()

        def ratio(x):
            """The model's step over op(x), from three pairs timed in turn: the least of each
            (a busy machine only ever adds time to a call, so the least is the one load touched
            least, as `least_cost` ranks). The median of the pairs' ratios moved with every
            preempted sub-millisecond op call: beside two busy loops one solution grading in 76
            saw the op fall out of its profile's top 3."""
            step(), op(x), sync()  # warm
            steps, ops = [], []
            for _ in range(3):
                t0 = _now()
                step()
                sync()
                t1 = _now()
                op(x)
                sync()
                t2 = _now()
                steps.append(t1 - t0)
                ops.append(t2 - t1)
            return min(steps) / max(min(ops), 1)

        # (each op of the pool does enough work per row that a call's fixed cost weighs little
        # at `rows` rows: the time scales with the rows)
        def tensor(n):
            return (torch.rand(n, HOT_COLS, generator=gen) + 0.5).to(self.device)

        small = tensor(rows)
        scale = max(1, min(HOT_MAX_ROWS // rows, round(HOT_SHARE * ratio(small))))
        # every op of the pool runs in the range, in an order drawn per grading, the others on a
        # few rows only (red team 8 named the leader as the range's one child, or as the pool's
        # one op present in the profile)
        ops = [(op, tensor(rows * scale))]
        for other in sorted(HOT_OPS):
            if other != kind:
                ops.append((HOT_OPS[other], tensor(HOT_DECOY_ROWS)))
        rng.shuffle(ops)
        HOT.update(kind=kind, ops=tuple(ops))
        self.ctx.metric("reference.hot_rows", rows * scale)

    # -- probes -------------------------------------------------------------------------------
    def reference(self, _least=least_cost, _watch=WATCH):
        """The grader's own profile of the same training step (run before the submission is
        imported when the driver has `before_submission`), ranked by each op's least-per-call
        cost (see `least_cost`), and the GEMM calls one recorded step holds (`reference.step_ops`:
        what a step of the submission's profile must hold to count as recorded). Recorded at
        once; the watch keeps the step count."""
        steps = steps_draw(self.ctx.params["steps"])
        self.size_hot()
        step = self.train_step()
        # two recorded steps: every step is the same work (the same ops on the same shapes), so the
        # events of `steps` steps are `steps` / 2 times two steps'; an op's least per-call cost is
        # a least over its calls of one shape, which two steps give every op at least twice (an
        # op called once a step, preempted once, does not overtake the hot op)
        sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
        _watch.step_need = None
        _watch.begin()
        try:
            with torch.profiler.profile(activities=self.activities(), schedule=sched, record_shapes=True) as prof:
                for _ in range(3):
                    step()
                    prof.step()
        finally:
            rec = _watch.end()
        # each GEMM's calls in one recorded step (the least over the recorded steps: all alike)
        need = {}
        for _, _, ops, _ in rec.credited:
            for n, c in ops.items():
                need[n] = min(need.get(n, c), c)
        _watch.step_need = {n: c for n, c in need.items() if c > 0} or {"aten::mm": 1}
        self.ctx.metric("reference.step_ops", sum(_watch.step_need.values()))
        # the events of each run's `steps` recorded steps (each step's ProfilerStep marker included)
        for run, n in zip(("run1", "run2"), steps):
            self.ctx.metric(f"reference.{run}.events", len(prof.events()) * n // 2)
        self.ctx.traces["reference.top"] = _least(prof, self.cuda, 2, 3)[:20]

    def profile(self, _every=every_row, _ranking=ranking, _operators=operator_rows, _recorded=recorded_events,
                _in_steps=in_steps, _hand_over=hand_over, _watch=WATCH):
        """profile_training() twice. What is judged of each call is the grader's own record of
        it (see `recorded_events`): its steps seen recorded (`recorded` events), and the ranking,
        event count, calls and activities of the last recording it made, parsed from torch's raw
        results by the grader, never read from the object returned."""
        fn = self.need("profile_training")
        ctx = self.ctx
        whole = {}  # run -> (steps seen recorded, {operator: calls in the whole recording})
        for run, steps in zip(("run1", "run2"), steps_draw(ctx.params["steps"])):
            # two different step counts, drawn per grading: what each call records is held to
            # the `steps` it was handed (`profiles_exactly_steps`)
            ctx.metric(f"profile.{run}.steps", steps)
            step = self.train_step()
            ctx.trace = trace = []
            _watch.begin()
            try:
                prof = fn(step, steps=steps)
            except BaseException:
                ctx.traces[f"profile.{run}"] = trace  # what the call did before it failed
                raise
            finally:
                ctx.trace = None
                rec = _watch.end()
            seen = _recorded(prof, rec)
            if isinstance(seen, str):  # not the profile of this call: none of the call is judged
                raise ProbeFailed(seen)
            events, activities = seen
            ctx.traces[f"profile.{run}"] = trace
            self.profiles[run] = prof
            # the grader's answers about this profile, recorded before top_ops() sees it
            # its operators' events (a with_stack profile's Python frames, the grader's own ones
            # inside the steps among them, are no bigger a trace of the training)
            ops = sum(1 for e in events if not getattr(e, "is_python_function", False))
            ctx.metric(f"profile.{run}.events", ops)
            averages = events.key_averages()  # the whole recording's rows, made once
            kept = _in_steps(events, rec)
            same = len(kept) == len(events)
            every = _every(kept, self.cuda, averages if same else None)
            # the training's rows: what ran inside the recorded steps (`in_steps`), as
            # key_averages() would have them: a row top_is_bottleneck credits must be one of
            # these, with its numbers (the submission's work between the steps is no part of it)
            ctx.traces[f"profile.{run}.rows"] = every
            # the whole recording's rows (the same rows when every event ran inside the steps: no
            # second aggregation): what key_averages() of the returned profile holds, so what
            # top_ops(prof) ranks; top_ops_match and top_ops_calls hold its list to these. Python
            # frames outside the steps are in it (a careful with_stack profile's loop, torch's
            # `prof.step()`, the course's guards): under load a preempted one ranked in its top 5
            # (careful students 19, red team 20's run), which the training's rows do not hold
            listed = every if same else _every(events, self.cuda, averages)
            ranking_rows = _ranking(listed)
            ctx.traces[f"profile.{run}.listed"] = listed
            # what the two runs recorded, for `profile_reproducible` (a with_stack profile's
            # Python-function rows left out: `operator_rows`). The runs record different step
            # counts, so the training's operators are compared per recorded step (`per_step`),
            # and every operator of the whole recording (work between the steps included) must
            # be the same work per step and per recording in both (`whole_linear`); and the two
            # recordings' settings as they are. Steps are those the grader saw recorded: a call
            # that recorded fewer than it was asked fails profiles_exactly_steps, not this.
            last = len(rec.windows) - 1
            seen_steps = sum(1 for *_, w in rec.credited if w == last) or 1
            whole[run] = (seen_steps, {r["name"]: r["calls"] for r in _operators(events, ranking_rows)})
            training = sorted(_operators(events, _ranking(every)), key=lambda r: r["name"])
            ctx.traces[f"profile.{run}.per_step"] = [
                {"e": "op", "name": r["name"], "calls": r["calls"] / seen_steps} for r in training]
            ctx.metric(f"profile.{run}.settings", rec.settings[-1])
            for k in ctx.params["k"]:
                ctx.traces[f"profile.{run}.top{int(k)}"] = ranking_rows[: int(k)]
            if self.cuda:
                ctx.metric(f"profile.{run}.cuda_activity", "yes" if _CUDA in activities else "no")
            _hand_over(prof, events, averages)
        ctx.metric("profile.whole_linear", whole_linear(whole["run1"], whole["run2"]))

    def foreign(self, _every=every_row, _ranking=ranking, _profile=_TorchProfile):
        """A profile of the grader's own making for top_ops() to rank: ops drawn per grading from
        the process's secret, each run a drawn number of times, so its ranking is known only to
        whoever reads the profile (red team 25: a top_ops() that replayed the rankings it had
        queued while profile_training() ran, by call number, never reading `prof`). Its rows
        (`profile.foreign.*`) are made as the runs' are, from the grader's own parse."""
        draw = random.Random(f"{_SECRET}/top_ops/foreign")
        names = draw.sample(FOREIGN_OPS, 5)
        counts = draw.sample([1, 3, 8, 20, 50], 5)
        gen = torch.Generator().manual_seed(draw.getrandbits(62))
        x = torch.randn(64, 256, generator=gen).to(self.device)
        # with a schedule and its step markers, each step 2 ms longer than its ops (a Python wait
        # of the grader's): `ProfilerStep#N` rows lead this profile by self time, so a top_ops()
        # that keeps them lists them (red team 25: a profile_training() without a schedule made
        # no markers, and top_ops() never dropped them)
        sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
        with _no_grad(), _profile(activities=self.activities(), schedule=sched) as prof:
            for step in range(3):
                if step == 1:  # the first recorded step runs the drawn ops
                    for name, n in zip(names, counts):
                        op = getattr(torch, name)
                        for _ in range(n):
                            op(x)
                t0 = _time_ns()
                while _time_ns() - t0 < 2_000_000:
                    pass
                prof.step()
        events = prof.events()  # torch's own parse of its results (the object keeps it)
        listed = _every(events, self.cuda, events.key_averages())
        whole = _ranking(listed)
        self.ctx.traces["profile.foreign.listed"] = listed
        for k in self.ctx.params["k"]:
            self.ctx.traces[f"profile.foreign.top{int(k)}"] = whole[: int(k)]
        return prof

    def top_ops(self, _number=number):
        fn = self.need("top_ops")
        if not self.profiles:
            raise ProbeFailed("no profile to rank: profile_training() did not return one")
        profiles = dict(self.profiles, foreign=self.foreign())
        # in an order drawn per grading: no answer follows from the call's number
        calls = [(run, int(k)) for run in profiles for k in self.ctx.params["k"]]
        random.Random(f"{_SECRET}/top_ops/order").shuffle(calls)
        for run, k in calls:
            got = self.ctx.lib.plain(fn(profiles[run], k=k), f"top_ops(prof, k={k})'s result", ProbeFailed)
            if not isinstance(got, (list, tuple)):
                raise ProbeFailed(f"top_ops(prof, k={k}) must return a list of dicts; got {type(got).__name__}")
            rows = []
            for item in got:
                if not isinstance(item, dict):
                    raise ProbeFailed(
                        f"top_ops(prof, k={k}) must return a list of dicts with name, self_time_us, calls; "
                        f"got an item of type {type(item).__name__}"
                    )
                name = item.get("name")
                self_us = _number(item.get("self_time_us"), what="self_time_us")
                calls_n = _number(item.get("calls"), integral=True, what="calls")
                rows.append(
                    {
                        "e": "op",
                        "name": name if isinstance(name, str) else repr(name)[:80],
                        "self_us": self_us if not isinstance(self_us, str) else None,
                        "calls": calls_n if not isinstance(calls_n, str) else None,
                    }
                )
            self.ctx.traces[f"top_ops.{run}.top{k}"] = rows

    def verify(self, _number=number, _boolean=boolean, _enabled=_profiler_enabled, _watch=WATCH, _now=_time_ns,
               _outputs=OUTPUTS, _draw=candidate_draw):
        fn = self.need("verify")
        ctx = self.ctx
        v = ctx.params["verify"]
        rows, dim, work = int(v["rows"]), int(v["dim"]), int(v["work"])
        # the weight and the inputs from the process's secret, not the seed (torch's initial seed
        # is the seed: a baseline output rebuilt from it needs no baseline step; red team 6)
        gen = torch.Generator().manual_seed(random.Random(f"{_SECRET}/verify/weights").getrandbits(62))
        W = (torch.randn(dim, dim, generator=gen) / math.sqrt(dim)).to(self.device)
        cuda = self.cuda

        def inputs():
            """`(make_input, made)` for one verify call: `made` the fingerprints of what this
            call's make_input() returned (strings: no input kept). An input of an earlier call is
            none of this call's (red team 7: call 1's input and baseline output reused in calls 2
            and 3, no baseline step run again)."""
            made = set()

            def make_input():
                """A new random input on every call (make one and feed it to both steps)."""
                x = torch.randn(rows, dim, generator=gen).to(self.device)
                made.add(_fingerprint(x))
                return x

            return make_input, made

        zero = torch.zeros(dim, device=self.device)
        # the product x @ W as the op this verify call names (`op`, drawn per call): the same
        # values, the op's own calls in the profile
        product_of = {
            "aten::mm": _mm,
            "aten::addmm": lambda x, w: _addmm(zero, x, w),
            "aten::bmm": lambda x, w: _bmm(x.unsqueeze(0), w.unsqueeze(0)).squeeze(0),
        }

        def timed(x, w, acc):
            """The named op, timed by the grader (its own clock; CUDA events on the GPU)."""
            # (an input of the submission's own may be any shape: `@` takes what it can)
            product = product_of[named[0]] if x.dim() == 2 else _Tensor.__matmul__
            if cuda:
                a, b = _Event(enable_timing=True), _Event(enable_timing=True)
                a.record()
                y = product(x, w)
                b.record()
                acc.append((a, b))
            else:
                t0 = ctx.clock()
                y = product(x, w)
                acc.append(ctx.clock() - t0)
            return y

        def repeat(n, chunks=1, w=W):
            """`n` products x @ W, each made of `chunks` calls of the op on as many slices of x's
            rows (the same values; a sixteenth of the work per call for the fast candidate)."""
            def body(x, acc):
                for _ in range(n):
                    if chunks == 1 or x.dim() != 2:
                        y = timed(x, w, acc)
                    else:  # `chunks` calls whatever the rows (an input of the submission's own)
                        y = torch.cat([timed(part, w, acc) for part in x.tensor_split(chunks)])
                if x.dim() == 2:
                    # and one call of another of the three ops, on 8 rows, result unused: the
                    # named op's self time is its own, not the sum over every GEMM's (red team
                    # 28 summed all three names and never read `op`)
                    product_of[named[1]](x[:8], w)
                return torch.tanh(y)

            return body

        wrong_at = random.Random(f"{_SECRET}/verify/wrong_at")

        def off(n, wrong, candidate=True, chunks=1):
            """`n` ops, then, for a candidate, its output as the baseline's within rounding, not to
            the bit: every element times 1 ± 2⁻²² (a sign drawn per element, per verify call), so
            a comparison for exact equality (`torch.equal`, `==`, equal checksums) calls a right
            candidate wrong; `torch.allclose` and `assert_close` at their defaults take it (red
            team 25). And (`wrong`) a planted error no statistic of the values sees: element A
            (drawn per verify call from the process's secret, the same in every step of the call)
            swapped with another element δ to 2δ (δ drawn, 0.01–0.05) from it (drawn per verify
            call among those), so the output holds the very same values, in other places: its
            sum, its sum of squares or cubes, its extremes and its sorted values all stay (within
            rounding); only a comparison that weighs every element by its place finds it
            (element by element at a tolerance under δ; red team 43's row and column sums and a
            random-weighted sum do too: they read both outputs whole, in place). Not found by:
            element [0, 0] alone, or one row (red team 7); the outputs' sums, `allclose(atol=0.45)`
            (red team 25); their max and min (red team 28); Σy² and Σy³, which an error moved
            towards zero changed (red team 42). The place
            is a mask made before the call (red team 12 read an index put's arguments from a
            `record_shapes` profile); right and wrong outputs are made by the very same ops with W
            itself (a zero flag for the right one), so neither the ops a profile records, the
            strides (red team 4) nor the graph (red team 8) tell them apart: only the values do."""
            right = repeat(n, chunks)
            if not candidate:
                return right
            mask = torch.zeros(rows, dim, device=self.device)
            mask[wrong_at.randrange(rows), wrong_at.randrange(dim)] = 1.0
            delta = torch.tensor(wrong_at.uniform(0.01, 0.05) if wrong else 0.0, device=self.device)
            signs = torch.randint(0, 2, (rows, dim), generator=gen).to(self.device) * 2 - 1
            rounding = 1.0 + signs.to(torch.float32) * 2.0 ** -22
            keys = torch.rand(rows, dim, generator=gen).to(self.device)  # which one compensates

            def body(x, acc):
                y = right(x, acc)
                if y.shape != mask.shape:  # (an input of the submission's own may be any shape)
                    return y
                a = (y * mask).sum()  # A's value
                # the element A swaps with: the drawn one among those δ to 2δ from A's value (any
                # at least δ from it when none is), not A (on the device: no read of the values),
                # so the error is about δ: under any loose tolerance (red team 25's atol=0.45);
                # with δ = 0 (a right candidate) it is drawn too and nothing moves
                gap = (y - a).abs()
                fits = (gap >= delta) & (mask == 0)
                near = fits & (gap <= 2 * delta)
                far = torch.argmax(torch.where(near, keys + 2.0, torch.where(fits, keys, -1.0)))
                other = torch.zeros_like(y).view(-1).scatter_(0, far.view(1), 1.0).view_as(y)
                b = (y * other).sum()
                swap = (delta > 0).to(y.dtype)
                y = torch.where(mask > 0, b * swap + a * (1 - swap), torch.where(other > 0, a * swap + b * (1 - swap), y))
                return y * rounding

            return body

        # each body with the calls of the op it makes: a recording holds a call's work when it
        # holds that many calls of the op inside the call's window
        # ¼ of the baseline's work, or 4×: a busy machine stretches whole stretches of time, not
        # single calls (a core shared with another process halves its speed for a while), so the
        # margin is a ratio; 2× was tried (issue 42) and a careful fixture's slow candidate
        # measured 0.7× the baseline beside three other gradings
        # and both call the op alike: the fast one `work²` times on a `work²`-th of the rows, the
        # slow one `work²` times on all of them (the baseline: `work` times), so a call count tells
        # nothing of the speed (red team 25: `faster` from which step calls the op fewer times)
        shapes = {"fast": (1, work * work), "slow": (work * work, 1)}  # (products, calls each)
        baseline = (off(work, False, candidate=False), work)

        named = [None, None]  # the op of the verify call running now, and its decoy
        decoys = random.Random(f"{_SECRET}/verify/decoy")
        for n, (speed, right, op) in enumerate(_draw(tuple(v["ops"])), 1):  # drawn per grading
            cand = f"call{n}"
            named[0] = op
            named[1] = decoys.choice([o for o in v["ops"] if o != op])
            products, chunks = shapes[speed]
            body = off(products, not right, chunks=chunks)
            ids = itertools.count()  # step ids, shared by both steps of this verify call
            make_input, made = inputs()
            waits = {}  # step id -> seconds the grader's process waited for a CPU inside it

            lease = ctx.lib.Lease("baseline_step()/candidate_step()", "verify()")

            def wrap(role, body, ids=ids, make_input=make_input, made=made, lease=lease, op=op, waits=waits):
                body, need = body

                def step(x):
                    # the output goes back watched (`OutputWatch`); while the step runs, nothing
                    # it reads (an output handed back in as x) is the submission's reading
                    _outputs.busy += 1
                    try:
                        out, k = run(x)
                    finally:
                        _outputs.busy -= 1
                    return _outputs.hand(out, k, role)

                def run(x):
                    # a tensor, nothing else: an object of the submission's own would run its
                    # code inside the step (red team 12: a stand-in whose `__matmul__` was handed
                    # the secret weight); an output handed back in is the grader's own subclass
                    if type(x) is not _Tensor and type(x) is not Output:
                        raise TypeError(f"{role}_step(x): x must be a tensor make_input() returned, "
                                        f"not {type(x).__name__}")
                    k = next(ids)
                    t0 = _now()
                    active = bool(_enabled())
                    # the input's fingerprint, sent as the step begins; Rust compares it with the
                    # first step's of this call (what "the same input" means), so no reference
                    # input is kept where the submission could reach it; and it must be one
                    # make_input() returned
                    fp = _fingerprint(x)
                    if fp not in made:
                        # an input make_input() did not return (a slice of one, a tensor of the
                        # submission's own: 1/64 of the work, red team 6) is the same as no
                        # other step's
                        fp = f"{fp}, not an input make_input() returned (step {k})"
                    ctx.event("step", id=k, variant=role, fp={"x": fp}, active=active)
                    acc = []
                    w0, c0 = ctx.clock(), ctx.cost_clock()
                    # no graph: an output's grad_fn would name the ops that made it
                    with _sealed(ctx, lease), _no_grad():  # none of the submission's code runs inside
                        out = body(x, acc)
                    t1 = _now()
                    # the wall clock less the cost clock: time spent runnable, waiting for a CPU
                    # (the machine's load, `faster_held`)
                    waits[k] = max(0.0, (ctx.clock() - w0) - (ctx.cost_clock() - c0))
                    if cuda:
                        _synchronize()
                        secs = sum(a.elapsed_time(b) for a, b in acc) / 1e3
                    else:
                        secs = sum(acc)
                    # the op's time in this call: the grader's per-step figure for the profiled
                    # calls is the mean of these over the calls it saw recorded (Rust); and the
                    # input's fingerprint again as the step ends: the input is the same only if
                    # it stayed the same while the step computed on it (issue 38, round 4)
                    ctx.event("step_done", id=k, op_us=secs * 1e6, fp={"x": _fingerprint(x)})
                    _watch.ran(k, role, t0, t1, {op: need})  # what the product records
                    return out, k

                step.make_input = make_input
                return step

            baseline_step = wrap("baseline", baseline)
            candidate_step = wrap("candidate", (body, products * chunks))
            ctx.trace = trace = []
            _watch.begin()
            _outputs.begin(ctx)
            try:
                # the steps work while this call runs (`lib.Lease`): kept and called later, when
                # nothing records them, they do nothing and the integrity gate names it
                with lease:
                    result = fn(op, baseline_step, candidate_step)
            finally:
                _outputs.end()
                ctx.trace = None
                rec = _watch.end()
                ctx.traces[f"verify.{cand}"] = trace
            # a dict, not a subclass: its `get` is dict's own (red team 12: a `get()` of the
            # submission's ran after the call, with the steps it kept)
            if type(result) is not dict:
                raise ProbeFailed(f"verify() must return a dict; got {type(result).__name__}")
            for key in ("baseline_us", "candidate_us"):
                ctx.metric(f"verify.{cand}.{key}", _number(result.get(key), what=key))
            for key in ("faster", "outputs_close"):
                b = _boolean(result.get(key))
                ctx.metric(f"verify.{cand}.{key}", b if b is not None else f"not a bool: {result.get(key)!r}"[:80])
            # what the reported times say (`faster` must follow them: red team 28 reported the
            # profile's times and answered `faster` from which candidate's profile held a cat)
            c_us = _number(result.get("candidate_us"), what="candidate_us")
            b_us = _number(result.get("baseline_us"), what="baseline_us")
            ctx.metric(f"verify.{cand}.faster_by_times",
                       c_us < b_us if not isinstance(c_us, str) and not isinstance(b_us, str)
                       else "no times reported")
            # the truth, sent after the call returned (the rubric holds each answer to it: `same_as`)
            ctx.metric(f"verify.{cand}.truth.faster", speed == "fast")
            ctx.metric(f"verify.{cand}.truth.faster_held", faster_held(rec, waits, speed == "fast"))
            ctx.metric(f"verify.{cand}.truth.outputs_close", right)
            ctx.metric(f"verify.{cand}.candidate", f"{speed}_{'right' if right else 'wrong'}")
            ctx.metric(f"verify.{cand}.op", op)


# the code of the grader's own frames around the steps (`_graders`): `train_step`, the watch's
# switch wrappers, and what those call themselves (the seal, the watch's bookkeeping)
_TRAIN_STEP_CODE = next(c for c in Lesson.train_step.__code__.co_consts if getattr(c, "co_name", None) == "train_step")
_WATCH_CODES = tuple(getattr(ProfilerWatch, n).__code__ for n in (
    "_prepare_profiler", "_enable_profiler", "_disable_profiler", "_own", "_credit", "_event", "_mark"))
_CALLED_CODES = tuple(f.__code__ for f in (_sealed.__enter__, _sealed.__exit__, ProfilerWatch.ran, ProfilerWatch._judge))


def before_submission(ctx):
    """The grader's own profile, made before the submission is imported and recorded at once."""
    with ctx.probe("reference"):
        Lesson(ctx).reference()


def run(ctx):
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    WATCH.ctx = ctx
    lesson = Lesson(ctx)
    if "reference" not in ctx.probes:  # a driver without the before_submission hook
        with ctx.probe("reference"):
            lesson.reference()
    for name in ("profile", "top_ops", "verify"):
        with ctx.probe(name):
            getattr(lesson, name)()
    tampered = WATCH.tampered()
    ctx.metric("profiler.tampered", ", ".join(tampered) if tampered else "none")
