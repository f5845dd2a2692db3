"""The CPU device boundary: host read-backs and tensors made from Python values (`HostReads`,
its tables `READBACKS`/`FACTORIES`/`DISPATCH`, frozen at load), constants, kept autograd graphs
(`step_marks`, `graph_steps`) — lesson 06 and any lesson that counts syncs."""
import os as _os
import sys as _sys
import weakref as _weakref
from types import MappingProxyType as _Frozen
import numpy as _np
import torch
from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef
from torch.overrides import TorchFunctionMode as _TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode
from .integrity import leftover_state


# ------------------------------------------------------------------------------------------------
# Host read-backs and tensors made from Python values (lesson 06; any lesson that counts syncs).

_TORCH_DIR = _os.path.dirname(torch.__file__) + _os.sep

# The tables below are frozen (a MappingProxyType, frozensets) and HostReads binds them when this
# module is loaded, before any submission code runs: replacing `grade_lib.READBACKS` (or any other
# name here) afterwards changes nothing that is counted.

# Calls through which a tensor's value reaches Python (on CUDA each one waits for the device):
# name -> bytes read: "one" element, "all" elements, or a fixed count. What is not named here is
# still seen when it crosses the boundary (`_crosses`: torch's own tags of the aten ops it ran).
READBACKS = _Frozen({
    "item": "one", "__bool__": "one", "__float__": "one", "__int__": "one", "__index__": "one",
    "__complex__": "one", "__contains__": "one",
    "tolist": "all", "numpy": "all", "__array__": "all", "__dlpack__": "all", "__repr__": "all",
    "__format__": "all", "__reduce_ex__": "all", "cpu": "all", "to": "all",
    # the memory's address, or a storage object that gives it: on a device it names device memory
    # host code cannot read; on a CPU run numpy reads it through `__array_interface__` with no
    # torch call at all (red team 6), so handing it out is reading all of it
    "data_ptr": "all", "untyped_storage": "all", "storage": "all", "_typed_storage": "all",
    "equal": 1, "allclose": 1,
    # every element handed to a Python callable (red team 7: `t.apply_(f)` gave each value to
    # Python with no aten op, no tag and no copy)
    "apply_": "all", "map_": "all", "map2_": "all",
    "nonzero": 8, "argwhere": 8, "masked_select": 8, "unique": 8, "unique_consecutive": 8,
})
# the course model's functions whose tensors made from Python values are the model's own, made
# for every caller alike (`TinyGPT.embed`'s position indices), not its caller's constants
COURSE_OWN = frozenset(("embed",))

# Tensors made from another tensor's shape, not its values (`zeros_like`, `new_full`, ...), and the
# usual constructors; any other call that takes no tensor and returns one (`torch.randn(())`) makes
# a tensor from Python values too (`HostReads.__torch_function__`).
FACTORIES = frozenset((
    "tensor", "as_tensor", "asarray", "scalar_tensor", "from_numpy", "frombuffer", "full", "ones",
    "zeros", "empty", "empty_strided", "arange", "range", "linspace", "logspace", "eye",
    "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like",
    "new_tensor", "new_full", "new_ones", "new_zeros", "new_empty", "new_empty_strided", "new",
))
# What reaches a TorchDispatchMode from a call that no torch function saw: the legacy
# constructors (`torch.Tensor([..])`, `torch.FloatTensor(..)`, `torch.LongTensor(3)`) reach it
# as `aten::lift_fresh` / `aten::empty`; a call made with torch functions disabled
# (`torch._C.DisableTorchFunction`) as its aten op. aten op name (overload dropped) -> kind.
# (Beside these: any aten op with no tensor input that returns one is a factory, any op that
# `_crosses` a read-back.)
DISPATCH = _Frozen({
    "lift_fresh": "factory", "lift_fresh_copy": "factory", "empty": "factory",
    "empty_strided": "factory", "scalar_tensor": "factory", "zeros": "factory", "ones": "factory",
    "full": "factory", "arange": "factory", "linspace": "factory", "eye": "factory",
    "_local_scalar_dense": "readback",
})
# Calls that hand host code the tensor's own memory (a numpy array, a DLPack capsule): on a CPU
# run they get a copy, as they would on a device, so a later read through it is not free.
_VIEWS = frozenset(("numpy", "__array__", "__dlpack__"))
# Calls whose result is memory host code reaches outside torch: numpy's (`from_numpy`), a file's
# pages (`from_file`: a second mapping of the same file, `numpy.memmap`, reads them with no torch
# call). On a CPU run they are host memory from birth (`UntypedStorage.from_file` too:
# `_storage_from_file_watched`).
_HOST_MADE = frozenset(("from_numpy", "from_file"))
# Calls whose aten ops are not looked at one by one (a whole backward: hundreds of ops); what
# they read back is still in the grader's profiler count, and the Python that autograd runs in
# them (hooks) is watched as any call of the watched code (`_engine_run_watched`).
_OPAQUE = frozenset(("backward", "grad"))
# torch's tags of an aten op whose result needs the tensor's values on the host: a Python number
# (`_local_scalar_dense`, `equal`, ...) or a shape that depends on the data (`nonzero`,
# `masked_select`, `unique`, `repeat_interleave`, ...). On CUDA each one waits for the device.
_DATA_DEPENDENT = torch.Tag.data_dependent_output
_DYNAMIC_SHAPE = torch.Tag.dynamic_output_shape
# ... and the indexing ops, tagged for their boolean-mask form only (`x[mask]`, `x[mask] = v`)
_INDEXING = frozenset(("index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index"))
_MASKS = (torch.bool, torch.uint8)
# Calls that take a second tensor as a template of its shape, dtype or device only, not of its
# values (`x.view_as(y)`: no aten op needs y's memory): what `HostReads` does not take for a
# read-back of that tensor when no aten op of the call saw it (see `_unseen_args`).
_TEMPLATES = frozenset(("type_as", "expand_as", "view_as", "reshape_as"))
# The factories that take data (`torch.tensor([t])`, `x.new_tensor(t)`, `torch.as_tensor(t)`):
# given device tensors, what they make is the device's data, not a constant.
# Reading or setting a tensor's attribute computes nothing: a view it returns (`.T`, `.data`)
# shares its storage and is the host's already by it (`HostReads.host`); another tensor it
# returns (`.grad`) is its own memory, not host memory for being a host tensor's attribute
# (red team 7: a host parameter's device `.grad` taken for host data).
_ATTRIBUTES = frozenset(("__get__", "__set__"))
# the calls that read rows of a table (`HostReads._embedding`): the token embedding's weight handed
# to one of them makes an embedding of any shape (red team 27: `F.embedding(idx.reshape(-1), W)`,
# a 2-D result viewed back, was no step); an elementwise call on the weight (a penalty's `W ** 2`)
# reads no rows, and its result may have the shape of a flattened batch's embedding
_ROW_READS = frozenset((
    "embedding", "embedding_bag", "__getitem__", "index_select", "gather", "take_along_dim", "take",
    "__matmul__", "__rmatmul__", "matmul", "mm", "bmm", "einsum", "tensordot", "index", "narrow",
))
_COPIES = frozenset(("tensor", "as_tensor", "asarray", "new_tensor", "new"))
# in-place writes of Python's values over a whole tensor: what they leave is a constant
_FILLS = frozenset(("fill_", "zero_"))
_frombuffer = torch.frombuffer
# The read-back counters active now (innermost last): what torch's own entry points below reach
# (`_frombuffer_watched`, `_engine_run_watched`) while one is active.
_ACTIVE = []
# CPU runs: the host memory (StorageImpl address -> weak reference) every counter shares, from the
# first one on (the one around the submission's import included): memory is host memory for the
# whole process, not for one counter's calls, so an array made at import is still the host's.
_HOST = {}
# Constants (StorageImpl address -> weak reference): the memory of tensors made from Python values
# only (a factory's result, and new tensors computed from constants only), shared by every counter
# like `_HOST` (a constant made at import is one in every later call). `HostReads._constants`.
_CONST = {}


