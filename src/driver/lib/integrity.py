"""What a call of the submission may not leave behind or take with it: `global_state`,
`leftover_state` (put back), `sealed` (a handed-over call runs none of the submission's code) and
`Lease` (a handed-over function belongs to one call)."""
import gc as _gc
import logging as _logging
import os as _os
import sys as _sys

import numpy as _np
import torch


# ------------------------------------------------------------------------------------------------
# The global state a call of the submission may not leave behind (issue 38, "every call is watched
# the same way"): what torch and Python keep per process or per thread that would change how the
# grader's own work runs after the call returned (its reference steps, its measurement). A
# saved-tensors hook entered and never exited runs inside every later backward, the grader's too;
# so do a mode left on a stack, grad or anomaly mode, autocast, a thread count, gc switched off.
# Read with functions bound here, before any submission code runs.

_autograd_c = torch._C._autograd
_function_len = torch._C._len_torch_function_stack
_function_pop = torch._C._pop_torch_function_stack
_function_push = torch._C._push_on_torch_function_stack
_dispatch_len = torch._C._len_torch_dispatch_stack
_dispatch_pop = torch._C._pop_torch_dispatch_stack
_top_saved_hooks = _autograd_c._top_saved_tensors_default_hooks
_pop_saved_hooks = _autograd_c._pop_saved_tensors_default_hooks
_saved_hooks_enabled = _autograd_c._saved_tensors_hooks_is_enabled
_saved_hooks_enable = _autograd_c._saved_tensors_hooks_enable
_grad_enabled, _set_grad_enabled = torch.is_grad_enabled, torch._C._set_grad_enabled
_inference_enabled = torch.is_inference_mode_enabled
_anomaly, _anomaly_nan, _set_anomaly = torch.is_anomaly_enabled, torch.is_anomaly_check_nan_enabled, torch.set_anomaly_enabled
_autocast_on, _set_autocast = torch.is_autocast_enabled, torch.set_autocast_enabled
_get_threads, _set_threads = torch.get_num_threads, torch.set_num_threads
_default_dtype, _set_default_dtype = torch.get_default_dtype, torch.set_default_dtype
_deterministic = torch.are_deterministic_algorithms_enabled
_mkldnn_on = torch._C._get_mkldnn_enabled
_gc_on, _gc_enable = _gc.isenabled, _gc.enable
_module_hooks = tuple(
    getattr(torch.nn.modules.module, name)
    for name in dir(torch.nn.modules.module)
    if name.startswith("_global_") and name.endswith("hooks")
)


_THREADS_ITEM = "torch's thread count changed (torch.set_num_threads)"

_C = torch._C
_get_eval_frame = _C._dynamo.eval_frame.get_eval_frame_callback  # torch._C's: no dynamo import
_set_eval_frame = _C._dynamo.eval_frame.set_eval_frame
_functorch_layer = _C._functorch.peek_interpreter_stack  # a vmap/grad transform running now
_inference_mode_on = torch.is_inference_mode_enabled
_InferenceMode = _C._InferenceMode  # a guard: `_InferenceMode(False)` leaves inference mode
_set_mkldnn = _C._set_mkldnn_enabled
_use_deterministic, _deterministic_warn = torch.use_deterministic_algorithms, torch.is_deterministic_algorithms_warn_only_enabled
_matmul_precision, _set_matmul_precision = torch.get_float32_matmul_precision, torch.set_float32_matmul_precision
_set_flush_denormal = torch.set_flush_denormal
# a float32 denormal, multiplied by numpy: flushed to 0 when torch.set_flush_denormal(True) set the
# thread's FTZ/DAZ flags; no torch op, so nothing of it in a profile of the step the body runs
_DENORMAL, _ONE = _np.array([1e-40], dtype=_np.float32), _np.float32(1.0)


def _flushing():
    return bool((_DENORMAL * _ONE)[0] == 0)


def _cuda_switches():
    if not torch.cuda.is_available():
        return ()
    return (
        ("autocast cuda", lambda: _autocast_on("cuda"), lambda v: _set_autocast("cuda", v)),
        ("cudnn", lambda: (_C._get_cudnn_enabled(), _C._get_cudnn_benchmark(), _C._get_cudnn_deterministic(),
                           _C._get_cudnn_allow_tf32()),
         lambda v: (_C._set_cudnn_enabled(v[0]), _C._set_cudnn_benchmark(v[1]), _C._set_cudnn_deterministic(v[2]),
                    _C._set_cudnn_allow_tf32(v[3]))),
    )


