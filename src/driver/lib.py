"""grade's scenario library: instruments every lesson's scenario shares (`ctx.lib` in a scenario).

Embedded in the `grade` binary next to driver.py. What lives here is grader code that several
lessons need, so it is written once:

- `observed_model(...)`: a TinyGPT whose every forward is observed as (the start of) a training
  step. The grader marks, in the active trace,
      step      {id, inputs: {idx, targets}, grad, t} the forward began (inputs labelled against
                                                      the batch the grader handed over; `t`: the
                                                      grader's own clock, seconds)
      fwd_end   {id, ckpt, variant}                 the forward returned: checkpoint calls in it
      step_done {id, t}                             backward reached the embedding output
  A whole training step is a `step` with its `step_done`; a forward without one (measuring bytes,
  inference) is not a step. Every forward is also summarised in `ctx.traces["forwards.<probe>"]`
  (checkpoint calls, autograd on/off, the checkpointing flag when the grader set it), so rules such
  as "one checkpoint per block in every forward where autograd records" hold in every probe.
"""
import torch
from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode
from torch.utils._pytree import tree_leaves as _tree_leaves

from course.model import TinyGPT, _plain_blocks

_equal = torch.equal  # captured before any submission code runs
_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks


class NotANumber(TypeError):
    """A value the contract asks to be a number is not one; the message says what it was."""


def number(value, *, integral=False, what="value"):
    """`value` as a plain Python `int` (integral) or `float`, or `NotANumber`.

    The one place every lesson turns a submission's number into the grader's: whatever the
    contract calls a number is accepted as any `numbers.Integral` / `numbers.Real` (Python, numpy
    scalars such as `np.int64(13)` or `np.float32(0.5)`), a one-element numpy array or a 0-d / one-
    element tensor. `bool` is refused (it is an `int` in Python but never a count or a time). An
    integral value must be a whole number: `13.0` is accepted as `13`, `13.5` is not."""
    import numbers

    v = value
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise NotANumber(f"{what} is a tensor of {v.numel()} elements, not one number")
        v = v.detach().cpu().reshape(()).tolist()
    elif hasattr(v, "dtype") and hasattr(v, "shape") and hasattr(v, "item") and not isinstance(v, numbers.Number):
        try:  # a numpy array
            if int(getattr(v, "size", 1)) != 1:
                raise NotANumber(f"{what} is an array of {v.size} elements, not one number")
            v = v.item()
        except (TypeError, ValueError) as e:
            raise NotANumber(f"{what} is {type(value).__name__}, not a number") from e
    if isinstance(v, bool) or (type(v).__name__ == "bool_"):
        raise NotANumber(f"{what} is a bool ({value!r}), not a number")
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        f = float(v)
        if integral:
            if f != f or f in (float("inf"), float("-inf")) or not f.is_integer():
                raise NotANumber(f"{what} is {value!r}, not a whole number")
            return int(f)
        return f
    raise NotANumber(f"{what} is {type(value).__name__} ({repr(value)[:60]}), not a number")


def saved_bytes(model, fn):
    """`(fn(), bytes)`: the bytes of the distinct storages autograd saved for backward while `fn()`
    ran (a view counts its storage once; `model`'s parameters excluded) — lessons 03 and 04."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in params:
            seen[ptr] = s.nbytes()
        return t

    with _saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


class _Made(_TorchDispatchMode):
    """Every storage an aten op made while active (below autograd, so each op the forward ran),
    held by weak reference: what is still alive afterwards is what the results keep."""

    def __init__(self):
        super().__init__()
        self.made = {}  # StorageImpl address -> (weak reference, bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in _tree_leaves(out):
            if isinstance(t, torch.Tensor):
                try:
                    s = t.untyped_storage()
                    self.made[s._cdata] = (_StorageWeakRef(s), s.nbytes())
                except (RuntimeError, NotImplementedError):
                    pass  # a tensor without storage (a subclass, a sparse layout)
        return out


def kept_bytes(model, fn):
    """`(fn(), bytes)`: the bytes of the distinct storages made while `fn()` ran that are still
    alive when it returns, `model`'s parameters excluded — the memory a forward's graph (and its
    outputs) really keeps for backward (lesson 04). Unlike `saved_bytes` this does not depend on
    which saved-tensors hooks were active: a forward that keeps everything under hooks of its own
    still keeps it. Torch's dispatch modes follow the calling thread, as the saved-tensors hooks
    do; a thread started by the submission is reported by the driver (`integrity.thread.*`)."""
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    made = _Made()
    with made:
        out = fn()
    kept = sum(n for k, (ref, n) in made.made.items() if k not in params and not ref.expired())
    return out, kept


def label(t, reference):
    """`batch` when `t` equals the grader's tensor, `none` for None, else `other`."""
    if t is None:
        return "none"
    if not isinstance(t, torch.Tensor):
        return "other"
    if t.shape == reference.shape and t.device == reference.device and _equal(t, reference):
        return "batch"
    return "other"