_PRUNE_AT = {}  # id(table) -> the size at which `_note` next drops its dead entries


def _note(table, t):
    """Note `t`'s storage in `table`. Dead entries are dropped when the table has doubled since
    they last were, so a note costs the same however many live entries the submission keeps
    (red team 13: 12 000 constants kept alive made every note scan them all, 4 ms, charged to
    the baseline's timed calls, which make a constant per step)."""
    s = _storage(t)
    if s is None:
        return
    if len(table) > _PRUNE_AT.get(id(table), 4096):
        for k in [k for k, r in table.items() if r.expired()]:
            del table[k]
        _PRUNE_AT[id(table)] = max(4096, 2 * len(table))
    table[s._cdata] = _StorageWeakRef(s)


def _known(table, s):
    ref = table.get(s._cdata) if s is not None else None
    return ref is not None and not ref.expired()
_dispatch_len = torch._C._len_torch_dispatch_stack
_dispatch_at = torch._C._get_dispatch_stack_at
_dispatch_pop = torch._C._pop_torch_dispatch_stack
_dispatch_push = torch._C._push_on_torch_dispatch_stack
_Tensor = torch.Tensor
_Storage = torch.UntypedStorage
# torch's own Python between a line of code and the torch function it calls (the function
# wrappers, `handle_torch_function`): a call made through these only is the caller's own; one
# made from any other torch code (a module's forward, an optimizer's loop) is torch's work on its
# behalf. The aten ops of both are looked at one by one (a value read into a shape inside torch's
# modules is the caller's read-back: red team 25's `nn.Upsample(size=loss_as_tensor)`, its
# output's shape the value), except a backward's (`_OPAQUE`: hundreds of ops)
_WRAPPERS = frozenset(_os.path.join(_TORCH_DIR, f) for f in (
    "overrides.py", "_tensor.py", "functional.py", _os.path.join("nn", "functional.py"),
    "_jit_internal.py", "_tensor_str.py", _os.path.join("utils", "_contextlib.py"),
))


def _crosses(func, args):
    """(op, bytes) when aten op `func` needs its input's values on the host, else None."""
    tags = func.tags
    name = func.__name__.split(".")[0]
    if _DATA_DEPENDENT in tags or name == "_local_scalar_dense":
        src = args[0] if args and isinstance(args[0], _Tensor) else None
        return name, (src.element_size() if src is not None and name == "_local_scalar_dense" else 1)
    if name in _INDEXING:
        idx = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
        if any(isinstance(i, _Tensor) and i.dtype in _MASKS for i in idx):
            return name, 8
        return None
    if _DYNAMIC_SHAPE in tags:
        return name, 8
    return None


def _to_layout(func, out):
    """(op, 8) when aten op `func` returned a tensor of another layout than strided (sparse COO,
    CSR, CSC, BSR, BSC), else None. Such a tensor's structure is host metadata: its count of
    entries (`values().shape[0]`, `_nnz()`) and their places are the data's, so making one reads
    the data, as `nonzero` does (on CUDA it waits for the device). Red team 21 took 16 bits a
    call from `(ruler < x).to_sparse().values().shape[0]`, no op tagged as a read."""
    for t in _tensors(out):
        if t.layout is not _STRIDED:
            return func.__name__.split(".")[0], 8
    return None


_STRIDED = torch.strided

# What a torch function is handed that runs no code of anyone's: tensors, Python's plain values,
# torch's own descriptors, containers (looked into by `_own_object`)
_INERT = (int, float, bool, str, bytes, complex, type(None), slice, type(Ellipsis), torch.dtype,
          torch.device, torch.Size, torch.layout, torch.memory_format)
# the exact types of `_INERT` and plain tensors: looked at no further (a subclass is)
_PLAIN = frozenset((*_INERT, _Tensor, torch.nn.Parameter))
_OWN_TYPES = {}  # type -> whether a protocol method of it was written in the watched files
# what torch never calls on an object it is handed (making or setting up one)
_NOT_CALLED = frozenset(("__init__", "__post_init__", "__new__", "__init_subclass__", "__class_getitem__",
                         "__set_name__", "__del__"))


def _own_class(klass, files):
    """Does `klass` define a protocol method (`__lt__`, `__float__`, `__index__`, `__len__`,
    `__getitem__`, …: what torch calls on an argument implicitly) written in `files`?"""
    known = _OWN_TYPES.get(klass)
    if known is None:
        known = False
        for k in klass.__mro__:
            for name, v in vars(k).items():
                if not (name.startswith("__") and name.endswith("__")) or name in _NOT_CALLED:
                    continue
                for f in (v, getattr(v, "__func__", None), getattr(v, "func", None), getattr(v, "fget", None)):
                    code = getattr(f, "__code__", None)
                    if code is not None and _os.path.abspath(code.co_filename) in files:
                        known = True
        _OWN_TYPES[klass] = known
    return known


def _own_object(args, kwargs, files, _plain=_PLAIN):
    """An argument (and, one level in, an item of a list, tuple or dict) whose class has a
    protocol method written in `files` (the watched code): torch may call it while it handles
    the call, unwatched; None when there is none. Tensors (subclasses included:
    `__torch_function__` has its own rules) and modules are not looked at. (Called on every
    torch call the counter sees: arguments of an exactly inert type, nearly all of them, cost
    one set lookup.)"""
    for a in args:
        if type(a) not in _plain:
            x = _own_in(a, files)
            if x is not None:
                return x
    if kwargs:
        for a in kwargs.values():
            if type(a) not in _plain:
                x = _own_in(a, files)
                if x is not None:
                    return x
    return None


def _own_in(a, files):
    """`_own_object` for one argument (not of an exactly inert type)."""
    items = (a,)
    if isinstance(a, dict):
        items = (a, *a.values())
    elif isinstance(a, (list, tuple)):
        items = (a, *a)
    for x in items:
        if isinstance(x, (_INERT, _Tensor, _Storage, torch.nn.Module)) or type(x) in (list, tuple, dict):
            continue
        if _own_class(type(x), files):
            return x
    return None


# Calls that copy or pickle a tensor's Python state (its `__dict__`) inside torch's handler, where
# the counter's mode is set aside: whatever of the submission's that state holds runs there
# unwatched (red team 19: a dict key of its own class in a tensor's attribute, whose `__hash__`
# read values back while `copy.deepcopy` rebuilt the dict)
_STATEFUL = frozenset(("__deepcopy__", "__copy__", "__reduce_ex__", "__reduce__", "__getstate__", "__setstate__"))


def _own_state(args, files, depth=4):
    """An object of the watched code's own classes (a protocol method written in `files`) in the
    Python state of a tensor among `args`: its `__dict__`, keys and values, walked `depth` levels
    into dicts, lists, tuples and sets; None when there is none."""
    todo = [(getattr(a, "__dict__", None), 0) for a in args if isinstance(a, _Tensor)]
    seen = 0
    while todo:
        x, d = todo.pop()
        seen += 1
        if x is None or seen > 10_000:
            continue
        if (type(x) not in (dict, list, tuple, set, frozenset)
                and not isinstance(x, (_INERT, _Tensor, _Storage, torch.nn.Module)) and _own_class(type(x), files)):
            return x
        if isinstance(x, dict):
            items = [*x.keys(), *x.values()]
        elif isinstance(x, (list, tuple, set, frozenset)):
            items = list(x)
        else:
            continue
        if d < depth:
            todo.extend((i, d + 1) for i in items)
    return None


def _flat(args, kwargs):
    """The tensors and storages among a call's arguments (one level into lists, tuples, dicts)."""
    out = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (_Tensor, _Storage)):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if isinstance(x, (_Tensor, _Storage)))
        elif isinstance(a, dict):
            out.extend(x for x in a.values() if isinstance(x, (_Tensor, _Storage)))
    return out