def _fp32_keys():
    """(backend, op) of torch's fp32 precision settings (`torch.backends.*.fp32_precision`) this
    build reads."""
    keys = []
    for backend in ("generic", "cuda", "mkldnn"):
        for op in ("all", "matmul", "conv", "rnn"):
            try:
                _C._get_fp32_precision_getter(backend, op)
            except Exception:  # noqa: BLE001 - not in this build
                continue
            keys.append((backend, op))
    return tuple(keys)


_FP32 = _fp32_keys()


class _Fp32:
    """torch's fp32 precision settings as read (`raw`, what is written back) and as they take
    effect (`eff`: a `none` is its backend's `all`, then the generic `all`, then what the legacy
    `torch.get_float32_matmul_precision()` says for a matmul, else `ieee`). Two states are equal
    when they take effect alike: `torch.set_float32_matmul_precision("highest")`, the default,
    writes `ieee` where `none` stood and changes no computation, so a careful student's call of it
    sets nothing aside (careful students 38: set aside in every call, its seconds counted as the
    student's own, 0.12-0.16 ms a window against 0.03)."""

    __slots__ = ("raw", "eff")
    _LEGACY = {"highest": "ieee", "high": "tf32", "medium": "bf16"}

    def __init__(self):
        self.raw = tuple(_C._get_fp32_precision_getter(b, o) for b, o in _FP32)
        got = dict(zip(_FP32, self.raw))
        try:
            legacy = self._LEGACY.get(_matmul_precision(), "ieee")
        except RuntimeError:  # a mix of the two APIs: the legacy one refuses to answer
            legacy = "mixed"
        eff = []
        for (b, o), v in zip(_FP32, self.raw):
            for parent in ((b, "all"), ("generic", "all")):
                if v == "none":
                    v = got.get(parent, "none")
            if v == "none":
                v = legacy if o == "matmul" else "ieee"
            eff.append(v)
        self.eff = tuple(eff)

    def __eq__(self, other):
        return isinstance(other, _Fp32) and self.eff == other.eff

    def __ne__(self, other):
        return not self == other

    __hash__ = None


def _set_fp32(state):
    for (backend, op), v in zip(_FP32, state.raw):  # generic first, each backend's `all` before its ops
        _C._set_fp32_precision_setter(backend, op, v)


# What decides how a step runs besides its code: (name, read, set). A call the grader hands over
# runs in the values these had when grade_lib was loaded (`sealed`), whatever the submission set
# around the call (red team 10: anomaly mode on around the first step of each window, its time
# booked as the step's; bf16 autocast, mkldnn off, deterministic kernels, flushed denormals or
# another matmul precision around the timed windows only: another workload timed than the one
# graded); what it set is put back after.
_SWITCHES = (
    # first: a mix of these and the legacy matmul precision makes that one's read raise. They are
    # part of inductor's cache key (red team 37: `torch.backends.cudnn.fp32_precision = "ieee"` on
    # a CPU made every compile of the grader's cold, 3.5-4.3 s against 1.5)
    ("fp32 precision", _Fp32, _set_fp32),
    ("grad", _grad_enabled, _set_grad_enabled),
    ("anomaly", lambda: (_anomaly(), _anomaly_nan()), lambda v: _set_anomaly(*v)),
    ("autocast cpu", lambda: _autocast_on("cpu"), lambda v: _set_autocast("cpu", v)),
    ("default dtype", _default_dtype, _set_default_dtype),
    ("deterministic", lambda: (_deterministic(), _deterministic_warn()),
     lambda v: _use_deterministic(v[0], warn_only=v[1])),
    ("mkldnn", _mkldnn_on, _set_mkldnn),
    ("matmul precision", _matmul_precision, _set_matmul_precision),
    ("flush denormal", _flushing, _set_flush_denormal),
) + _cuda_switches()
_SWITCHES_BASE = tuple(read() for _, read, _ in _SWITCHES)  # when grade_lib is loaded


# The loggers torch consults inside a step, and their ancestors: a backward attaches a logging
# hook to every node when `torch.autograd.graph`'s effective level is DEBUG (red team 19 ran a
# filter of its own there, inside the grader's sealed step). Few, so setting them aside costs a
# few attribute reads per sealed call (in lesson 01 a seal's entry is outside the call's stamps).
_STEP_LOGGERS = tuple(_logging.getLogger(n) for n in ("torch.autograd.graph", "torch.autograd", "torch")) + (
    _logging.root,)
