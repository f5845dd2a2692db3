"""The driver's instruments: what the scenarios observe, wrapped before the submission exists.

Part of grade's Python driver (driver.py loads it beside itself as `grade_instruments`). It owns
the checkpoint counter, the observed saved-tensors hooks, every clock the submission may time with
(each read a `timer` event with the value it returned), `empty_cache`, thread starts on the
submission's behalf (runtime audit findings), CUDA events, the profiler's inductor probe, the
torch._dynamo stand-in (dynamo imported when something needs it, not by eager optimizers), and
`_instrument`, which installs them all and returns what `_Watch` verifies.
"""
import gc as _gc_module
import sys
import time
import timeit

import grade_attribution
from grade_attribution import (
    _entry,
    _from_submission,
    _from_submission_past_torch,
    _reads_for_itself,
    attributed,
)
from grade_recorder import Ctx, _perf_counter

_HERE = (lambda: None).__code__.co_filename  # this file, as its code names it
grade_attribution._INTERNAL_FILES.add(_HERE)
_gc_isenabled, _gc_disable, _gc_enable = _gc_module.isenabled, _gc_module.disable, _gc_module.enable


# Lesson 04: the frames of the checkpoint calls running now, as `lib.steps._checkpoint_regions`
# finds them on the stack (the counting wrapper's, torch's `checkpoint()`, CheckpointFunction's
# forward): every way into torch.utils.checkpoint's machinery adds its frame here while a function
# runs under it (`_live_checkpoints`). With none here no layer runs inside a checkpoint, and the
# walk up from a layer stops once it has passed them all: the grader's per-layer instrument costs
# the same at any depth of the submission's stack (red team 24's `deep_stack_observer` ran chosen
# steps 900 frames deep, where each of the walks cost ~0.3 ms inside the step).
CKPT_LIVE = []


def _unlive(*frames):
    for fr in frames:
        for i in range(len(CKPT_LIVE) - 1, -1, -1):
            if CKPT_LIVE[i] is fr:
                del CKPT_LIVE[i]
                break


def _live_checkpoints(cp_mod, torch_dir):
    """Register every checkpoint call's frames in `CKPT_LIVE` while its function runs: the
    non-reentrant path's generator (whoever called `checkpoint()`: the counting wrapper or torch's
    own reference to it) and the reentrant path's `CheckpointFunction.forward` (from `checkpoint()`
    or `apply` called directly). Returns the two wrappers (for `_Watch`)."""
    real_gen = cp_mod._checkpoint_without_reentrant_generator
    ckpt_code = cp_mod.checkpoint.__code__

    def _checkpoint_without_reentrant_generator(*args, **kwargs):
        caller = sys._getframe(1)  # the checkpoint() that resumed it: the function runs there
        CKPT_LIVE.append(caller)
        try:
            return (yield from real_gen(*args, **kwargs))
        finally:
            _unlive(caller)

    real_forward = cp_mod.CheckpointFunction.forward

    def forward(ctx, run_function, preserve_rng_state, *args):
        me = sys._getframe()
        outer = me.f_back  # checkpoint() that called apply, past torch's frames between
        while outer is not None and outer.f_code is not ckpt_code:
            outer = outer.f_back if outer.f_code.co_filename.startswith(torch_dir) else None
        CKPT_LIVE.append(me)
        if outer is not None:
            CKPT_LIVE.append(outer)
        try:
            return real_forward(ctx, run_function, preserve_rng_state, *args)
        finally:
            _unlive(me, outer)

    forward.__wrapped__ = real_forward
    cp_mod._checkpoint_without_reentrant_generator = _checkpoint_without_reentrant_generator
    cp_mod.CheckpointFunction.forward = staticmethod(forward)
    return _checkpoint_without_reentrant_generator, forward


# The backwards a reentrant checkpoint runs for the backward it is part of: while its
# `CheckpointFunction.backward` runs, the graph task that called it (outermost first). Its own
# backward of the recomputed function is another graph task; what that one accumulates into the
# parameters is the outer backward's (grade_lib.steps `_in_step_backward`).
CKPT_BACK_TASKS = []