def _tensors(out):
    if isinstance(out, _Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for t in out if isinstance(t, _Tensor)]
    return []


# autograd's nodes of the calls that read rows of a table: the way from an activation to the
# token embedding's weight passes one (`_table` does not walk past them)
_ROW_NODES = ("Embedding", "Mm", "Index", "Gather", "Take", "Select")


def _table(t, weight):
    """Is `t` the token embedding's weight as a table: the weight itself, a view of it (its
    memory), or a tensor of its shape that autograd made from it by calls that read no rows (red
    team 29: `F.embedding(idx, W.view_as(W))`; `W * 1` alike), a few nodes from the weight's
    accumulator? An activation of the weight's shape (a flattened batch of 256 tokens of
    d_model, as many as the vocabulary) reaches the weight only through the embedding's node."""
    if t is weight:
        return True
    if not isinstance(t, _Tensor) or t.shape != weight.shape:
        return False
    s, w = _storage(t), _storage(weight)
    if s is not None and w is not None and s._cdata == w._cdata:
        return True
    nodes, seen = [t.grad_fn], 0
    while nodes and seen < 16:
        node = nodes.pop()
        seen += 1
        if node is None:
            continue
        if getattr(node, "variable", None) is weight:
            return True
        kind = type(node).__name__
        if any(k in kind for k in _ROW_NODES):
            continue
        nodes.extend(n for n, _ in getattr(node, "next_functions", ()))
    return False


def _storage(x):
    """The untyped storage of a tensor or storage, or None (a tensor without one)."""
    try:
        return x if isinstance(x, _Storage) else x.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return None


def _copy(t):
    """A copy of `t` in new memory (what a device-to-host transfer gives), grad flag kept."""
    with torch.no_grad():
        c = t.clone()
    if t.requires_grad and c.is_leaf:
        c.requires_grad_(True)
    return c


class _Alive:
    """A no-op pre-hook put on a step's loss node: autograd holds it as long as the node lives,
    so a weak reference to it says whether the node (the step's graph) is still alive, wherever
    it is held (a tensor's attribute, a closure, containers any levels down)."""

    __slots__ = ("__weakref__",)

    def __call__(self, grad_outputs):
        return None


class _Marks(dict):
    """`step_marks`' table: {autograd node sequence number: step}, and `alive`, {step: weak
    references to that step's `_Alive` probes (its embedding's, loss and logits nodes')}."""

    def __init__(self):
        super().__init__()
        self.alive = {}
        self.weight = None  # the token embedding's weight (`step_marks`), as a weak reference
        self.embedded = None  # marks a step at an embedding's output (`step_marks`)

    def living(self):
        """The marked steps whose graph (any of its probed nodes) is alive now. A step
        whose probes have all died is dropped from `alive`: a node never comes back, so the
        check at every step boundary (`HostReads._at_step`) costs the steps still alive."""
        out = set()
        for k, refs in list(self.alive.items()):
            if any(r() is not None for r in refs):
                out.add(k)
            else:
                del self.alive[k]
        return out


def step_marks(model):
    """A table of the grader's own, {autograd node sequence number: step}, and the forward hooks
    that fill it. A step begins where every forward of the model begins, whichever way the model
    is run: its token embedding computed with autograd on (red team 9: a loss built through the
    model's own `embed`/`head_loss`, the model itself called only under `no_grad`, was no step).
    Its first node (the embedding's) is numbered and probed (`_Alive`: every activation of the
    step is computed from it, so a graph kept of anything the step computed keeps it alive, red
    team 7); the model's forward, when it returns a loss, adds that step's loss and logits nodes.
    Nothing is written on a node (its public `metadata` is the submission's to clear):
    `graph_steps` looks the nodes up here. Every step's start is a boundary: the read-back
    counter active with these marks counts the steps' graphs alive there (`HostReads._at_step`,
    red team 5: a graph kept between read-backs and dropped just before each is kept all the
    same). Returns (marks, hook handle)."""
    marks, step = _Marks(), [0]

    def probe(k, node):
        p = _Alive()
        try:
            node.register_prehook(p)
        except (AttributeError, RuntimeError, TypeError):
            return
        marks.alive[k] = marks.alive.get(k, ()) + (_weakref.ref(p),)

    def embedded(module, args, out):
        fn = out.grad_fn if isinstance(out, _Tensor) else None
        if fn is None:
            return  # no autograd graph: nothing kept, no step
        if fn._sequence_nr() in marks:
            return  # marked already, where the read-back counter saw the weight used
        k = step[0]
        step[0] += 1
        marks[fn._sequence_nr()] = k
        probe(k, fn)
        for counter in reversed(_ACTIVE):
            if counter.marks is marks:
                counter._at_step()
                break

    def hook(module, args, out):
        loss = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        fn = loss.grad_fn if isinstance(loss, _Tensor) else None
        if fn is None or not step[0]:
            return
        k = step[0] - 1  # the step its embedding began
        marks[fn._sequence_nr()] = k
        probe(k, fn)
        logits = out[0] if isinstance(out[0], _Tensor) else None
        if logits is not None and logits.grad_fn is not None:
            probe(k, logits.grad_fn)

    emb = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
    handles = [model.register_forward_hook(hook)]
    if emb is not None:
        handles.append(emb.register_forward_hook(embedded))
        # ... and wherever the watched code computes an embedding from its weight itself (red
        # team 25: `F.embedding(idx, model.tok_emb.weight)`, the module never called, no step
        # marked and no kept graph looked for): the read-back counter marks it (`_embedding`)
        marks.weight = _weakref.ref(emb.weight)
        marks.embedded = lambda out: embedded(emb, (), out)
    return marks, _Handles(handles)


class _Handles:
    """Several hook handles removed as one (`step_marks`: the model's and its embedding's, so a
    model marked again in every call carries no stale hooks)."""

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()


def graph_steps(t, marks, limit=50_000):
    """The marked steps (`step_marks`) whose loss the autograd graph of `t` still reaches."""
    return graphs_steps([t], marks, limit)


def _nodes(tensors, limit=50_000, stop=None):
    """The autograd nodes the graphs of `tensors` reach, each once (at most `limit`), not walking
    past a node `stop` accepts."""
    seen, stack = {}, [getattr(t, "grad_fn", None) for t in tensors]
    while stack and len(seen) < limit:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen[id(f)] = f  # kept alive while walking: ids are not reused
        yield f
        if stop is None or not stop(f):
            stack.extend(nf for nf, _ in f.next_functions)


def graphs_steps(tensors, marks, limit=50_000):
    """`graph_steps` over several tensors, each node walked once."""
    if not marks:
        return set()

    steps = set()

    def marked(f):  # a marked node is a step's: its mark is kept and the walk stops there
        try:
            m = marks.get(f._sequence_nr())
        except (AttributeError, RuntimeError, TypeError):
            m = None
        if m is not None:
            steps.add(m)
        return m is not None

    for _ in _nodes(tensors, limit, marked):
        pass
    return steps


def _ids(args, kwargs, seen):
    """The ids of the tensors among an aten op's arguments (one level into lists) added to `seen`."""
    for a in args:
        if isinstance(a, _Tensor):
            seen.add(id(a))
        elif isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, _Tensor):
                    seen.add(id(x))
    for a in kwargs.values():
        if isinstance(a, _Tensor):
            seen.add(id(a))