_LOG_LEVELS = tuple(lg.level for lg in _STEP_LOGGERS)  # when grade_lib is loaded
# The least effective level each may have without being set aside: its own then, or INFO where
# that was lower. torch logs nothing at INFO or above in a step (checked over warm eager and
# compiled training and inference steps) and a handler sees WARNING records under either, so only
# a level that lets torch's DEBUG records out (autograd's logging hooks on every node) changes
# what runs in a step. `logging.basicConfig(level=logging.INFO)`, a careful student's progress
# log, is then left alone: setting it aside cleared the caches of every logger torch has (~220),
# twice per handed-over call, and those seconds are the submission's (`sealed.aside_s`): 0.3 ms
# of its own in each of lesson 05's timed windows, at its 0.3 ms median limit (a CI run failed
# `logging_progress` on it).
_LOG_FLOORS = tuple(min(lg.getEffectiveLevel(), _logging.INFO) for lg in _STEP_LOGGERS)
_FUNCTION_BASE = _function_len()  # TorchFunctionModes on the stack then (none: the grader's come later)
# What logging itself keeps in each of them when grade_lib is loaded (their own `__dict__`): the
# loggers are read only through it, never through an attribute lookup or a method, since any
# attribute of a logger is the submission's to write (`logging.Logger` is writable in the course's
# Python) and whatever it puts there would run inside the grader's own seconds (`_odd_loggers`).
_LOG_DICTS = tuple(dict(lg.__dict__) for lg in _STEP_LOGGERS)
_SEALED = [0]  # sealed bodies running now (`sealed`): no logger makes a record inside one


def _quiet_while_sealed(is_enabled_for):
    """logging's own `Logger.isEnabledFor`, answering False inside a sealed body: every record a
    logger makes (`debug()` … `log()`, torch's own checks) asks it first, and a logger's attributes
    are only `level`, `propagate` and `disabled` to the course's Python, so none shadows it."""

    def isEnabledFor(self, level):
        if _SEALED[0]:
            return False
        return is_enabled_for(self, level)

    isEnabledFor.__doc__ = is_enabled_for.__doc__
    isEnabledFor.grade_quiet = True
    return isEnabledFor


if not getattr(_logging.Logger.isEnabledFor, "grade_quiet", False):
    _logging.Logger.isEnabledFor = _quiet_while_sealed(_logging.Logger.isEnabledFor)

# The process's environment when grade_lib is loaded (os.environ's own table, bytes to bytes):
# libraries read it at run time (inductor its cache folder at every compile), so a call the grader
# hands over runs in this one (red team 35: `TORCHINDUCTOR_CACHE_DIR` pointed at an empty folder
# around the compiled first call only, the grader's compile made cold: 15–21 s against 1.5)
_ENV = _os.environ._data
_ENV_BASE = [dict(_ENV)]  # ... with torch's private names as torch left them inside the calls
_putenv, _unsetenv = _os.putenv, _os.unsetenv
_ENV_NOTED = []


def _adopt_torch_env():
    """After a sealed body: what it left under a private name (inductor writes
    `_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR` at a compile) is the environment the next body runs
    in; any other name it changed is not adopted (a write made inside a body is not known to be
    torch's), so the next body runs without it."""
    base = _ENV_BASE[0]
    if _ENV == base:
        return
    for k in _ENV.keys() | base.keys():
        if k[:1] == b"_":
            if k in _ENV:
                base[k] = _ENV[k]
            else:
                base.pop(k, None)


def _set_env(table):
    """os.environ (and the C library's environment under it) as `table`."""
    for k in _ENV.keys() - table.keys():
        _unsetenv(k)
    for k, v in table.items():
        if _ENV.get(k) != v:
            _putenv(k, v)
    _ENV.clear()
    _ENV.update(table)


_LOG_PLAIN = {"level": (int,), "parent": None, "propagate": (bool, int), "disabled": (bool, int),
              "handlers": (list,), "filters": (list,)}