class StepObserver:
    """Turns forwards of `ObservedTinyGPT` into step events (see the module docstring)."""

    def __init__(self, ctx, batch, variant=None):
        self.ctx = ctx
        self.batch = batch
        self.variant = variant or (lambda rec: None)
        self.next_id = 0

    def forward(self, model, idx, targets, blocks_fn):
        ctx = self.ctx
        k = self.next_id
        self.next_id += 1
        grad = torch.is_grad_enabled()
        inputs = {"idx": label(idx, self.batch["idx"]), "targets": label(targets, self.batch["targets"])}
        ctx.event("step", id=k, inputs=inputs, grad=grad, t=ctx.clock())
        before = ctx.tally("ckpt")
        x = model.embed(idx)
        if grad and x.requires_grad:
            x.register_hook(lambda g, k=k: ctx.event("step_done", id=k, t=ctx.clock()))
        h = (blocks_fn or _plain_blocks)(model.blocks, x)
        out = model.head_loss(h, targets)
        ckpt = ctx.tally("ckpt") - before
        flag = getattr(blocks_fn, "grade_checkpointing", None)
        rec = {
            "e": "forward",
            "probe": ctx.current_probe,
            "grad": grad,
            "ckpt": ckpt,
            # the flag the grader asked for, or (a submission's own blocks_fn) what it did
            "checkpointing": bool(flag) if flag is not None else ckpt > 0,
            "flag_from": "grader" if flag is not None else "observed",
        }
        variant = self.variant(rec)
        ctx.event("fwd_end", id=k, ckpt=ckpt, **({"variant": variant} if variant else {}))
        ctx.append_row(f"forwards.{ctx.current_probe}", rec)
        return out


# The observer of every ObservedTinyGPT (so copies keep reporting): a module global, not an
# attribute of the class the submission is handed, so nothing reachable from the model leads to
# the grader's recorder.
_observer = [None]


class ObservedTinyGPT(TinyGPT):
    """TinyGPT whose forward reports to the observer `observed_model` was given."""

    def forward(self, idx, targets=None, blocks_fn=None):
        observer = _observer[0]
        if observer is None:
            return super().forward(idx, targets, blocks_fn=blocks_fn)
        return observer.forward(self, idx, targets, blocks_fn)


def observed_model(ctx, cfg, weights, device, observer):
    """A TinyGPT loaded with the grader's weights, in train mode, observed by `observer`."""
    _observer[0] = observer
    model = ObservedTinyGPT(cfg)
    model.load_state_dict(weights, strict=True)
    return model.to(device).train()


# ------------------------------------------------------------------------------------------------
# A simulated asynchronous device on a virtual clock (lessons 01 and 05).

TICK = 2.0 ** -20  # seconds; all simulated times are whole ticks, so sums and differences are exact


def ticks(seconds):
    """`seconds` rounded to whole ticks (the simulator's exact unit), as seconds."""
    return round(seconds / TICK) * TICK