class _Unseen(_TorchDispatchMode):
    """The part of HostReads below autograd. Outside any torch function of the watched code
    (`owner.depth == 0`: a call that never passed through `HostReads.__torch_function__`) every
    aten op is judged here; inside a watched call of the submission (`owner.crossed` a list), the
    ops that cross the boundary are noted for that call, and the tensors its aten ops were handed
    (`owner.seen`: a tensor of the call that none was handed had its memory read in C++, past
    the dispatcher, `HostReads._unseen_args`)."""

    def __init__(self, owner, table=DISPATCH):
        super().__init__()
        self.owner = owner
        self.table = table

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        owner = self.owner
        if not owner.depth:
            return owner._unseen(func, args, kwargs, self.table)
        crossed = owner.crossed
        if crossed is not None and not crossed:
            hit = _crosses(func, args)
            if hit is not None:
                crossed.append(hit)
        seen = owner.seen
        if seen is not None and func.is_view:
            # a view reads no values: its source counts as seen only when a view of it is handed
            # to an op that computes (red team 27: tensordot's Python took `dims[0]`, a select,
            # then read the view's memory in C++ with `.tolist()`, no aten op; the select alone
            # had made the tensor "seen")
            out = func(*args, **kwargs)
            src = args[0] if args and isinstance(args[0], _Tensor) else None
            if src is not None:
                views = owner.views
                for o in _tensors(out):
                    # both held for the call: an id freed and reused by another view would break
                    # the way back to the source (a careful einsum of reshaped gradients was
                    # counted as a read-back, now and then)
                    views[id(o)] = (id(src), o, src)
            return out
        if seen is not None:
            _ids(args, kwargs, seen)
        out = func(*args, **kwargs)
        if crossed is not None and not crossed:
            hit = _to_layout(func, out)
            if hit is not None:
                crossed.append(hit)
        return out