def _odd_loggers():
    """(logger, what) for the loggers of `_STEP_LOGGERS` (torch's and their ancestors) holding what
    logging itself never puts there, read from their own `__dict__` by exact type (no attribute
    looked up, no method called: none of the submission's code runs here): a level, `propagate`
    or `disabled` that is no plain number (an `int` subclass whose comparison runs code), a
    `parent` other than the one it had (an object of the submission's with a `level` property),
    an attribute of its own (a method set on the instance, shadowing logging's). Red team 35 ran a
    spin inside every seal's entry both ways (`getEffectiveLevel()` compared the level and walked
    the parents): seconds the grader booked as its own recording (`g`, left out of every window),
    so each timed window carried a spin of any length that no idle rule saw."""
    odd = []
    for lg, base in zip(_STEP_LOGGERS, _LOG_DICTS):
        for key, value in lg.__dict__.items():
            kinds = _LOG_PLAIN.get(key, ())
            if key not in base:
                odd.append((lg, f"an attribute `{key}` of its own"))
            elif kinds is None and value is not base[key]:
                odd.append((lg, f"another `{key}`"))
            elif kinds and type(value) not in kinds:
                odd.append((lg, f"a `{key}` of type {type(value).__name__}"))
            else:
                continue
            break
    return odd


def _effective_level(lg):
    """`lg.getEffectiveLevel()`, read as logging computes it from the loggers' own `__dict__`s;
    only for loggers `_odd_loggers` passed (their parents are then the step loggers they were)."""
    while lg is not None:
        d = lg.__dict__
        if d["level"]:
            return d["level"]
        lg = d["parent"]
    return _logging.NOTSET


def _state_reads():
    """(what, value now, how to put the baseline's value back or None) of every item."""
    cuda = torch.cuda.is_available()
    return (
        ("a saved-tensors hook (torch.autograd.graph.saved_tensors_hooks) entered and not exited",
         _top_saved_hooks(False) is not None, lambda v: _drain(lambda: _top_saved_hooks(False) is not None, _pop_saved_hooks)),
        ("saved-tensors hooks disabled", _saved_hooks_enabled(), lambda v: _saved_hooks_enable()),
        ("a TorchFunctionMode (or torch.set_default_device) left on the stack", _function_len(),
         lambda v: _drain(lambda: _function_len() > v, _function_pop)),
        ("a TorchDispatchMode left on the stack", _dispatch_len(),
         lambda v: _drain(lambda: _dispatch_len() > v, lambda: _dispatch_pop(None))),
        ("grad mode changed (torch.set_grad_enabled / no_grad entered and not exited)", _grad_enabled(),
         _set_grad_enabled),
        ("inference mode entered and not exited", _inference_enabled(), None),
        ("anomaly detection switched on", (_anomaly(), _anomaly_nan()), lambda v: _set_anomaly(*v)),
        ("autocast entered and not exited (cpu)", _autocast_on("cpu"), lambda v: _set_autocast("cpu", v)),
        ("autocast entered and not exited (cuda)", cuda and _autocast_on("cuda"),
         lambda v: cuda and _set_autocast("cuda", v)),
        (_THREADS_ITEM, _get_threads(), _set_threads),
        ("the default dtype changed (torch.set_default_dtype)", _default_dtype(), _set_default_dtype),
        ("deterministic algorithms switched", _deterministic(), None),
        ("mkldnn switched", _mkldnn_on(), None),
        ("garbage collection switched off (gc.disable)", _gc_on(), lambda v: v and _gc_enable()),
        # where print() writes: a stream left in place (`redirect_stdout` entered, never exited)
        # runs the submission's Python inside every later print of the grader's, its timed
        # baseline's too (red team 6)
        ("sys.stdout replaced (contextlib.redirect_stdout entered and not exited)", _sys.stdout,
         lambda v: setattr(_sys, "stdout", v)),
        ("sys.stderr replaced (contextlib.redirect_stderr entered and not exited)", _sys.stderr,
         lambda v: setattr(_sys, "stderr", v)),
        ("a global module hook registered", tuple(len(d) for d in _module_hooks), None),
    )


def _drain(more, pop):
    for _ in range(10_000):
        if not more():
            return
        pop()


def global_state():
    """The global state the grader's work depends on, now: {what: value}."""
    return {what: value for what, value, _ in _state_reads()}


_BASELINE = global_state()  # when grade_lib is loaded, before the submission is imported


_PROFILER_ITEM = "torch's profiler recording (a profile started and not stopped)"