class SimDevice:
    """An asynchronous device whose truth the grader knows exactly.

    `work(cost)` enqueues `cost` seconds of device work and returns after `host` seconds of host
    time (a kernel launch), like a CUDA call; `sync()` waits: the host clock jumps to the end of
    the queue. While the device is `installed` (a `with` block) the submission's clocks
    (time.perf_counter & co., see driver.py) read the host's virtual time, so a window timed with
    a sync before each read measures exactly the work enqueued in it, and an unsynced one measures
    launch overhead. All times are whole `TICK`s: durations rebuilt from clock values are exact.

    Events (in the active trace): `step {id}` + `step_done {id}` per `work()` call tagged as a step
    (`variant` optional), `work` per `queue()` (device work outside any call), `sync` per `sync()`.
    """

    def __init__(self, ctx, host=16 * TICK, base=0.0):
        self.ctx = ctx
        self.host = ticks(host)
        # what the clocks read at time 0: a real clock's value (whole ticks, so still exact) hides
        # that the clock is virtual; lesson 01 hands it the real perf_counter's reading
        self.base = ticks(base)
        self.now = 0.0  # host time since the device was made
        self.queue_end = 0.0  # when the device finishes what was enqueued
        self.calls = 0  # work() calls
        self.syncs = 0

    def work(self, cost, *, step=True, variant=None, block=0.0):
        """Enqueue `cost` s of device work after `block` s of blocking host work (a compile)."""
        k = self.calls
        self.calls += 1
        if step:
            self.ctx.event("step", id=k, **({"variant": variant} if variant else {}))
        self.now += ticks(block)
        start = max(self.now, self.queue_end)
        self.queue_end = start + ticks(cost)
        self.now += self.host
        if step:
            self.ctx.event("step_done", id=k)
        return k

    def queue(self, cost):
        """Device work the grader enqueued before handing over (inputs and weights still being
        copied, as after `.to(device)` on a GPU): a `work` event, no call of anything. A clock read
        after it without a `sync()` between is not synced (measurement.rs)."""
        self.ctx.event("work")
        start = max(self.now, self.queue_end)
        self.queue_end = start + ticks(cost)
        self.now += self.host

    def sync(self):
        self.syncs += 1
        self.ctx.event("sync")
        self.now = max(self.now, self.queue_end)

    def idle(self):
        """Let the device drain (between probes), without a `sync` event."""
        self.now = max(self.now, self.queue_end)

    def __enter__(self):
        self.ctx.virtual_now = lambda: self.base + self.now
        return self

    def __exit__(self, *exc):
        self.ctx.virtual_now = None
        return False


# ------------------------------------------------------------------------------------------------
# Host read-backs and tensors made from Python values (lesson 06; any lesson that counts syncs).

import os as _os
import sys as _sys
from types import MappingProxyType as _Frozen

from torch.overrides import TorchFunctionMode as _TorchFunctionMode

_TORCH_DIR = _os.path.dirname(torch.__file__) + _os.sep

# The tables below are frozen (a MappingProxyType, frozensets) and HostReads binds them when this
# module is loaded, before any submission code runs: replacing `grade_lib.READBACKS` (or any other
# name here) afterwards changes nothing that is counted.

# Calls through which a tensor's value reaches Python (on CUDA each one waits for the device):
# name -> bytes read: "one" element, "all" elements, or a fixed count.
READBACKS = _Frozen({
    "item": "one", "__bool__": "one", "__float__": "one", "__int__": "one", "__index__": "one",
    "__complex__": "one", "__contains__": "one",
    "tolist": "all", "numpy": "all", "__array__": "all", "__repr__": "all", "__format__": "all",
    "__reduce_ex__": "all", "cpu": "all", "to": "all",
    "equal": 1, "allclose": 1,
    "nonzero": 8, "argwhere": 8, "masked_select": 8, "unique": 8, "unique_consecutive": 8,
})
# Tensors created from Python numbers, lists or shapes (the same constant made again and again).
FACTORIES = frozenset((
    "tensor", "as_tensor", "asarray", "scalar_tensor", "from_numpy", "frombuffer", "full", "ones",
    "zeros", "empty", "empty_strided", "arange", "range", "linspace", "logspace", "eye",
    "zeros_like", "ones_like", "full_like", "empty_like", "new_tensor", "new_full", "new_ones",
    "new_zeros", "new_empty", "new",
))
# What reaches a TorchDispatchMode from a call that no torch function saw: the legacy
# constructors (`torch.Tensor([..])`, `torch.FloatTensor(..)`, `torch.LongTensor(3)`) reach it
# as `aten::lift_fresh` / `aten::empty`; a call made with torch functions disabled
# (`torch._C.DisableTorchFunction`) as its aten op. aten op name (overload dropped) -> kind.
DISPATCH = _Frozen({
    "lift_fresh": "factory", "lift_fresh_copy": "factory", "empty": "factory",
    "empty_strided": "factory", "scalar_tensor": "factory", "zeros": "factory", "ones": "factory",
    "full": "factory", "arange": "factory", "linspace": "factory", "eye": "factory",
    "_local_scalar_dense": "readback",
})
# `metadata` key of an autograd node the grader marked as one training step's loss (lesson 06:
# a read-back whose graph reaches the losses of several steps kept those graphs alive).
STEP_MARK = "grade_step"
_frombuffer = torch.frombuffer
_dispatch_len = torch._C._len_torch_dispatch_stack
_dispatch_at = torch._C._get_dispatch_stack_at
_dispatch_pop = torch._C._pop_torch_dispatch_stack
_dispatch_push = torch._C._push_on_torch_dispatch_stack