class HostReads(_TorchFunctionMode):
    """Counts, device-independently, the host read-backs and the tensors made from Python values
    by `files`.

    Active as a `with` block around a call into a submission (or the grader's baseline). A torch
    call counts when the first frame outside torch that made it is in one of `files` (so the course
    model's own ops and the grader's never count), and only the outermost call counts (`print(t)`
    is one read-back, not the dozen `.item()`s inside `Tensor.__repr__`).
      - read-back: a call of `READBACKS` on a tensor that lives on the device; `.cpu()` and
        `.to("cpu")` only when they move to the host; and any other call of the watched code's own
        line (not torch's work on its behalf: an optimizer's loop, a backward) whose aten ops cross
        the boundary by torch's own tags (`_crosses`: `len(a[a < b])` reads the mask's count back),
        or that reads a device tensor argument's memory past the dispatcher (`_unseen_args`:
        `tensor_split(ruler, t)[0].shape[0]` is t's value).
        On CPU runs the "device" is the CPU and the host is the memory `.cpu()`/`.to("cpu")`,
        `.numpy()`, `__array__` and `__dlpack__` hand over: each is a copy in new memory there (as
        on CUDA), held in `_host` by its storage, and so is a tensor computed only from host
        memory; a tensor computed from any device data is device data, and device data written
        into host memory (`h.add_(d)`, `h.copy_(d)`, `h[:] = d`) is a read-back of what was
        written. So `logits.cpu()[0, -1].argmax().item()` is one read-back (of all the logits) on
        CPU and on CUDA alike. Bytes: the tensor's (`.item()`: one element).
      - factory: a call of `FACTORIES`, or any call that takes no tensor and returns one (a
        tensor made from Python values: `torch.randn(())`); the legacy constructors, which no
        torch function sees, through `DISPATCH` (a dispatch mode, `_Unseen`) and `torch.frombuffer`
        (the grader's wrapper from this module's load on, `_frombuffer_watched`).
      - kept graph: a read-back of a tensor whose autograd graph reaches the losses of more than
        one step (`marks`, from `step_marks`: the grader's table, nothing on the nodes):
        `kept_graph {steps, line}`; and more than two steps' graphs alive at once, at a read-back
        (`_held_steps`) or at a step boundary (`_at_step`, `at: "step"`).
    Each becomes `readback {op, bytes, line}` / `factory {op, line}` (plus the fields of `tag`) in
    the active trace and in `self.readbacks` / `self.factories`.
    """

    def __init__(self, ctx, files, device, *, marks=None, tag=None, held=True, autograd=False):
        super().__init__()
        self.ctx = ctx
        self.files = {_os.path.abspath(f) for f in files}
        self.cpu_run = torch.device(device).type == "cpu"
        self.marks = {} if marks is None else marks
        weight = getattr(self.marks, "weight", None)
        self._embeds = (weight, self.marks.embedded) if weight is not None else None
        self.held = held  # kept graphs: also the steps' graphs still alive (`_held_steps`)
        # `autograd`: the first torch call made while watched whose result autograd records
        # (it requires grad: the call ran with grad mode on, on a parameter) is an event
        # `autograd {op}`, what the call did, however grad mode looked to anyone who asked
        self.autograd = autograd
        self.tag = dict(tag or {})
        self.readbacks = []
        self.factories = []
        self.depth = 0  # torch functions of the watched code running now (see _Unseen)
        self.crossed = None  # a list while a watched call runs with the aten layer looking
        self.seen = None  # ... and a set: the ids of the tensors its aten ops were handed
        self.views = None  # ... and the views its aten ops made: id(view) -> (id(its source), both)
        self._seen_last = None
        self._most = 2  # the most steps' graphs seen alive at once at a step boundary, past two
        self.direct = True  # the last call attributed was made by the watched code's own line
        self._crossed_last = None
        self._host = _HOST  # CPU runs: host memory, shared by every counter (see `_HOST`)
        self._made = {}  # line -> constants derived from constants there, in this call
        # host memory that holds device data read back in this call: what a read-back made (a
        # `.cpu()`/`.to("cpu")` result, the copy a numpy view of device data shares, device data
        # written into host memory) and host results computed from it, each with the number of
        # the latest read-back it comes from: {StorageImpl address: (weak reference, number)}.
        # Copied to the device by a line, it is data going back only when a read-back came since
        # that line last sent such data (a token read back and sent again each step); data of an
        # earlier read-back sent again is a constant made in the loop (red team 29 laundered
        # Python values through one read-back before the loop, or one at import: `_host_to_device`)
        self._from_device = {}
        self._readbacks_made = 0  # read-backs counted in this call (the numbers above)
        self._sent = {}  # line -> the read-back number of the device data it last sent
        self._filled = {}  # line -> the storage a whole-tensor fill there made a constant last
        self._below = None

    def __enter__(self):
        out = super().__enter__()
        self._below = _Unseen(self)
        self._below.__enter__()
        _ACTIVE.append(self)
        # host memory freed since: dropped, so a call that reaches no host memory stays cheap
        for k in [k for k, r in self._host.items() if r.expired()]:
            del self._host[k]
        return out

    def __exit__(self, *exc):
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        self._below.__exit__(*exc)
        self._below = None
        out = super().__exit__(*exc)
        if not _ACTIVE:
            # what the watched call left behind is put back before the grader's next work (a
            # stream left on sys.stdout would run inside the baseline's timed prints: red team 6),
            # and said in the trace (`left {what}`)
            for what in leftover_state():
                self.ctx.event("left", what=what)
        return out

    def _frombuffer(self, *args, depth=2, **kwargs):
        """`torch.frombuffer` while this counter is active (`_frombuffer_watched`, which is what
        the name is from before any submission code runs): a factory, and on CPU runs a tensor of
        the buffer's memory, which is the host's."""
        return self._host_factory(_frombuffer, "frombuffer", args, kwargs, depth=depth + 1)

    def _host_factory(self, fn, name, args, kwargs, depth):
        """`fn(*args, **kwargs)`, a call that makes a tensor of host code's memory (a buffer's,
        numpy's): a factory of the caller `depth` frames up, and on CPU runs host memory."""
        line = self._caller_line(depth)
        if line is not None:
            self._record("factory", {"op": name, "line": line})
        self.depth += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            self.depth -= 1
        if self.cpu_run and isinstance(out, _Tensor):
            self._mark_host(out)
        return out

    # -- where memory is --------------------------------------------------------------------
    def host(self, t):
        """Is `t` (a tensor or a storage) host memory?"""
        if t.device.type != "cpu":
            return False
        if not self.cpu_run:
            return True
        if not self._host:
            return False
        s = _storage(t)
        ref = self._host.get(s._cdata) if s is not None else None
        return ref is not None and not ref.expired()

    def _data(self, t, number=None):
        """Note host tensor `t` as device data of read-back `number` (the latest by default)."""
        st = _storage(t)
        if st is not None:
            if len(self._from_device) > 4096:
                for k in [k for k, (r, _) in self._from_device.items() if r.expired()]:
                    del self._from_device[k]
            self._from_device[st._cdata] = (_StorageWeakRef(st), self._readbacks_made if number is None else number)

    def _data_of(self, t):
        """The read-back number of the device data host tensor `t` holds, or 0 (none)."""
        st = _storage(t) if isinstance(t, _Tensor) else None
        hit = self._from_device.get(st._cdata) if st is not None else None
        return hit[1] if hit is not None and not hit[0].expired() else 0

    def _mark_host(self, t):
        s = _storage(t)
        if s is None:
            return
        if len(self._host) > 4096:
            for k in [k for k, r in self._host.items() if r.expired()]:
                del self._host[k]
        self._host[s._cdata] = _StorageWeakRef(s)

    def _moved(self, ins, outs, written, name, line):
        """CPU runs, after a call on `ins` gave `outs` (and wrote into `written`): outputs of host
        memory only are host memory; device data written into host memory was read back."""
        if not ins:
            return
        hosts = [self.host(x) for x in ins]
        if all(hosts):
            for t in outs:
                self._mark_host(t)
        elif any(hosts):
            for t in list(outs) + list(written):
                if isinstance(t, _Tensor) and self.host(t):
                    if line is not None:
                        self._readback(t, name, t.numel() * t.element_size(), line)
                    self._data(t)
                    return

    # -- attribution and records ------------------------------------------------------------
    def _caller_line(self, depth=2, course=False, behalf=False):
        """The line of `files` this torch call is attributed to: past torch's own frames, the
        driver's attribution rule (`ctx.attributed`: standard-library and generated frames act
        on their caller's behalf). `self.direct` says afterwards whether the torch frames passed
        were only its function wrappers (`_WRAPPERS`): the watched code's own call."""
        f = _sys._getframe(depth)
        direct = True
        while f is not None:
            name = f.f_code.co_filename
            if not name.startswith(_TORCH_DIR):
                break
            if direct and name not in _WRAPPERS:
                direct = False
            f = f.f_back
        self.direct = direct
        if f is None:
            return None
        mine = (self.ctx.attributed(f, self.files, course=course, behalf=True) if behalf
                else self.ctx.attributed(f, self.files, course=course))
        return mine.f_lineno if mine is not None else None

    def _course_own(self, depth=2):
        """Whether the torch call being attributed was made by the course's own code in one of
        `COURSE_OWN` (the model's per-call constants: its position indices), past torch's frames."""
        f = _sys._getframe(depth)
        while f is not None and f.f_code.co_filename.startswith(_TORCH_DIR):
            f = f.f_back
        return f is not None and f.f_code.co_name in COURSE_OWN and self.ctx.in_course(f)

    def _raised(self, name, ins, line):
        """A call raised (its exception on the way out): an error raised on device data (an
        index out of range, a value check) may carry its values in its message; on a device it
        surfaces only where the host waits for the device (a device-side assert at the next
        sync). So a raised call of the watched code's, or of the course's model on its behalf
        (`attributed(course=True)`), is a read-back of the call's device tensors (red team 9: a
        gather whose index was the loss's bits; the model's dropout handed a device tensor)."""
        dev = [t for t in ins if isinstance(t, _Tensor) and not self.host(t)]
        if not dev:
            return
        if line is None:
            direct = self.direct
            line = self._caller_line(4, course=True)
            self.direct = direct
        if line is not None:
            self._readback(dev[0], f"{name}:raised", sum(t.numel() * t.element_size() for t in dev), line)

    def _record(self, kind, event):
        event.update(self.tag)
        (self.readbacks if kind == "readback" else self.factories).append(event)
        self.ctx.event(kind, **event)

    def _readback(self, src, op, nbytes, line):
        self._readbacks_made += 1
        self._record("readback", {"op": op, "bytes": int(nbytes), "line": line})
        steps = graph_steps(src, self.marks)
        if self.held and self.marks and len(steps) < 2:
            steps |= self._held_steps()
        if len(steps) > 1:
            self.ctx.event("kept_graph", steps=len(steps), line=line, **self.tag)

    def _at_step(self):
        """A step boundary (a step of the marked model began, `step_marks`): the steps whose
        graph is alive now. The newest and the one before it (the loop's `loss` not yet
        reassigned) may be; more alive at once is a graph kept across steps,
        whether or not a read-back comes while it is (red team 5: the running sum kept without
        `.detach()` and dropped just before each window's read). `kept_graph {steps, line,
        at: "step"}` each time the most alive at once grows past two. A weak reference per step
        still alive: cheap enough for the timed calls."""
        if not self.held:
            return
        alive = getattr(self.marks, "living", None)
        if alive is None:
            return
        n = len(alive())
        if n > 2 and n > self._most:
            self._most = n
            direct = self.direct
            line = self._caller_line(3, course=True)  # the model's `embed`, called by whom
            self.direct = direct
            self.ctx.event("kept_graph", steps=n, line=line, at="step", **self.tag)

    def _held_steps(self):
        """The marked steps whose loss node is still alive at this read-back, wherever it is
        held (issue 38, memory is what's alive; red team 4: a tensor's attribute, three
        containers down): the probes of `step_marks` (`_Marks.living`). The newest step and
        the one before it may be alive (the loop's `loss`, a `last_loss` kept for a message);
        older ones alive beside them are a graph kept across steps (a running sum kept without
        `.detach()`, whatever tensor is read back). What is alive is alive: a graph only
        garbage in a reference cycle holds is still memory held at the read-back (and a
        collection here would be time charged to the submission's timed calls)."""
        alive = getattr(self.marks, "living", None)
        if alive is None:
            return set()
        steps = alive()
        return steps if len(steps) > 2 else set()

    def _unseen(self, func, args, kwargs, table):
        """An aten op reached outside every torch function of the watched code."""
        op = func.__name__.split(".")[0]
        try:
            out = func(*args, **kwargs)
        except Exception:  # its message may carry device values (`_raised`)
            self._raised(op, _flat(args, kwargs), None)
            raise
        kind = table.get(op)
        ins = _flat(args, kwargs)
        hit = _crosses(func, args) or _to_layout(func, out)
        if kind is None and hit is not None:
            kind = "readback"
        if kind is None and not any(isinstance(x, _Tensor) for x in ins) and _tensors(out):
            kind = "factory"
        line = None
        if kind is not None or (self.cpu_run and self._host):
            line = self._caller_line(3)
        if line is not None:
            if kind == "factory":
                self._record("factory", {"op": op, "line": line})
            elif kind == "readback":
                src = args[0] if args and isinstance(args[0], _Tensor) else None
                if src is not None and not self.host(src):
                    self._readback(src, op, hit[1] if hit else src.element_size(), line)
        if self.cpu_run and self._host:
            self._moved(ins, _tensors(out), (), op, line)
        return out

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
            if isinstance(a, _Tensor):
                return "host" if self.host(a) else "device"
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None, *, _readbacks=READBACKS,
                           _factories=FACTORIES):
        kwargs = kwargs or {}
        own = _own_object(args, kwargs, self.files)
        if own is not None:
            # torch would call its methods (`p < 0.0` in dropout's range check) while handling
            # this call, where no counter sees what they read (red team 13: every per-step
            # read-back of the baseline done inside a dropout probability's `__lt__`)
            raise TypeError(
                f"{getattr(func, '__name__', 'a torch function')}() was handed an object of your own class "
                f"({type(own).__name__}): torch would run its methods inside its own call; pass tensors and "
                "plain numbers (see the contract in README.md)"
            )
        name = getattr(func, "__name__", "")
        if name in _STATEFUL:
            own = _own_state(args, self.files)
            if own is not None:
                raise TypeError(
                    f"{name}() of a tensor that holds an object of your own class "
                    f"({type(own).__name__}) in its attributes: torch would run its methods while it copies "
                    "the tensor; keep your own objects out of tensors' attributes (see the contract in README.md)"
                )
        line = self._caller_line()
        if line is None and (name in _VIEWS or name in _readbacks):
            # a read of a tensor's values that no line of the watched code made directly: torch's
            # code above numpy's or the standard library's, set going by the watched code, acts on
            # its behalf (`attributed(behalf=True)`: a DataLoader's collate_fn)
            line = self._caller_line(behalf=True)
        if line is None and (name in _VIEWS or name in _readbacks or name in _factories or not (
                (args and isinstance(args[0], _Tensor))  # most calls: no walk of the arguments
                or any(isinstance(a, _Tensor) for a in _flat(args, kwargs)))):
            # the course's code the watched code called runs on its behalf: what it reads back or
            # makes from Python values is the watched code's (red team 42: a one-element tensor
            # handed to the model as `blocks_fn`, whose truth the forward's `blocks_fn or …` read
            # at every step; course modules built in every step for the constants their
            # constructors make), save the position indices the model's forward makes for every
            # caller alike (`COURSE_OWN`). The grader's own calls of the model have no line
            line = self._caller_line(course=True)
            if line is not None and name not in _VIEWS and name not in _readbacks and self._course_own():
                line = None
        if line is None and not self._host:
            # not the watched code's call, and no host memory to follow: nothing to count
            try:
                out = self._call(func, args, kwargs)
            except Exception:
                self._raised(name, _flat(args, kwargs), None)
                raise
            if self._embeds is not None and name in _ROW_READS:
                # the model's own embedding, inside its module's forward: marked here, before any
                # forward hook of the module's runs (red team 29: a hook of the submission's,
                # prepended, handed the grader's hook a detached copy, so no step was marked)
                self._embedding(name, [a for a in args if isinstance(a, _Tensor)], out)
            if self.autograd:
                self._recorded(func, out)
            return out
        if name in _ATTRIBUTES and not self.direct:
            # torch's own reads and writes of a tensor's attributes on the watched code's behalf
            # (an optimizer's `p.grad`: half the torch calls of a training step): nothing is
            # computed, so no read-back, factory, constant or host write comes of one (what the
            # full path below finds for them: nothing), only its exceptions are looked at
            try:
                out = self._call(func, args, kwargs)
            except Exception:
                self._raised(name, [a for a in _flat(args, kwargs) if isinstance(a, _Tensor)], line)
                raise
            if self.autograd:
                self._recorded(func, out)
            return out
        ins = _flat(args, kwargs)
        tensors = [a for a in ins if isinstance(a, _Tensor)]
        src = args[0] if args and isinstance(args[0], _Tensor) else None
        cpu = self.cpu_run
        if src is not None and len(tensors) > 1 and name not in _ATTRIBUTES and not self.host(src):
            # host memory handed to a call on device data is copied to the device, whatever the
            # call is named (`copy_`, `dev[...] = host`, `index_put_`, `where`, arithmetic with
            # a host operand): red team 46 sent a Python value to the device every step with
            # `n_dev[...] = host`, which only `copy_` was looked at for
            for a in tensors[1:]:
                if self.host(a):
                    self._host_to_device(name, line, a)
                    break
        if name in ("cpu", "cuda", "to") and src is not None:
            where = self._destination(name, args, kwargs)
            if where is not None:
                if where == "host" and not self.host(src) and line is not None:
                    self._readback(src, name, src.numel() * src.element_size(), line)
                if where == "device" and self.host(src):
                    self._host_to_device(name, line, src)
                out = self._call(func, args, kwargs)
                if cpu and isinstance(out, _Tensor):
                    s, o = _storage(src), _storage(out)
                    if s is not None and o is not None and s._cdata == o._cdata:
                        out = self._call(_copy, (out,), {})  # a move gives new memory, as on a device
                    if where == "host":
                        self._mark_host(out)
                if where == "host" and isinstance(out, _Tensor) and not self.host(src):
                    self._data(out)
                return out
        if cpu and name in _VIEWS and src is not None and not self.host(src):
            # the device tensor's own memory handed to host code: a copy, read back
            if line is not None:
                self._readback(src, name, src.numel() * src.element_size(), line)
            copy = self._call(_copy, (src,), {})
            self._data(copy)  # (what a numpy view of it shares: device data)
            return self._call(func, (copy,) + tuple(args[1:]), kwargs)
        counted = False
        if name in _readbacks and name not in ("cpu", "to") and tensors and not all(self.host(t) for t in tensors):
            if line is not None:
                size = _readbacks[name]
                t = tensors[0]
                nbytes = (
                    t.element_size() if size == "one"
                    else t.numel() * t.element_size() if size == "all" else size
                )
                self._readback(t, name, nbytes, line)
                counted = True
        # every call attributed to the watched code's line, its own or torch's on its behalf
        # (a module's forward), has its aten ops looked at: ~4 % of a lesson-06 grading
        look = line is not None and not counted and name not in _OPAQUE
        # host memory the call may write (the tensors handed to it, one level into lists; and,
        # for a backward, the host `.grad`s autograd will accumulate into): device data written
        # there is read back, whatever the call returns (red team 7: an optimizer's foreach step
        # that returns None, AccumulateGrad adding into a numpy `.grad`)
        versions = self._host_versions(name, ins) if cpu and self._host else None
        try:
            out = self._call(func, args, kwargs, look=look)
        except Exception:
            if not counted:
                self._raised(name, tensors, line)
            raise
        if look:
            crossed = self._crossed_last
            if crossed:
                t = tensors[0] if tensors else None
                if t is None or not self.host(t):
                    op, nbytes = crossed[0]
                    self._readback(t, f"{name}:{op}", nbytes, line)
                    counted = True
            if not counted and tensors:
                t = self._unseen_args(name, tensors, out)
                if t is not None:
                    self._readback(t, f"{name}:values", t.numel() * t.element_size(), line)
                    counted = True
        if line is not None and not counted:
            made = name in _factories or (not tensors and name != "frombuffer" and bool(_tensors(out)))
            if made:
                self._record("factory", {"op": name, "line": line})
            self._constants(name, args, tensors, out, made, line)
        if cpu:
            if isinstance(out, _Tensor) and (name in _HOST_MADE or _aliases_host(args, kwargs, out)):
                # numpy's memory (a buffer's) is the host's: `from_numpy`, and any call whose
                # result is a view of an array or buffer it was handed (`as_tensor`, `asarray`,
                # `from_dlpack` of a numpy array)
                self._mark_host(out)
            elif self._host and name not in _ATTRIBUTES:
                written = [t for t, v in versions or () if t._version != v]
                if name == "__setitem__" and src is not None:
                    written.append(src)
                if name in _OPAQUE:  # what autograd wrote into host memory, from device data
                    for t in written:
                        if line is not None and not counted:
                            self._readback(t, f"{name}:grad", t.numel() * t.element_size(), line)
                            counted = True
                else:
                    self._moved(ins, _tensors(out), written, name, None if counted else line)
        if self._from_device and tensors:
            # host results computed from device data read back are that data (its latest number)
            number = max(self._data_of(t) for t in tensors)
            if number:
                for t in _tensors(out):
                    if self.host(t):
                        self._data(t, number)
        if self._embeds is not None and tensors:
            self._embedding(name, tensors, out)
        if self.autograd:
            self._recorded(func, out)
        return out

    def _embedding(self, name, tensors, out):
        """A step begins where the token embedding's weight makes a (B, T, d_model) result with
        autograd on, however the watched code computed it (`F.embedding`, indexing the weight, a
        one-hot product), or rows of d_model of any other shape by a call that reads rows of a
        table (`_ROW_READS`: a flattened batch's embedding): `step_marks` marks it, as its module
        hook does for the model's own. The weight is the table however it is handed over: itself,
        a view of it, or a copy autograd made of it (`_table`)."""
        weight = self._embeds[0]()
        if weight is None or not isinstance(out, _Tensor) or out.grad_fn is None or out.dim() < 1:
            return
        if out.shape[-1] != weight.shape[1] or not (out.dim() == 3 or name in _ROW_READS):
            return
        if any(_table(t, weight) for t in tensors):
            self._embeds[1](out)

    def _host_versions(self, name, ins):
        """`[(tensor, its version)]` of the host tensors a call may write: those among `ins`, and
        for a backward (`_OPAQUE`) the host `.grad`s of the leaves its graph accumulates into
        (walked from the tensors handed to it, up to 50 000 nodes)."""
        out = [(t, t._version) for t in ins if isinstance(t, _Tensor) and self.host(t)]
        if name in _OPAQUE:
            for node in _nodes([t for t in ins if isinstance(t, _Tensor)]):
                leaf = getattr(node, "variable", None)
                g = leaf.grad if isinstance(leaf, _Tensor) else None
                if g is not None and self.host(g):
                    out.append((g, g._version))
        return out

    def _host_to_device(self, name, line, src):
        """Host memory copied to the device by a line of the watched code's own: the same live
        host memory copied again by the same line in the same call (a loop) is a constant made in
        the loop, as a factory there is (`factory {op, line}`; red team 13: a host constant made
        once and `.to(device)` every step counted nothing). So is a constant (`_CONST`: values
        from Python only) copied by the same line again, whatever memory holds it (red team 25:
        `host.clone().fill_(n).to(device)` every step, a new storage each time). Device data
        read back and sent again each time (a token: a read-back came since the line last sent
        data) is no constant: its read-back is what counts. Any other host memory copied by the
        same line again is made on the host in the loop, a constant as far as the device is
        concerned (red team 27: a numpy array written with a Python value each step, cloned and
        copied to the device; red team 29: Python values computed into the memory of one
        read-back made before the loop, or at import)."""
        s = _storage(src)
        if line is None or not self.direct or s is None:
            return
        if _known(_CONST, s):
            n = self._made[("h2d const", line)] = self._made.get(("h2d const", line), 0) + 1
            if n > 1:
                self._record("factory", {"op": name, "line": line})
                return
        number = self._data_of(src)
        if number > self._sent.get(line, 0):
            self._sent[line] = number  # device data of a read-back since this line last sent some
            return
        seen = self._made.setdefault(("h2d", line), {})
        ref = seen.get(s._cdata)
        if ref is not None and not ref.expired():
            self._record("factory", {"op": name, "line": line})
            return
        seen[s._cdata] = _StorageWeakRef(s)
        n = self._made[("h2d host", line)] = self._made.get(("h2d host", line), 0) + 1
        if n > 1:
            self._record("factory", {"op": name, "line": line})

    def _constants(self, name, args, tensors, out, made, line):
        """Constants followed by what they are (`_CONST`), not by the name of the call that made
        them: a factory's result is a constant, and so is a new tensor computed from constants
        only (`proto.clone()`, `base * 2`: what `torch.full_like(proto, n)` is in two calls).
        Made again by the same line of the watched code's own in the same call (a loop), such a
        tensor is a constant made in the loop: `factory {op, line}` from its second time on (a
        constant built in a few calls before the loop counts once, as its factory). A write of
        anything else into a constant (`acc += loss.detach()`, `buf[i] = x`) makes it data."""
        table = _CONST
        if made:
            if name in _COPIES and not all(self.host(t) or _known(table, _storage(t)) for t in tensors):
                return  # device data copied (`torch.tensor([t])`, `torch.as_tensor(t)`): data
            for t in _tensors(out):
                _note(table, t)
            return
        dest = args[0] if args and isinstance(args[0], _Tensor) else None
        if name in _FILLS and dest is not None and self.direct and all(
            t is dest or _known(table, _storage(t)) for t in tensors
        ):
            _note(table, dest)  # its values are Python's now (`buf.fill_(n)`): a constant
            # ... filled with a value again by the same line on another storage (a fresh tensor
            # filled each step: red team 27's `loss.detach().clone().fill_(n)`) is a constant made
            # in the loop; an accumulator reset to zero (`zero_()` every log window, on a sum
            # rebound each step too: careful_rebound_detached_sum) is not
            d, last = _storage(dest), self._filled.get(line)
            if d is not None and line is not None and name == "fill_":
                if last is None or last.expired() or last.cdata != d._cdata:
                    n = self._made[line] = self._made.get(line, 0) + 1
                    if n > 1:
                        self._record("factory", {"op": name, "line": line})
                self._filled[line] = _StorageWeakRef(d)
            return
        if not tensors or not table or not self.direct:
            return
        ins = [_storage(t) for t in tensors]
        const = all(_known(table, x) for x in ins)
        mine = {x._cdata for x in ins if x is not None}
        if const:
            new = [t for t in _tensors(out) if (x := _storage(t)) is not None and x._cdata not in mine]
            if new:
                for t in new:
                    _note(table, t)
                n = self._made[line] = self._made.get(line, 0) + 1
                if n > 1:
                    self._record("factory", {"op": name, "line": line})
            return
        d = _storage(dest) if dest is not None else None
        if d is None or d._cdata not in table:
            return
        o = _storage(out) if isinstance(out, _Tensor) else None
        if name == "__setitem__" or (o is not None and o._cdata == d._cdata):
            del table[d._cdata]  # data written into it

    def _unseen_args(self, name, tensors, out):
        """The device tensor whose values a call of the watched code's own took to the host past
        the dispatcher, or None (red team 5, `tensor_split(ruler, code)[0].shape[0]`: on CPU
        `tensor_split` reads the index tensor's memory in C++ and the value comes back as a
        shape). Every aten op a call runs is handed the tensors whose data it uses, so a tensor
        argument that no aten op of the call was handed (`self._seen_last`; a view op reads no
        values, so a tensor only viewed counts as handed only when a view of it was: red team
        27's `tensordot(a, b, dims=D)`, whose Python takes `D[0]` and reads it with `.tolist()`)
        and that returns
        tensors made of other memory was read for something else than data: a shape, a
        section, a count, whatever its values decide of the result (`tensor_split`, `split`
        with tensor sections, and every composite op that reads an argument's memory on the
        host; on CUDA each one waits for the device, or refuses a device tensor). What it is
        not: host memory, a constant (its values came from Python), a template of a shape or
        dtype only (`_TEMPLATES`), the data a factory copies (`x.new_tensor(y)`: y's values as
        a tensor of y's shape, a factory), the result itself or, for the call's first tensor,
        memory of its own (`x.contiguous()`, `x.data`: the same data, handed on; a later
        argument sharing the result's memory is still read: red team 45's
        `tensor_split(buf, buf[:2])`), nor an attribute read or set
        (`_ATTRIBUTES`: `p.grad` hands over the parameter's gradient, its own memory, without
        reading a value of `p`; red team 27 found an honest on-device gradient-norm log
        counted as a read-back of every parameter)."""
        seen = self._seen_last
        outs = _tensors(out)
        if seen is None or not outs or name in _ATTRIBUTES:
            return None
        for t in tensors:
            if id(t) in seen or name in _TEMPLATES or name in FACTORIES or self.host(t):
                continue
            s = _storage(t)
            if s is None or _known(_CONST, s):
                continue
            if any(o is t for o in outs):
                continue
            # memory of its own handed on: only the call's first tensor, whose data the result
            # is (a second argument of the same memory, `tensor_split(buf, buf[:2])`'s sections,
            # is read for what it decides: red team 45)
            mine = s._cdata
            if t is tensors[0] and any((x := _storage(o)) is not None and x._cdata == mine for o in outs):
                continue
            return t
        return None

    def _recorded(self, func, out):
        """`autograd {op}` (once) when `out` is, or holds, a result autograd recorded (a tuple's
        too: red team 18 recorded a graph with `var_mean`, whose result is a pair)."""
        for t in (out,) if isinstance(out, _Tensor) else _tensors(out):
            if isinstance(t, _Tensor) and t.requires_grad and t.grad_fn is not None:
                self.autograd = False
                self.ctx.event("autograd", op=getattr(func, "__name__", "?"), **self.tag)
                return

    def _call(self, func, args, kwargs, look=False):
        """func() with the dispatch mode below set aside (when it is on top, as it is unless
        the watched code pushed one of its own): what a torch function does inside is counted
        at the torch-function level or not at all, and costs no Python call per aten op. With
        `look` (a call of the watched code) it stays, noting the aten ops that cross the
        boundary (`_crossed_last` afterwards)."""
        self.depth += 1
        below = self._below
        outer = self.crossed
        outer_seen = self.seen
        outer_views = self.views
        back = False
        if look:
            self.crossed = []
            self.seen = set()
            self.views = {}
            aside = False
            # a call of the watched code made where the mode below was set aside (a hook that
            # autograd runs inside an opaque backward): it looks there too, for this call
            if below is not None:
                n = _dispatch_len()
                back = not any(_dispatch_at(i) is below for i in range(n))
                if back:
                    _dispatch_push(below)
        else:
            self.crossed = None
            self.seen = None
            self.views = None
            n = _dispatch_len()
            aside = n > 0 and below is not None and _dispatch_at(n - 1) is below
        if aside:
            _dispatch_pop(None)
        try:
            return func(*args, **kwargs)
        finally:
            if aside:
                _dispatch_push(below)
            if back:
                _dispatch_pop(None)
            self._crossed_last = self.crossed
            self.crossed = outer
            seen, views = self.seen, self.views
            if views:
                # a tensor is seen when a view of it (of a view of it, …) was handed to an op;
                # closed here, while the views are held, and then let go
                for v in list(seen):
                    while v in views and views[v][0] not in seen:
                        v = views[v][0]
                        seen.add(v)
            self._seen_last = seen
            self.seen = outer_seen
            self.views = outer_views
            self.depth -= 1