def leftover_state(baseline=None, profiler=False):
    """What differs from `baseline` (the state when grade_lib was loaded, before the submission was
    imported) now: a list of what, each put back where it can be (a hook popped, a mode popped, a
    switch reset). The caller fails the call that left it: the grader's next step must not run
    under it. `profiler`: also a recording of torch's profiler running, for a caller whose next
    work is the grader's own measurement with none of its own profiles open (lesson 01's
    reference steps; red team 37 left a profile recording from the end of each measure() call to
    the start of the next: the grader's steps ran profiled, 1.6-2.5x slower, both edges of
    `real_agrees`' band moved). Not put back: the profile is the submission's to stop."""
    baseline = _BASELINE if baseline is None else baseline
    left = []
    for what, value, restore in _state_reads():
        if what in baseline and value != baseline[what]:
            left.append(what)
            if restore is not None:
                try:
                    restore(baseline[what])
                except Exception:  # noqa: BLE001 - still reported (and failed) as left behind
                    pass
    if profiler and torch._C._autograd._profiler_enabled():
        left.append(_PROFILER_ITEM)
    return left


class loggers_as_before:
    """The loggers torch consults in a step (`_STEP_LOGGERS`) at the levels they had before the
    submission existed, for a `with` block, put back after (`sealed` does this too, through it),
    wherever the submission's levels would let torch log below INFO in the step (`_LOG_FLOORS`).
    For calls timed against each other (lesson 06: the baseline's train() and the submission's,
    in pairs), each side runs under the same logging, not one under the submission's handlers
    (red team 27: a handler on `torch.autograd.graph` that burnt CPU in every backward of the
    baseline's timed calls, and in none of its own)."""

    __slots__ = ("_ctx", "_levels", "_odd")

    def __init__(self, ctx=None):
        self._ctx = ctx  # to name a logger holding what logging never puts there (`_odd_loggers`)

    def __enter__(self):
        self._levels = []
        # a logger holding what logging never puts there is put back whole, as it was when
        # grade_lib was loaded (its handlers list the same object: handlers added since stay),
        # before anything of it is read; and named, since no logging set-up needs that
        self._odd = []
        for lg, what in _odd_loggers():
            d = lg.__dict__
            self._odd.append((lg, dict(d)))
            d.clear()
            d.update(_LOG_DICTS[_STEP_LOGGERS.index(lg)])
            if self._ctx is not None:
                self._ctx.tamper(f"torch's logger {d['name']!r} held {what} (logging itself keeps plain values "
                                 "there): the submission's code would run inside the grader's own seconds")
        if all(_effective_level(lg) >= floor for lg, floor in zip(_STEP_LOGGERS, _LOG_FLOORS)):
            return self  # nothing torch would log in a step more than before (`_LOG_FLOORS`)
        # a level set aside comes with a cache of its own (logging caches `isEnabledFor` per
        # logger): the submission's cache is kept whole and given back, never cleared, so nothing
        # it keyed there is freed inside the grader's seconds (red team 36: a key of its own whose
        # freeing finalized a generator, its `finally` a spin, when the caches were swept)
        for lg, base in zip(_STEP_LOGGERS, _LOG_LEVELS):
            d = lg.__dict__
            level = d["level"]
            if level != base:
                self._levels.append((lg, level, d["_cache"]))
                d["level"], d["_cache"] = base, {}
        return self

    @property
    def changed(self):
        """Did it set a level or a logger aside (the submission had changed one)?"""
        return bool(self._levels or self._odd)

    def __exit__(self, *exc):
        for lg, level, cache in reversed(self._levels):
            lg.__dict__["level"], lg.__dict__["_cache"] = level, cache
        for lg, d in reversed(self._odd):
            lg.__dict__.clear()
            lg.__dict__.update(d)
        return False