def _reentrant_backward(cp_mod, torch):
    """`CheckpointFunction.backward`, noting the graph task it runs in (`CKPT_BACK_TASKS`)."""
    real_backward = cp_mod.CheckpointFunction.backward
    task_id = torch._C._current_graph_task_id

    def backward(ctx, *grads):
        CKPT_BACK_TASKS.append(task_id())
        try:
            return real_backward(ctx, *grads)
        finally:
            CKPT_BACK_TASKS.pop()

    backward.__wrapped__ = real_backward
    cp_mod.CheckpointFunction.backward = staticmethod(backward)
    return backward


def _instrument(ctx):
    """Wrap what the scenarios observe; return the originals to check integrity at the end."""
    import os

    import torch
    import torch.utils.checkpoint as cp_mod

    real_checkpoint = cp_mod.checkpoint
    live_gen, live_forward = _live_checkpoints(cp_mod, os.path.dirname(torch.__file__) + os.sep)
    live_backward = _reentrant_backward(cp_mod, torch)

    def counting_checkpoint(function, *args, **kwargs):
        me = sys._getframe()
        CKPT_LIVE.append(me)  # before anything of the submission's can run under it
        try:
            if ctx.watch is not None:
                ctx.watch.check("during checkpoint()")
            ctx.tick("ckpt")
            ctx.event("ckpt", grad=torch.is_grad_enabled(), reentrant=kwargs.get("use_reentrant"))
            ctx.ckpt_depth += 1  # what runs now runs inside a checkpoint (grade_lib.steps: a block's layers)
            # ... and whether autograd was on where it was called (a reentrant checkpoint runs its
            # function with autograd off, on behalf of a forward that records it)
            ctx.ckpt_grads.append(torch.is_grad_enabled())
            try:
                return real_checkpoint(function, *args, **kwargs)
            finally:
                ctx.ckpt_depth -= 1
                ctx.ckpt_grads.pop()
        finally:
            _unlive(me)

    _entry(counting_checkpoint)
    counting_checkpoint.__wrapped__ = real_checkpoint
    counting_checkpoint.__doc__ = real_checkpoint.__doc__
    cp_mod.checkpoint = counting_checkpoint

    observed_hooks = _install_saved_hooks(ctx, torch)
    sizes = _install_storage_sizes(ctx, torch)
    counting_empty_cache = _install_empty_cache(ctx, torch)
    _install_clocks(ctx)
    sleep = _install_sleep(ctx)
    _install_cuda_events(ctx, torch)
    threads = _install_threads(ctx)

    watched = {
        "torch.utils.checkpoint.checkpoint": (lambda: cp_mod.checkpoint, counting_checkpoint),
        "torch.utils.checkpoint._checkpoint_without_reentrant_generator": (
            lambda: cp_mod._checkpoint_without_reentrant_generator,
            live_gen,
        ),
        "torch.utils.checkpoint.CheckpointFunction.forward": (
            lambda: cp_mod.CheckpointFunction.forward,
            live_forward,
        ),
        "torch.utils.checkpoint.CheckpointFunction.backward": (
            lambda: cp_mod.CheckpointFunction.backward,
            live_backward,
        ),
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
    watched["time.sleep"] = (lambda: time.sleep, sleep)
    watched.update(sizes)
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
            # the submission's hooks run inside torch's ops (pack: the op that saves; unpack: the
            # backward, or a saved value read), where a read-back counter's mode is set aside:
            # they run watched by it (`grade_lib.reads.run_watched`; red team 18)
            def watched(fn, *args):
                run = getattr(getattr(ctx.lib, "reads", None), "run_watched", None)
                return run(fn, *args) if run is not None else fn(*args)

            def unpack(x, _unpack=self.unpack_hook):
                return watched(_unpack, x)

            _entry(unpack)

            def pack(t, _pack=self.pack_hook):
                kept = watched(_pack, t)
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

            push(pack, unpack)

    _entry(saved_tensors_hooks.__enter__)  # the submission enters its hooks (`hooks` event)
    saved_tensors_hooks.__module__ = real.__module__
    saved_tensors_hooks.__qualname__ = real.__qualname__
    saved_tensors_hooks.__doc__ = real.__doc__
    graph_mod.saved_tensors_hooks = saved_tensors_hooks
    return saved_tensors_hooks


def _install_storage_sizes(ctx, torch):
    """A storage's size, read by the submission (`UntypedStorage.nbytes()`, `.size()`, `len()`)
    while a scenario sets `ctx.observe_saves`: a `sized {p}` event (the storage's `data_ptr`) in
    the active trace. Lesson 03 believes a row's activations only when the submission sized every
    storage its saved-tensors hooks were handed in that forward (`lib.hooked_forwards`, `sized`):
    a number is the work of the call that reports it (red team 27: an identity pack hook that
    summed nothing, the closed form plus the slack of the few storages the grader pads, passed
    because the grader's own sum of what the hooks were handed was taken for the submission's).
    Returns the watched entries (name -> (now, installed))."""
    U = torch.UntypedStorage
    ptr = torch._C.StorageBase.data_ptr  # the real one: what the storage is, whatever it says
    watched = {}
    for name in ("nbytes", "size", "__len__"):
        real = getattr(U, name)

        def sized(self, *args, _real=real):
            # the submission's own read (its frame, through standard-library helpers at most):
            # not the grader's (its pack wrapper sizes every save), not torch's for itself
            if ctx.observe_saves and ctx.trace is not None and _from_submission():
                try:
                    ctx.event("sized", p=ptr(self))
                except (RuntimeError, NotImplementedError, TypeError):
                    pass
            return _real(self, *args)

        sized.__name__ = getattr(real, "__name__", name)
        sized.__doc__ = getattr(real, "__doc__", None)
        sized.__wrapped__ = real
        _entry(sized)
        setattr(U, name, sized)
        watched[f"torch.UntypedStorage.{name}"] = (lambda n=name: getattr(U, n), sized)
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



def _install_clocks(ctx):
    """Wrap every clock of `CLOCKS` (and `timeit.default_timer`, which `import torch` bound to the
    unwrapped perf_counter): each read the submission makes is a `timer` event carrying the value
    returned, so the grader rebuilds every window's duration. A read a library makes for itself
    (`_reads_for_itself`: a `logging` record's stamp) is not the submission's. During a
    virtual-time probe the submission's reads return the simulated device's clock instead."""
    import logging
    import timeit

    # logging's own stamps (a record's `created`, `msecs`, `relativeCreated`) are whole seconds:
    # they are nobody's reads, never recorded, and a record is the submission's to make and read,
    # so a finer stamp was a clock no window saw (red teams 26, 35, 36: spins paced on
    # `logging.LogRecord(...).created`, the simulated device told apart by it). A log line shows
    # its second as before; its milliseconds read 000
    logging_file = logging.__file__

    for name, (family, ns) in CLOCKS.items():
        real = getattr(time, name)

        def clock(_real=real, _family=family, _ns=ns):
            # a library reading the clock for itself (logging's record stamps) is nobody's
            caller = sys._getframe(1).f_code.co_filename
            if caller == logging_file:
                value = _real()
                return value - value % 1_000_000_000 if _ns else float(int(value))
            mine = not _reads_for_itself(caller) and _from_submission()
            stamped = mine and ctx.trace is not None
            if mine and not stamped and ctx.watch is not None:
                ctx.watch.check("during a clock read")
            # the grader's recording of a stamped read runs none of the submission's code: no
            # garbage collection (a finalizer of its garbage, a generator's `finally`) inside it,
            # where its seconds would be taken for the grader's own (`g`, subtracted from windows)
            gc_was = stamped and _gc_isenabled()
            if gc_was:
                _gc_disable()
            granted = False
            try:
                # `c`: the grader's cost clock where the value is read: what the window's work is
                # compared with (`call` events)
                c = ctx.cost_clock() if stamped else None
                w = ctx.work() if stamped else None
                if mine and ctx.virtual_now is not None:
                    value = ctx.virtual_now(_family, _ns)
                else:
                    value = _real()
                if c is not None:
                    ctx.granted[0] += 1  # the grader's own record: no forgery walk
                    granted = True
                    # `g`: the grader's own seconds spent recording so far (`Ctx.overhead`)
                    if _ns:
                        ctx.event("timer", clock=_family, v=value / 1e9, ns=value, c=c, w=w, g=ctx.overhead)
                    else:
                        ctx.event("timer", clock=_family, v=value, c=c, w=w, g=ctx.overhead)
                    # the integrity check of a stamped read comes after its value, with the
                    # recording: seconds of the grader's (`g`), not in the window of the read that
                    # closes one (35 µs of 560 snapshot entries: counted as the submission's own,
                    # they were an eighth of 05-compile's idle allowance, on a fast machine)
                    if ctx.watch is not None:
                        ctx.watch.check("during a clock read")
                    ctx.overhead += ctx.cost_clock() - c
            finally:
                if granted:
                    ctx.granted[0] -= 1
                if gc_was:
                    _gc_enable()
            return value

        clock.__name__ = name
        _entry(clock)
        setattr(time, name, clock)
    timeit.default_timer = time.perf_counter


def _install_sleep(ctx):
    """`time.sleep`, said: a sleep the submission makes while a trace is active is a `sleep {s}`
    event there, so a timed window that holds one is known to hold time that was no work (Rust
    never excuses such a window as a stall of the machine: red team 18 slept 40 ms in one window
    of 36). A sleep torch makes on the submission's behalf is the submission's too (past torch's
    frames: red team 26 slept inside `checkpoint(time.sleep, 0.03)`, unseen). Returns the wrapper."""
    real = time.sleep

    def sleep(secs):
        if ctx.trace is not None and _from_submission_past_torch():
            ctx.event("sleep", s=float(secs) if isinstance(secs, (int, float)) else None)
        return real(secs)

    _entry(sleep)
    sleep.__wrapped__ = real
    sleep.__doc__ = real.__doc__
    time.sleep = sleep
    return sleep


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
                # `c` and `g` as a host clock read's: the window's time outside its steps on the
                # cost clock is held to the idle rules, the grader's recording left out (without
                # `g` no CUDA-event window was: a spin before `end.record()` passed; red team 23)
                c, w = ctx.cost_clock(), ctx.work()
                ctx.event("timer", clock="cuda_event", id=counter[0], c=c, w=w, g=ctx.overhead)
                ctx.overhead += ctx.cost_clock() - c
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


# `_dynamo_on_demand`: the imports that bring the real torch._dynamo in first (torch's own modules,
# and the compilers it imports: dynamo may be their import-time dependency, as an `import
# torch._dynamo` statement would have made it); but the ones torch imports lazily in an eager
# run (the profiler's first start, a `with torch.device(...)`) and dynamo's settings module.
_DYNAMO_AFTER = ("torch.", "functorch", "triton")
_EAGER_LAZY_MODULES = frozenset({"torch._dynamo.config", "torch.profiler._cupti_monitor", "torch.utils._device"})


# What the stand-in's `disable(fn)` hands back: `fn` itself until the real dynamo is loaded, then
# the real `disable(fn)`. Compiled as generated code (`STAND_IN_FILE`), so its frame acts on its
# caller's behalf (`grade_attribution._transparent`), as torch's own wrapper's frame is torch's and
# skipped: a torch call the submission makes through `torch.compiler.disable(torch.Tensor.tolist)`
# is the submission's read-back, counted (red team 16: a wrapper in a driver file made every call
# through it nobody's: read-backs, constants and `empty_cache` unseen). Lesson 04's checkpoint
# regions join its frame as they join torch's (`lib/steps.py`).
STAND_IN_FILE = "<grade: torch._dynamo stand-in>"
_namespace = {}
exec(compile(
    """
def _uncompiled(fn, recursive, kwargs, state):
    made = []

    def uncompiled(*args, **kw):
        if state["real"] is None:
            return fn(*args, **kw)
        if not made:
            made.append(state["real"].disable(fn, recursive, **kwargs))
        return made[0](*args, **kw)

    return uncompiled
""",
    STAND_IN_FILE,
    "exec",
), _namespace)
_uncompiled = _namespace.pop("_uncompiled")
del _namespace


def _dynamo_on_demand(torch):
    """torch._dynamo (~900 modules, 0.75 s of a cold grading) imported when something needs it,
    not when torch's optimizers and checkpoint() touch it in eager code: every `optimizer.step()`
    runs `import torch._dynamo; torch._dynamo.graph_break()`, every `torch._disable_dynamo`
    function (an optimizer's `zero_grad`, `checkpoint`) asks `torch._dynamo.disable(fn)` on its
    first call, and every non-reentrant checkpoint reads `torch._dynamo.config`. Outside a
    compiled region the first is a no-op and the second's function runs as itself; the third is a
    leaf module of settings. Until something asks for anything else, `torch._dynamo` is a
    stand-in that answers those three: `graph_break` does nothing, `disable(fn)` hands back a
    function that calls `fn` (or, once the real dynamo is loaded, the real `disable(fn)`), and
    `config` is the real settings module, imported alone. Any other attribute, and the import of
    a torch module not yet loaded (`_DYNAMO_AFTER`, less `_EAGER_LAZY_MODULES`: so whatever torch
    imports for torch.compile, export or a module of dynamo's own finds dynamo loaded first, in
    the order an `import torch._dynamo` would have given), imports the real package in its place; the
    `disable(fn)` results torch cached (`fn.__dynamo_disable`) are then replaced by the real
    ones. Not installed when dynamo is already loaded (the zygote imports it)."""
    import functools
    import importlib
    import importlib.machinery
    import importlib.util
    import types
    import weakref

    if "torch._dynamo" in sys.modules or "_dynamo" in torch.__dict__:
        return
    spec = importlib.util.find_spec("torch._dynamo")
    state = {"real": None, "loading": False}
    # fn -> (recursive, kwargs, the stand-in's function) for every disable(fn): nothing kept alive
    handed = weakref.WeakKeyDictionary()

    def real():
        if state["real"] is None and not state["loading"]:
            state["loading"] = True
            try:
                if sys.modules.get("torch._dynamo") is stand_in:
                    del sys.modules["torch._dynamo"]
                if torch.__dict__.get("_dynamo") is stand_in:
                    del torch.__dict__["_dynamo"]
                module = importlib.import_module("torch._dynamo")
                for fn, (recursive, kwargs, mine) in list(handed.items()):
                    mine = mine()
                    if mine is not None and getattr(fn, "__dynamo_disable", None) is mine:
                        fn.__dynamo_disable = module.disable(fn, recursive, **kwargs)
                state["real"] = module
            finally:
                state["loading"] = False
                sys.meta_path[:] = [f for f in sys.meta_path if f is not finder]
        return state["real"] or sys.modules["torch._dynamo"]

    class _StandIn(types.ModuleType):
        def __getattr__(self, name):
            if name == "config":
                # the settings alone: a leaf module (torch.utils._config_module), which the
                # package adopts when it is imported
                return importlib.import_module("torch._dynamo.config")
            return getattr(real(), name)

    def graph_break(*args, **kwargs):
        if state["real"] is not None:
            return state["real"].graph_break(*args, **kwargs)
        return None

    def disable(fn=None, recursive=True, **kwargs):
        if state["real"] is not None:
            return state["real"].disable(fn, recursive, **kwargs)
        if fn is None:
            return functools.partial(disable, recursive=recursive, **kwargs)
        uncompiled = functools.update_wrapper(_uncompiled(fn, recursive, kwargs, state), fn)
        try:
            handed[fn] = (recursive, kwargs, weakref.ref(uncompiled))
        except TypeError:  # (not weakly referable: nothing torch caches on it)
            pass
        return uncompiled

    class _DynamoFirst:
        """The loader of a module of `_DYNAMO_AFTER` imported while the stand-in serves: the real
        dynamo is imported first; if that imported this module too (dynamo and inductor import
        each other), the module it made is the import's result, not a second copy."""

        def __init__(self, inner):
            self.inner = inner
            self.made = None

        def create_module(self, spec):
            real()
            module = sys.modules.get(spec.name)
            if module is not None:
                self.made = (module, getattr(module, "__spec__", None))
                return module
            return self.inner.create_module(spec)

        def exec_module(self, module):
            if self.made is not None and self.made[0] is module:
                module.__spec__ = self.made[1]  # (the import machinery set ours on it)
                return
            module.__spec__.loader = self.inner
            self.inner.exec_module(module)

        def __getattr__(self, name):  # the source loader's other methods (resources, code)
            return getattr(self.inner, name)

    class _Finder:
        """A module of `_DYNAMO_AFTER` not yet loaded (not `_EAGER_LAZY_MODULES`): loaded after
        the real dynamo (`_DynamoFirst`)."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if state["real"] is not None or state["loading"] or not name.startswith(_DYNAMO_AFTER) \
                    or name in _EAGER_LAZY_MODULES:
                return None
            found = importlib.machinery.PathFinder.find_spec(name, path)
            if found is None or found.loader is None:  # (no module: the policy's lookups try names)
                return None
            found.loader = _DynamoFirst(found.loader)
            return found

    stand_in = _StandIn("torch._dynamo")
    stand_in.__path__ = list(spec.submodule_search_locations)
    stand_in.graph_break = graph_break
    stand_in.disable = disable
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    sys.modules["torch._dynamo"] = stand_in
    torch._dynamo = stand_in