_BUFFERS = (_np.ndarray, bytearray, memoryview, bytes)


def _buffer(a):
    """Does `a` hand out its memory through the buffer protocol (numpy arrays, bytes, bytearray,
    memoryview, `array.array`, anything else that does: red team 13 aliased an `array.array`)?"""
    if isinstance(a, _BUFFERS):
        return True
    if isinstance(a, (_INERT, _Tensor)):
        return False
    try:
        memoryview(a).release()
    except (TypeError, ValueError, BufferError):
        return False
    return True


def _aliases_host(args, kwargs, out):
    """Is `out` (a tensor) a view of the memory of a numpy array or buffer among the arguments?"""
    found = None
    for a in list(args) + list(kwargs.values()):
        if _buffer(a):
            found = found or []
            found.append(a)
        elif type(a) in (list, tuple):
            found = found or []
            found.extend(x for x in a if _buffer(x))
    if not found:
        return False
    try:
        s = out.untyped_storage()
        p, n = s.data_ptr(), s.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    for a in found:
        try:
            arr = a if isinstance(a, _np.ndarray) else _np.frombuffer(memoryview(a).cast("B"), dtype=_np.uint8)
            lo = arr.__array_interface__["data"][0]
            hi = lo + max(arr.nbytes, 1)
        except (TypeError, ValueError, AttributeError):
            continue
        if lo < p + max(n, 1) and p < hi:
            return True
    return False