class sealed:
    """The body of a call the grader hands over (lesson 01's `step()`, lesson 02's steps): none of
    the submission's code runs inside it (issue 38, round 4: a pack hook that sleeps only while
    the grader's step runs, one that swaps the step's input after its fingerprint, a recording
    switched on from inside the first step, a garbage cycle whose finalizer fires in it). While it
    runs, what the submission set up around the call is set aside, not forbidden (it may profile
    or time the call): saved-tensors hooks (the grader's identity pair on top, so the submission's
    below are never called), global module hooks, a tensor subclass's `__torch_function__`, the
    garbage collector (off: no finalizer of the submission's runs), TorchFunctionModes on the
    stack, and torch's switches (`_SWITCHES`: grad and anomaly mode, autocast, kernels, precision:
    the body runs in theirs from before the submission existed). Modes on torch's stacks
    are the grader's own (the read-back counter) or left behind (`leftover_state`).

    A hook set up around the call is also named to the integrity gate (`ctx.tamper`): nothing a
    lesson asks for needs one there, and code meant to run inside the grader's step is the
    attempt, whether or not it was kept out. So is another intra-op thread count: the body runs
    on the graded one (put back for it), and a step timed on another is not the step graded.

    `aside_s`: the seconds it spent setting aside what the submission put there and putting it
    back, the submission's own (`handed`); the rest of its entry and exit is the grader's."""

    __slots__ = ("_ctx", "_env", "_first", "_frame", "_gc", "_held", "_hooks", "_inference", "_lease", "_levels",
                 "_modes", "_saved", "_subclass", "_switches", "_threads", "aside_s")

    def __init__(self, ctx, lease=None):
        self._ctx = ctx
        self._lease = lease  # the call this body was handed over for (`Lease`), when it has one
        self._first = False
        self._held = False  # `handed` gives the frame callback back itself, after its last stamp

    def first(self):
        """What comes before any other frame of the grader's is entered: dynamo's frame callback
        unset, and no logger making records (`_SEALED`, read by logging's own `isEnabledFor`).
        While a callback is set, every Python frame entered is converted by dynamo, and its
        skipping and tracing log records reach the submission's handlers: a call made from a
        `torch.compile`'d trampoline had dynamo trace the seal's own frames, 45 ms of compiling
        and a guarded graph in every call, and a handler spin 6 ms a record, all inside the
        grader's own seconds (red team 39). Only C calls here: no frame is entered before both."""
        if not self._first:
            self._first = True
            self._frame = _set_eval_frame(None)
            _SEALED[0] += 1

    def last(self):
        """`first` undone: records again, the submission's frame callback back (the very end)."""
        if self._first:
            self._first = False
            _SEALED[0] -= 1
            _set_eval_frame(self._frame)

    def _refuse(self):
        """A call that cannot run as graded: kept from another call (`Lease`), or made inside a
        functorch transform (`torch.func.vmap`/`grad`: every op of the grader's step batched or
        differentiated; red team 39 timed eager calls inside `vmap`, 10–20 % slower)."""
        lease = self._lease
        if lease is not None and not lease.open:
            # kept from an earlier call and run in another (or after it): that call's work, not
            # this one's; it does nothing and the gate names it
            self._ctx.tamper(f"{lease.what} handed over for one call of {lease.call} ran outside that call "
                             "(kept and called again later: one call's work passed off as another's)")
            raise self._ctx.ProbeFailed(
                f"{lease.what} was called outside the call of {lease.call} it was handed to: each call gets "
                "its own (see the contract in README.md)"
            )
        if _functorch_layer() is not None:
            self._ctx.tamper("a call the grader handed over was made inside a functorch transform "
                             "(torch.func.vmap or grad): the grader's step would not run as graded")
            raise self._ctx.ProbeFailed(
                "a function the grader handed over was called inside torch.func.vmap/grad/jvp: call it "
                "directly (see the contract in README.md)"
            )

    def __enter__(self):
        self.first()
        try:
            self._refuse()
        except BaseException:
            self.last()
            raise
        if self._frame is not None:
            self._ctx.tamper("a call the grader handed over was made from code dynamo compiled (torch.compile "
                             "around the call): dynamo would convert the grader's own frames inside it")
        if _top_saved_hooks(False) is not None:
            self._ctx.tamper("a saved-tensors hook around a call the grader handed over "
                             "(its code would run inside the grader's step)")
        if any(_module_hooks):
            self._ctx.tamper("a global module hook around a call the grader handed over "
                             "(its code would run inside the grader's step)")
        self._gc = _gc_on()
        _gc_disable()
        # the seconds spent setting aside what the submission put around the call, and putting it
        # back (`aside_s`): the submission's, the rest of the seal the grader's (`handed`)
        clock = self._ctx.cost_clock
        # the body runs on the graded configuration: torch's intra-op thread count as the driver
        # set it, whatever the submission set around the call (red team 6: four threads set for
        # the timed windows and one put back before measure() returned, so the step timed was
        # not the step graded); the submission's count is put back after
        self._threads = _get_threads()
        graded = threads = _BASELINE.get(_THREADS_ITEM, self._threads)
        aside = 0.0
        if self._threads != graded:
            a0 = clock()
            _set_threads(graded)
            aside += clock() - a0
            self._ctx.tamper(f"torch.set_num_threads({self._threads}) around a call the grader handed over, "
                             f"graded on {graded} thread(s) (the step timed would not be the step graded)")
        # ... and in torch's other switches as they were before the submission existed
        # (`_SWITCHES`): what it set around the call is set aside while the body runs
        self._switches = []
        for (_, read, write), graded in zip(_SWITCHES, _SWITCHES_BASE):
            now = read()
            if now != graded:
                a0 = clock()
                write(graded)
                self._switches.append((write, now))
                aside += clock() - a0
        a0 = clock()
        self._hooks = [(d, dict(d)) for d in _module_hooks if d]
        for d, _ in self._hooks:
            d.clear()
        # logging: the loggers torch consults in a step (`_STEP_LOGGERS`) are at the levels they
        # had before the submission existed, so torch attaches no logging hooks (and no handler or
        # filter of the submission's behind them) to the step's backward (red team 19)
        self._levels = loggers_as_before(self._ctx).__enter__()
        if self._hooks or self._levels.changed:
            aside += clock() - a0
        # ... and no logger makes a record while the body runs (`_SEALED`, raised in `first`, read
        # by logging's own `isEnabledFor`): a handler or filter of the submission's on any of torch's loggers
        # (dynamo's, inductor's: ~370 of them once compiled) would run inside the grader's call,
        # timed as its work (red team 35: a DEBUG handler that spun in every record of the grader's
        # compile, first call 10.8 s against 1.5; another that changed dynamo's settings
        # mid-compile). What torch logs in a step is no part of the step's work. A flag, not
        # `logging.disable`: that sweeps every logger's cache, whose keys (and their finalizers)
        # and whose length are the submission's to choose (red team 36)
        # ... in the environment of before the submission existed (`_ENV_BASE`: inductor writes
        # its cache folder into it at its first compile, inside a call)
        self._env = None
        if _ENV != _ENV_BASE[0]:
            a0 = clock()
            self._env = dict(_ENV)
            _set_env(_ENV_BASE[0])
            if not _ENV_NOTED:  # evidence, once: the names it changed (`aside.environment`)
                _ENV_NOTED.append(True)
                changed = sorted((self._env.keys() ^ _ENV.keys()) | {k for k in self._env.keys() & _ENV.keys()
                                                                      if self._env[k] != _ENV[k]})
                self._ctx.metric("aside.environment", [k.decode(errors="replace") for k in changed])
            aside += clock() - a0
        # TorchFunctionModes the submission pushed around the call (`with torch.device(...)`, a
        # mode of its own: each one a Python call in every torch call of the body; red team 11:
        # sixteen nested device contexts around the eager calls only, their time booked as the
        # step's): set aside while the body runs, pushed back after
        n = _function_len() - _FUNCTION_BASE
        self._modes = []
        if n > 0:
            a0 = clock()
            self._modes = [_function_pop() for _ in range(n)]
            aside += clock() - a0
        # ... not in inference mode (a careful timer may run its loop in one: no tampering),
        # which no switch holds: a guard of the grader's leaves it for the body
        self._inference = None
        if _inference_mode_on():
            a0 = clock()
            self._inference = _InferenceMode(False)
            self._inference.__enter__()
            aside += clock() - a0
        # ... and on the graded thread count still (nothing of the submission's ran since it was
        # set: red team 39 changed it from a log handler inside the seal's entry, before `first`)
        if _get_threads() != threads:
            _set_threads(threads)
            self._ctx.tamper("torch's intra-op thread count changed inside the grader's own seconds "
                             "before a call it handed over")
        self.aside_s = aside
        self._saved = _saved_hooks(_same, _same)
        self._saved.__enter__()
        self._subclass = _no_subclass()
        self._subclass.__enter__()
        self._ctx.granted[0] += 1  # the body's records are the grader's (no forgery walk)
        return self

    def __exit__(self, *exc):
        try:
            self._subclass.__exit__(*exc)
            self._saved.__exit__(*exc)
        finally:
            clock = self._ctx.cost_clock
            back = self._hooks or self._levels.changed or self._env is not None or self._switches or self._modes
            a0 = clock() if back else 0.0
            for d, kept in self._hooks:
                d.update(kept)
            self._levels.__exit__()
            _adopt_torch_env()
            if self._env is not None:
                _set_env(self._env)
            if self._inference is not None:
                self._inference.__exit__(None, None, None)
                back = True
                a0 = a0 or clock()
            if _get_threads() != self._threads:
                back = True
                a0 = a0 or clock()
                _set_threads(self._threads)
            for write, value in reversed(self._switches):
                write(value)
            for mode in reversed(self._modes):
                _function_push(mode)
            if back:
                self.aside_s += clock() - a0
            self._ctx.granted[0] -= 1
            if self._gc:
                _gc_enable()
            if not self._held:
                self.last()
        return False


