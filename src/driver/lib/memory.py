"""Memory a forward keeps, as the grader measures it: saved-tensors bytes (`saved_bytes`,
`SAVES_SINKS`), storages made and kept (`kept_bytes`), and forwards seen whole under one hooks' entry
(`hooked_forwards`) — lessons 03 and 04."""
import os as _os
import weakref as _weakref
import torch
from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef
from torch.overrides import TorchFunctionMode as _TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode
from torch.utils._pytree import tree_leaves as _tree_leaves
_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks


def saved_bytes(model, fn):
    """`(fn(), bytes)`: the bytes of the distinct storages autograd saved for backward while `fn()`
    ran (a view counts its storage once; `model`'s parameters excluded) — lessons 03 and 04."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}
    at_params = {}  # saves at a parameter's address when fn() began: a parameter's, unless it moved

    def note(t):
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return
        ptr = s.data_ptr()
        # the storage held while fn() runs: a freed one's address reused by a later tensor
        # (hooks of the submission's own that drop what they are handed) is not one storage
        (at_params if ptr in params else seen)[ptr] = (s.nbytes(), s)

    def pack(t):
        note(t)
        return t

    def handed(t, kept):
        """A pack hook of the submission's own, innermost (so the grader's `pack` is not called),
        was handed `t` and returned `kept` (the driver's observed `saved_tensors_hooks`): what
        autograd keeps is what it returned, a tensor's storage; anything else (a slot number, a
        numpy array, a file name) keeps `t`'s bytes somewhere the grader cannot follow, so they
        count as kept (issue 38: memory is what's alive, wherever it is). So does a tensor
        returned smaller than what it was handed: the rest is kept elsewhere (an index into a
        file, an arena, a process: red team 7), for autograd needs all of it back. And so does a
        tensor of other memory than `t`'s: autograd gets `t`'s values back from it at unpack, so
        they are kept somewhere all the same (red team 46: every save handed back as a view of
        one decoy made before the forward, the real tensors kept in a cache)."""
        if isinstance(kept, torch.Tensor):
            try:
                same = kept.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
                whole = same and kept.untyped_storage().nbytes() >= t.numel() * t.element_size()
            except (RuntimeError, NotImplementedError, TypeError):
                whole = False
            if whole:
                note(kept)
                return
        note(t)

    SAVES_SINKS.append(handed)
    try:
        with _saved_tensors_hooks(pack, lambda t: t):
            out = fn()
    finally:
        SAVES_SINKS.remove(handed)
    # a parameter whose storage moved during fn() (grown with `resize_`: red team 9) freed its old
    # address, which a later save may take: only the addresses that are still parameters' are
    # left out (a reuse counted as a parameter flaked the bytes by one small tensor)
    still = {p.untyped_storage().data_ptr() for p in model.parameters()}
    for ptr, v in at_params.items():
        if ptr not in still:
            seen[ptr] = v
    return out, sum(n for n, _ in seen.values())


# What the submission's pack hooks are handed and return while the grader measures saved bytes
# (`saved_bytes`): the driver's observed `saved_tensors_hooks` calls the innermost sink.
SAVES_SINKS = []


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


class _TensorRef:
    """A weak reference to a tensor with the `expired()` of `StorageWeakRef` (a layout without a
    storage: alive while the tensor is)."""

    __slots__ = ("ref",)

    def __init__(self, t):
        self.ref = _weakref.ref(t)

    def expired(self):
        return self.ref() is None


class _Made(_TorchDispatchMode):
    """Every storage an aten op made while active (below autograd, so each op the forward ran),
    held by weak reference: what is still alive afterwards is what the results keep. Also every
    storage an op wrote in place that it did not make (`filled`): a buffer made before the forward
    and filled during it keeps what was written into it."""

    def __init__(self):
        super().__init__()
        self.made = {}  # StorageImpl address -> (weak reference, bytes)
        self.filled = {}
        self._writes = {}  # op -> indices of the arguments its schema writes

    def _written(self, func):
        idx = self._writes.get(func)
        if idx is None:
            try:
                idx = tuple(
                    i for i, a in enumerate(func._schema.arguments)
                    if a.alias_info is not None and a.alias_info.is_write
                )
            except (AttributeError, RuntimeError):
                idx = ()
            self._writes[func] = idx
        return idx

    @classmethod
    def _note(cls, table, t):
        """Note `t`'s memory: its storage; a sparse tensor's parts' storages; a tensor with no
        storage the grader can name (an opaque mkldnn layout, …) by the tensor itself, its
        elements' bytes, alive while the tensor is. Nothing is skipped (issue 38: memory is what's
        alive, in whatever layout)."""
        if not isinstance(t, torch.Tensor):
            return
        layout = t.layout
        if layout is torch.sparse_coo:
            parts = (t._indices(), t._values())
        elif layout in _COMPRESSED:
            parts = (t.crow_indices(), t.col_indices(), t.values()) if layout in (
                torch.sparse_csr, torch.sparse_bsr) else (t.ccol_indices(), t.row_indices(), t.values())
        else:
            parts = None
        if parts is not None:
            for part in parts:
                cls._note(table, part)
            return
        try:
            s = t.untyped_storage()
            table[s._cdata] = (_StorageWeakRef(s), s.nbytes())
            return
        except (RuntimeError, NotImplementedError, TypeError):
            pass  # no storage to name (an opaque layout, a subclass)
        try:
            table[("tensor", id(t))] = (_TensorRef(t), t.numel() * t.element_size())
        except TypeError:
            pass

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        for i in self._written(func):
            if i < len(args):
                for t in _tree_leaves(args[i]):
                    self._note(self.filled, t)
        for t in _tree_leaves(kwargs.get("out")):
            self._note(self.filled, t)
        for t in _tree_leaves(out):
            self._note(self.made, t)
        return out


class _Exported(_TorchFunctionMode):
    """Bytes of tensors handed to host code as memory torch does not own while active: a numpy
    view (`.numpy()`, `__array__`), a DLPack capsule, a storage object, a Python list. What is
    copied out that way during a forward can be kept alive anywhere (numpy buffers made before it
    included), so a forward's kept bytes count it."""

    EXPORTS = frozenset(("numpy", "__array__", "__dlpack__", "tolist", "untyped_storage", "storage"))

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.EXPORTS and args and isinstance(args[0], torch.Tensor):
            t = args[0]
            self.bytes += t.numel() * t.element_size()
        return func(*args, **(kwargs or {}))