def _frombuffer_watched(*args, **kwargs):
    """What `torch.frombuffer` is from the moment this module is loaded (before any submission
    code runs, so a name bound at import, `from torch import frombuffer`, is this one too): the
    innermost active read-back counter's `_frombuffer`, or torch's own when none is active."""
    if _ACTIVE:
        return _ACTIVE[-1]._frombuffer(*args, depth=3, **kwargs)
    return _frombuffer(*args, **kwargs)


_from_numpy = torch.from_numpy


def _from_numpy_watched(*args, **kwargs):
    """What `torch.from_numpy` is from the moment this module is loaded: torch's own passes no
    torch function mode, so no counter saw its result, numpy's memory, as the host's (red team 7:
    a numpy-backed tensor written in place from device data, then read with numpy). Whoever
    calls it, the memory is the host's, in every counter (`_HOST`)."""
    if _ACTIVE:
        return _ACTIVE[-1]._host_factory(_from_numpy, "from_numpy", args, kwargs, depth=3)
    out = _from_numpy(*args, **kwargs)
    if isinstance(out, _Tensor):
        _note(_HOST, out)
    return out


_engine_run = torch.autograd._engine_run_backward


def _engine_run_watched(*args, **kwargs):
    """What torch's `backward()` and `autograd.grad()` run the autograd engine through, from the
    moment this module is loaded. A read-back counter's mode is set aside while its own handler
    runs (and so for the whole of a `backward()` the watched code calls): here, below the
    handler, it is put back for the engine's run, so whatever Python autograd runs during the
    backward (hooks on tensors, nodes and modules, saved-tensor unpack hooks, a custom
    Function's backward) is watched as every other call is (issue 38: every call watched)."""
    reads = _ACTIVE[-1] if _ACTIVE else None
    if reads is None or any(_function_at(i) is reads for i in range(_function_len())):
        return _engine_run(*args, **kwargs)
    _function_push(reads)
    try:
        return _engine_run(*args, **kwargs)
    finally:
        _function_pop()