class handed:
    """A call the grader hands over (lesson 01's `step()` and `sync()`, lesson 05's `fn()` and
    `sync()`), run `sealed` and stamped on the grader's cost clock: a `call {fn, c0, c1, g}` event
    when it returns, `c0`/`c1` just inside the seal. A timed window's seconds are the work the
    grader saw in it (these calls) and the submission's own (measurement.rs, `idle:`); the
    grader's seconds around the body (the seal's entry and exit, the event's writing) are neither,
    and go to `ctx.overhead` (`g`, subtracted from windows). They were counted as the
    submission's own: 0.2 ms a window in 05-compile on a fast machine, 0.44 ms in CI, over the
    0.3 ms the median rule allows a careful timer. When the seal set aside something the
    submission put around the call (16 nested device contexts, red team 11),
    the seconds of setting it aside and back stay the submission's (`sealed.aside_s`), and only
    those: the whole entry and exit were, 0.12–0.16 ms a window for a careful student who set
    `torch.set_float32_matmul_precision("high")` once (careful students 38), against 0.03.

    `prof`: torch's profiler was recording when the body returned: its recording's cost is in the
    window, no measure of the call (red team 18's profiled steps in lesson 01, red team 21's
    profiled eager calls in 05: twice or 2.5× their time)."""

    __slots__ = ("_ctx", "_kind", "_lease", "_seal", "_c_in", "_c0", "_w0")

    def __init__(self, ctx, kind, lease=None):
        self._ctx, self._kind, self._lease = ctx, kind, lease

    def __enter__(self):
        # dynamo's frame callback unset and logging off before the first stamp (`sealed.first`):
        # a frame converted before it is the submission's time, after it would be the grader's
        seal = self._seal = sealed(self._ctx, self._lease)
        seal._held = True
        seal.first()
        cost = self._ctx.cost_clock
        self._c_in = cost()
        seal.__enter__()
        self._ctx.calls_open += 1
        self._c0 = cost()
        self._w0 = self._ctx.work()
        return self

    def __exit__(self, *exc):
        ctx, seal = self._ctx, self._seal
        cost = ctx.cost_clock
        c1 = cost()
        w1 = ctx.work()
        ctx.calls_open -= 1
        try:
            more = {"prof": True} if _profiling() else {}
            ctx.event("call", fn=self._kind, c0=self._c0, c1=c1, w0=self._w0, w1=w1, g=ctx.overhead, **more)
        finally:
            try:
                seal.__exit__(*exc)
                ctx.overhead += max(0.0, (self._c0 - self._c_in) + (cost() - c1) - seal.aside_s)
            finally:
                seal.last()  # after the last stamp: the submission's callback converts no frame of ours
        return False


class Lease:
    """One call of the submission that the grader hands functions to (lesson 01: each `measure()`
    call gets its own `step()` and `sync()`): a body `sealed(ctx, lease)` runs only while the call
    is open (`with lease:` around it). Issue 38, round 4: a `step()` kept from the first call (the
    simulated device's) and called in later ones recorded its steps into whatever trace was live,
    so the real step's windows timed a simulated one. Which call a step belongs to is decided here,
    where it runs, not guessed later from the trace: kept and run outside its call, it does no work
    and the integrity gate names it (`sealed`)."""

    __slots__ = ("what", "call", "open")

    def __init__(self, what="a function", call="the submission's function"):
        self.what = what
        self.call = call
        self.open = False

    def __enter__(self):
        self.open = True
        return self

    def __exit__(self, *exc):
        self.open = False
        return False


def _same(t):
    return t


_gc_disable = _gc.disable
_saved_hooks = torch.autograd.graph.saved_tensors_hooks
_no_subclass = torch._C.DisableTorchFunctionSubclass
_profiling = torch._C._autograd._profiler_enabled  # torch's own flag: a profiler records now