def param_storages(model):
    """The storages of `model`'s parameters now (held, so no later storage takes their address):
    what `kept_bytes` leaves out, taken when the grader made the model, before any submission code
    ran on it."""
    storages = [p.untyped_storage() for p in model.parameters()]
    for st in storages:
        _PARAM_BYTES.setdefault(st._cdata, st.nbytes())
    return storages


_PARAM_BYTES = {}  # a parameter storage's bytes when `param_storages` first took it (`kept_bytes`)


def _grader_files():
    """The grader's own source files (this library, the driver, the scenario, the policy)."""
    import sys

    files = {_os.path.abspath(__file__)}
    for name, mod in list(sys.modules.items()):
        if name.startswith("grade_") or name == "__main__":
            f = getattr(mod, "__file__", None)
            if isinstance(f, str):
                files.add(_os.path.abspath(f))
    return files


def kept_bytes(model, fn, params):
    """`(fn(), bytes)`: the memory a forward keeps alive for backward, in any form the submission's
    code can keep it (issue 38) — the memory a forward's graph (and its outputs) really keeps,
    `params` (`param_storages(model)` taken when the grader made the model: a parameter or buffer
    the submission registered since, and filled, is memory kept like any other) excluded
    (lesson 04). The sum of
      - the distinct storages made while `fn()` ran that are still alive when it returns, and those
        made before it and written during it (a buffer filled in place) that are still alive, in
        any layout (a sparse tensor's parts; an opaque mkldnn tensor by its elements' bytes);
      - the bytes of tensors handed out of torch while it ran (`_Exported`: numpy, DLPack, storage
        objects, lists), wherever they were copied;
      - the Python heap allocated while it ran and still allocated when it returns (`tracemalloc`),
        by whichever code allocated it (the submission's lines, torch's `torch.save` into a
        `BytesIO`, numpy), the grader's own files excepted.
    Unlike `saved_bytes` this does not depend on which saved-tensors hooks were active: a forward
    that keeps everything under hooks of its own still keeps it. Torch's modes follow the calling
    thread, as the saved-tensors hooks do; a thread started by the submission is reported by the
    driver (`integrity.thread.*`)."""
    import tracemalloc

    excluded = {s._cdata for s in params}
    # a parameter's storage is the model's by its size when the grader made it: grown since (the
    # same storage object resized, which no aten op records), what it grew by is memory like any
    # other (red team 9: every activation parked in a parameter's grown tail)
    sizes = [(s, _PARAM_BYTES.get(s._cdata, s.nbytes())) for s in params]
    made, exported = _Made(), _Exported()
    grader = _grader_files()
    tracing = tracemalloc.is_tracing()
    with _Exported(), _Made():  # the modes' first use imports what they need: not under tracing
        torch.ones(1).add_(1)
    if not tracing:
        tracemalloc.start(1)  # the line that allocated
    try:
        with exported, made:
            out = fn()
        heap = 0
        if not tracing:
            for trace in tracemalloc.take_snapshot().traces:
                if trace.traceback[0].filename not in grader:
                    heap += trace.size
    finally:
        if not tracing:
            tracemalloc.stop()
    alive = {k: n for k, (ref, n) in made.made.items() if k not in excluded and not ref.expired()}
    for k, (ref, n) in made.filled.items():
        # memory that was there before the forward (a buffer; host memory a `from_numpy` view
        # names) and written during it keeps what was written, even when the tensor naming it
        # is gone: a numpy arena outlives the transient views it was filled through (red team 6)
        if k not in excluded and (k not in made.made or not ref.expired()):
            alive[k] = n
    grown = sum(max(0, s.nbytes() - n) for s, n in sizes)
    return out, sum(alive.values()) + exported.bytes + heap + grown