def graph_steps(t, limit=50_000):
    """The marked steps (`STEP_MARK`) whose loss the autograd graph of `t` still reaches."""
    fn = getattr(t, "grad_fn", None)
    if fn is None:
        return set()
    steps, seen, stack = set(), {}, [fn]
    while stack and len(seen) < limit:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen[id(f)] = f  # kept alive while walking: ids are not reused
        mark = f.metadata.get(STEP_MARK) if hasattr(f, "metadata") else None
        if mark is not None:
            steps.add(mark)
            continue
        stack.extend(nf for nf, _ in f.next_functions)
    return steps


class _Unseen(_TorchDispatchMode):
    """The part of HostReads below autograd: aten ops reached while no torch function of the
    watched code is running (`owner.depth == 0`), i.e. calls that never passed through
    `HostReads.__torch_function__`."""

    def __init__(self, owner, table=DISPATCH):
        super().__init__()
        self.owner = owner
        self.table = table

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        owner = self.owner
        if not owner.depth:
            kind = self.table.get(func.__name__.split(".")[0])
            if kind is not None:
                owner._unseen(kind, func, args)
        return func(*args, **kwargs)


class HostReads(_TorchFunctionMode):
    """Counts, device-independently, the host read-backs and the factory calls made by `files`.

    Active as a `with` block around a call into a submission (or the grader's baseline). A torch
    call counts when the first frame outside torch that made it is in one of `files` (so the course
    model's own ops and the grader's never count), and only the outermost call counts (`print(t)`
    is one read-back, not the dozen `.item()`s inside `Tensor.__repr__`).
      - read-back: a call of `READBACKS` on a tensor that lives on the device; `.cpu()` and
        `.to("cpu")` only when they move to the host. On CPU runs the "device" is the CPU and the
        host is what `.cpu()`/`.to("cpu")` return: they return a distinct tensor there (as on
        CUDA), which is marked as host, and so is everything computed from it — so
        `logits.cpu()[0, -1].argmax().item()` is one read-back (of all the logits) on CPU and on
        CUDA alike. Bytes: the tensor's (`.item()`: one element).
      - factory: a call of `FACTORIES` (a tensor made from Python values); the legacy
        constructors, which no torch function sees, through `DISPATCH` (a dispatch mode, `_Unseen`)
        and `torch.frombuffer` (wrapped while active).
      - kept graph: a read-back of a tensor whose autograd graph reaches the marked losses
        (`STEP_MARK`) of more than one step: `kept_graph {steps, line}`.
    Each becomes `readback {op, bytes, line}` / `factory {op, line}` in the active trace and in
    `self.readbacks` / `self.factories`.
    """

    def __init__(self, ctx, files, device):
        super().__init__()
        self.ctx = ctx
        self.files = {_os.path.abspath(f) for f in files}
        self.cpu_run = torch.device(device).type == "cpu"
        self.readbacks = []
        self.factories = []
        self.depth = 0  # torch functions of the watched code running now (see _Unseen)
        self._below = None

    def __enter__(self):
        out = super().__enter__()
        self._below = _Unseen(self)
        self._below.__enter__()
        torch.frombuffer = self._frombuffer
        return out

    def __exit__(self, *exc):
        torch.frombuffer = _frombuffer
        self._below.__exit__(*exc)
        self._below = None
        return super().__exit__(*exc)

    def _frombuffer(self, *args, **kwargs):
        line = self._caller_line(2)
        if line is not None:
            self._record("factory", {"op": "frombuffer", "line": line})
        self.depth += 1
        try:
            return _frombuffer(*args, **kwargs)
        finally:
            self.depth -= 1

    def host(self, t):
        if t.device.type != "cpu":
            return False
        return getattr(t, "_grade_host", False) if self.cpu_run else True

    def _caller_line(self, depth=2):
        """The line of `files` this torch call is attributed to: past torch's own frames, the
        driver's attribution rule (`ctx.attributed`: standard-library and generated frames act
        on their caller's behalf)."""
        f = _sys._getframe(depth)
        while f is not None and (f.f_code.co_filename.startswith(_TORCH_DIR)):
            f = f.f_back
        mine = self.ctx.attributed(f, self.files) if f is not None else None
        return mine.f_lineno if mine is not None else None

    def _record(self, kind, event):
        (self.readbacks if kind == "readback" else self.factories).append(event)
        self.ctx.event(kind, **event)

    def _readback(self, src, op, nbytes, line):
        self._record("readback", {"op": op, "bytes": int(nbytes), "line": line})
        steps = graph_steps(src)
        if len(steps) > 1:
            self.ctx.event("kept_graph", steps=len(steps), line=line)

    def _unseen(self, kind, func, args):
        line = self._caller_line(3)
        if line is None:
            return
        op = func.__name__.split(".")[0]
        if kind == "factory":
            self._record("factory", {"op": op, "line": line})
        elif args and isinstance(args[0], torch.Tensor) and not self.host(args[0]):
            self._readback(args[0], op, args[0].element_size(), line)

    def _destination(self, name, args, kwargs):
        """Where `.cpu()`/`.cuda()`/`.to(...)` sends args[0]: "host", "device" or None (dtype only).
        On a CPU run, where the device is the host, the string "cpu" means the host for a tensor on
        the device and the device for a host copy; a `torch.device` (how code names "the device",
        `x.to(idx.device)`) means the device. On CUDA runs the devices say it all."""
        if name in ("cpu", "cuda"):
            return "host" if name == "cpu" else "device"
        for a in list(args[1:]) + [kwargs.get("device"), kwargs.get("other")]:
            if isinstance(a, (str, torch.device)):
                try:
                    cpu = torch.device(a).type == "cpu"
                except (RuntimeError, ValueError):
                    return None
                if self.cpu_run:
                    if isinstance(a, torch.device) or self.host(args[0]):
                        return "device"
                    return "host"
                return "host" if cpu else "device"
            if isinstance(a, torch.Tensor):
                return "host" if self.host(a) else "device"
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None, *, _readbacks=READBACKS,
                           _factories=FACTORIES):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        for a in args:
            if isinstance(a, (list, tuple)):
                tensors.extend(x for x in a if isinstance(x, torch.Tensor))
        from_host = any(self.host(t) for t in tensors)
        moves = name in ("cpu", "cuda", "to") and tensors and tensors[0] is args[0]
        where = self._destination(name, args, kwargs) if moves else None
        if moves and where is not None:
            if where == "host" and not self.host(args[0]):
                line = self._caller_line()
                if line is not None:
                    self._readback(args[0], name, args[0].numel() * args[0].element_size(), line)
            out = self._call(func, args, kwargs)
            if self.cpu_run and isinstance(out, torch.Tensor):
                if out is args[0]:
                    out = out.view_as(out)  # a distinct tensor, as a real copy would be
                out._grade_host = where == "host"
            return out
        if name in _readbacks and name not in ("cpu", "to") and tensors and not all(self.host(t) for t in tensors):
            line = self._caller_line()
            if line is not None:
                size = _readbacks[name]
                src = tensors[0]
                nbytes = (
                    src.element_size() if size == "one"
                    else src.numel() * src.element_size() if size == "all" else size
                )
                self._readback(src, name, nbytes, line)
        elif name in _factories:
            line = self._caller_line()
            if line is not None:
                self._record("factory", {"op": name, "line": line})
        out = self._call(func, args, kwargs)
        if self.cpu_run and (from_host or name == "from_numpy"):
            for t in out if isinstance(out, (list, tuple)) else (out,):
                if isinstance(t, torch.Tensor):
                    t._grade_host = True
        return out

    def _call(self, func, args, kwargs):
        """func() with the dispatch mode below set aside (when it is on top, as it is unless
        the watched code pushed one of its own): what a torch function does inside is counted
        at the torch-function level or not at all, and costs no Python call per aten op."""
        self.depth += 1
        below = self._below
        n = _dispatch_len()
        aside = n > 0 and below is not None and _dispatch_at(n - 1) is below
        if aside:
            _dispatch_pop(None)
        try:
            return func(*args, **kwargs)
        finally:
            if aside:
                _dispatch_push(below)
            self.depth -= 1


# What torch or the submission may call directly (driver.py's `_forged`): the observed model's
# forward (the submission calls `model(...)`, or `model.forward(...)`), a simulated device's
# `sync` (handed over as `sync=`), the read-back modes (torch calls them from the submission's
# own frames) and the wrapped `torch.frombuffer`.
ENTRY_POINTS = (ObservedTinyGPT.forward, SimDevice.sync, HostReads.__torch_function__,
                HostReads._frombuffer, _Unseen.__torch_dispatch__)