def run_watched(fn, *args):
    """`fn(*args)` watched by the innermost active read-back counter, as `_engine_run_watched`
    runs a backward: Python that torch runs inside an op of the watched code's (a saved-tensors
    pack hook runs inside the op that saves, where the counter's mode is set aside while its own
    handler runs the op) is watched as every other call is. Red team 18 read every step's loss
    back, made the baseline's constants and copied whole logits to the host inside pack hooks,
    and the counter saw none of it."""
    reads = _ACTIVE[-1] if _ACTIVE else None
    if reads is None or any(_function_at(i) is reads for i in range(_function_len())):
        return fn(*args)
    _function_push(reads)
    try:
        return fn(*args)
    finally:
        _function_pop()


_storage_from_file = torch.UntypedStorage.from_file


def _storage_from_file_watched(*args, **kwargs):
    """What `torch.UntypedStorage.from_file` is from the moment this module is loaded (and so
    `TypedStorage.from_file`, which calls it): a storage of a file's pages, which host code
    reaches outside torch (`numpy.memmap` of the same file), so host memory from birth, in the
    table every counter shares (`_HOST`)."""
    s = _storage_from_file(*args, **kwargs)
    _HOST[s._cdata] = _StorageWeakRef(s)
    return s


_function_len = torch._C._len_torch_function_stack
_function_at = torch._C._get_function_stack_at
_function_push = torch._C._push_on_torch_function_stack
_function_pop = torch._C._pop_torch_function_stack
torch.frombuffer = _frombuffer_watched
torch.from_numpy = _from_numpy_watched
torch.UntypedStorage.from_file = staticmethod(_storage_from_file_watched)
torch.autograd._engine_run_backward = _engine_run_watched