def hooked_forwards(trace, params, sized=False):
    """Every forward of an observed model in `trace` and the bytes the submission's saved-tensors
    hooks were handed in it (the driver's observed `saved_tensors_hooks`, while the scenario sets
    `ctx.observe_saves`: `hooks {h}` when an entry is entered, `saved {h, p, n}` per save), shared
    by lessons 03 and 04 (issue 38: a number is believed only when the grader saw the work that
    made it). Yields `(forward, bytes)`: `forward` the `fwd_end` event (its `variant`, `whole`)
    with `grad` (autograd on) and `shape` (the scenario's `shape` event right before its `step`,
    or None); `bytes` the distinct storages' bytes (by `data_ptr`; the parameters' left out:
    `params`, a set of `data_ptr`s, or a function of the forward's `shape` event giving that
    forward's model's, when models come and go and a freed parameter's address is reused) handed
    over from the forward's start until the next forward starts or the call ends (a loss computed
    from the returned logits, outside the model, is part of it), when every one of them went to
    ONE hooks' entry entered before the forward began; else None: saves split between two entries
    (identity hooks on top taking the model's saves while the measuring ones are handed a tensor
    of a size worked out elsewhere: red team 6), or handed to hooks entered inside the forward (a
    tensor shown to them there: red team 5), measure nothing. With `sized` (lesson 03), also None
    unless the submission's own code read the size of every one of those storages somewhere in
    `trace` (`sized {p}` events: `UntypedStorage.nbytes()`, `.size()`, `len()`): an identity pack
    hook is handed everything and sizes nothing, and the grader's sum of what it was handed is no
    measurement of the submission's (red team 27: the closed form plus the slack of the few
    storages the grader pads)."""
    witnessed = {ev.get("p") for ev in trace if ev.get("e") == "sized"} if sized else None
    entered = set()  # hooks' entries entered so far (`hooks {h}` events)
    running = []  # forwards running now: [step event, shape, {h: {p: n}}, entries before it, excluded]
    last = None  # the forward that ended last, still collecting saves until the next one starts
    shape = None

    def result(window, end):
        step, at, hooks, before, _ = window
        forward = dict(end, grad=bool(step.get("grad")), shape=at)
        if len(hooks) == 1 and next(iter(hooks)) in before:
            handed = next(iter(hooks.values()))
            if witnessed is not None and not witnessed.issuperset(handed):
                return forward, None
            return forward, sum(handed.values())
        return forward, None

    for ev in trace:
        kind = ev.get("e")
        if kind in ("step", "call") and last is not None:
            yield result(*last)
            last = None
        if kind == "hooks":
            entered.add(ev.get("h"))
        elif kind == "shape":
            shape = ev
        elif kind == "step":
            excluded = params(shape) if callable(params) else params
            running.append((ev, shape, {}, frozenset(entered), excluded))
            shape = None
        elif kind == "saved":
            window = running[-1] if running else last[0] if last is not None else None
            if window is not None and ev.get("p") not in window[4]:
                window[2].setdefault(ev.get("h"), {})[ev.get("p")] = ev.get("n")
        elif kind == "fwd_end":
            while running and running[-1][0].get("id") != ev.get("id"):
                running.pop()  # a forward that raised: never ended
            if running:
                last = (running.pop(), ev)
    if last is not None:
        yield result(*last)

