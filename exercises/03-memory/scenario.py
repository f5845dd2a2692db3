"""Lesson 3 scenario: what the grader runs against a submission's memory_ledger(), sweep() and GROWTH.

Each probe records raw observations; verdicts are decided in Rust from rubrics/03-memory.yaml.
Who computes what (ARCHITECTURE.md):
  - the model's shape (vocab, d_model, n_heads, n_blocks) is drawn from the seed in Rust
    (exercise.yaml `model_draw:`), so no table of bytes can be pasted; ctx.model_cfg is the drawn one;
  - params, grads and optimizer state: Rust, from that shape (src/checks/ledger.rs);
  - activations (and on CUDA the peak of one step): the grader's own measurement, taken by
    `before_submission()` BEFORE the submission is imported, sent at once and not kept (its
    copies in `ctx.metrics` / `ctx.traces` are dropped), so the submission can neither read it
    nor change how it is taken (a `grade_lib.saved_bytes` replaced at import comes too late);
  - loss, logits, gradients and the weights after one Adam / SGD+momentum step: libtorch, in Rust
    (src/reference/), compared with what the grader caught of the ledger's step;
  - proof of work (issue 38): every forward of the observed model saves a tag of the grader's
    (`_tagged`: a view of ones whose storage size is drawn per row, each call and shape,
    multiplied into the embedding's output before any code of the submission's runs), so every
    row's activations are measured in that row's forward or wrong; the repeated Adam ledger runs
    on a case of another shape drawn from the seed; and each returned row counts only if the
    grader saw a whole training step (`step` + `step_done`) at its shape, on its case (the model
    handed over for it, on its tokens), in the call that returned it (`shape` and `call` events
    below, judged in Rust by the `ledger` check's `steps:`).

A *case* is what `make_case(batch, seq_len)` returns and `memory_ledger(**case)` takes: a fresh
TinyGPT with the grader's weights (train mode, dropout 0), a fresh optimizer on its parameters and
a batch, all on the grading device: {"model", "optimizer", "batch": {"idx", "targets"}, "device"}.

Probes:
  grader        the grader's own ledger of each case (activations = bytes saved for backward,
                measured with saved_tensors_hooks; on CUDA the peak of one step) and its own sweep
  ledger        the submission's memory_ledger() on an Adam case and on an SGD + momentum case: its
                entries, what the grader saw of the step it ran (backward passes that reached the
                parameters, Adam's step counter) and its loss, logits, gradients and the change of
                every weight (compared with the libtorch reference); then on another Adam case
                (batch and seq_len drawn from the seed): its entries against the grader's ledger
                of that case, its step one the grader saw
  sweep         the submission's sweep() over the grid of exercise.yaml
  growth        GROWTH

Traces (one event per ledger row: batch, seq_len, optimizer and the entries; an entry that is not a
number is left out and its `<entry>_error` says why; the grader's rows also carry `tag`, the bytes
of the tag's storage in that row):
  ledger.{adam,sgd,adam_again}, grader.{adam,sgd,adam_again}, sweep.student, sweep.grader
Event traces {ledger,sweep,growth}.calls: what happened during each probe (`empty_cache` calls, the
grader's `step` / `fwd_end` / `step_done` events, `call {call}` when a call of the submission
begins, `shape {batch, seq_len, case}` before each forward's `step`, `opt_step {call, batch,
seq_len, state}` as each handed-over optimizer's `step()` returns: `_stepped`), sent as it happens.
Metrics: ledger.{adam,adam_again,sgd}.<entry>, ledger.{adam,adam_again,sgd}.backwards,
ledger.{adam,adam_again}.adam_step, grader.{adam,sgd,adam_again}.{activations,peak}, growth.{batch,seq_len},
calls.empty_cache (torch.cuda.empty_cache() calls while the submission ran, counted on CPU too).
Tensors: ledger/{adam,sgd}/{loss,logits,grad/<param>,update/<param>}.
"""
import functools
import gc
import random
import weakref

import torch
import torch.nn.functional as F

from course import Config
from course.model import TinyGPT, _plain_blocks

ENTRIES = ("params", "grads", "optimizer_state", "activations")
OPTIMIZERS = ("adam", "sgd_momentum")
# the submission's calls, as the rows they return are traced (`call {call}` opens each in the
# probe's event trace): the three single ledgers and the sweep
CALLS = ("ledger.adam", "ledger.sgd", "ledger.adam_again", "sweep.student")

_synchronize = torch.cuda.synchronize
_reset_peak = torch.cuda.reset_peak_memory_stats
_max_allocated = torch.cuda.max_memory_allocated
_Adam, _SGD = torch.optim.Adam, torch.optim.SGD
_zeros_like = torch.zeros_like
_no_grad = torch.no_grad
from torch.optim.optimizer import register_optimizer_step_pre_hook as _register_optimizer_step_pre_hook  # noqa: E402
ProbeFailed = Exception  # replaced by the driver's class before anything runs


# Drawn per grading from a secret of this process, not from the seed (which torch hands back:
# `torch.initial_seed()`): the tags' and pads' sizes. The grader's own rows (before the submission
# is imported) and the submission's calls draw from it alike; reproducibility is unharmed, since no
# verdict depends on the sizes, only on the submission measuring them.
_SECRET = random.SystemRandom().getrandbits(64)
# the pads of the forward running now: ([extra elements before each block, before the head],
# [extra elements of each block's `mlp.fc` output])
_PADS = [None]


def _padded(x, extra):
    """`x`'s values in a fresh tensor that is a view of a storage `extra` elements longer: what
    autograd saves of it (a LayerNorm's input) keeps the whole storage. Values and gradients are
    unchanged to the bit (a copy)."""
    buf = torch.empty(x.numel() + extra, dtype=x.dtype, device=x.device)
    return buf[: x.numel()].view(x.shape).copy_(x)


def _pad_input(i, module, args):
    """Forward pre-hook on block `i` of every model the lesson makes: while a tagged forward runs,
    the block's input is padded (`_padded`) by that forward's drawn extra for block `i`."""
    pads = _PADS[0]
    if pads is None or i >= len(pads[0]) - 1 or not args or not isinstance(args[0], torch.Tensor):
        return None
    return (_padded(args[0], pads[0][i]),) + tuple(args[1:])


class _PaddedFC(torch.nn.Linear):
    """Each block's first MLP projection (`mlp.fc`) in the lesson's models: once the call (its
    forward and every forward hook) is over, its output is copied into a storage longer by the
    running forward's drawn extra for that block (`_FC`). GELU saves its input for backward, so
    the drawn slack is kept with it. Values and gradients are unchanged to the bit (a copy; the
    projection's own output is then saved by nothing).

    Red team 25 read the block-input pads off forward pre-hooks on the blocks: any module's input
    and output is open to a module hook. This pad is made after the projection's hooks have run,
    on a tensor no module hook is handed, so only what autograd saves (a `saved_tensors_hooks`
    measurement) shows it."""

    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        pads, i = _PADS[0], _FC.get(self)
        if pads is None or i is None or not isinstance(out, torch.Tensor):
            return out
        return _padded(out, pads[1][i])


# the block index of each padded MLP projection of the lesson's models
_FC = weakref.WeakKeyDictionary()


def _pad_blocks(model):
    for i, block in enumerate(model.blocks):
        block.register_forward_pre_hook(functools.partial(_pad_input, i))
        if type(block.mlp.fc) is torch.nn.Linear:
            block.mlp.fc.__class__ = _PaddedFC
            _FC[block.mlp.fc] = i
    return model


# The parameter of the forward running now that gets no gradient (id -> True), and the observer
# told so (`_drop_grad`)
_DROPPING = {}
_DROP_TOLD = [None]


def _drop_grad(p):
    """Post-accumulate-grad hook on every parameter of every model the lesson makes: the one
    parameter drawn for the running row (`Setup.dropped`) has its gradient taken away once it is
    accumulated, so `.grad` is None after the backward and the optimizer makes no state for it.
    Grads and optimizer state then differ from the parameters' bytes by a drawn amount, read
    only after the step (a formula of the shapes, before it, is wrong)."""
    if _DROPPING.get(id(p)) is None:
        return
    told = _DROP_TOLD[0]
    # only in a backward that began at a loss the observed model returned, every such backward
    # of the row: a backward of the submission's own (a `p.sum() * 0` of each parameter) would
    # learn the draw before the step (red team 6)
    if told is not None and not told.in_loss_backward():
        return
    p.grad = None
    if told is not None:
        told.dropped.add(id(p))


def _drop_hooks(model):
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(_drop_grad)
    return model


def _drop_next(model, k, observer=None):
    """Parameter `k` of `model` (or none when k is None) loses its gradient in the next backward."""
    _DROPPING.clear()
    _DROP_TOLD[0] = observer
    if k is not None:
        params = list(model.parameters())
        if 0 <= k < len(params):
            _DROPPING[id(params[k])] = True


def _tagged(tag, pads, inner=None):
    """A `blocks_fn` that multiplies the embedding's output by `tag`, a float32 view of ones, and
    runs the blocks (`inner`, the submission's own or the plain loop) on the product: values and
    gradients are unchanged to the bit, and autograd saves `tag` for backward, so its storage
    (drawn per row: each call and shape) is part of what the forward keeps: activations can be
    measured, never computed from a closed form. The product is made here, before any code of the
    submission's runs, and only that plain tensor is handed over: the submission's objects never
    meet the tag (a `__mul__` or `__torch_function__` of an object its `blocks_fn` returns sees
    nothing), only a `saved_tensors_hooks` measurement does.

    Round 4 of the red team priced the tag alone (the one (d_model,) float32 tensor saved that is
    no parameter) and TinyGPT's closed form for the rest. So the model's own activations are drawn
    too: every block's input and the blocks' output (each saved by a LayerNorm) are copied into a
    storage longer by a drawn number of elements (`pads`: one per block, one before the head;
    `_pad_input`), so the honest bytes differ from the closed form in every saved block input:
    only summing the storages autograd saved gives them. Those pads are open to a module hook
    (red team 25 read them off the blocks' inputs); the MLP's GELU input is padded too, out of every
    module hook's reach (`_PaddedFC`)."""
    inner = inner or _plain_blocks

    def blocks_fn(blocks, x):
        outer, _PADS[0] = _PADS[0], pads
        try:
            h = inner(blocks, x * tag)
        finally:
            _PADS[0] = outer
        return _padded(h, pads[0][-1]) if isinstance(h, torch.Tensor) else h

    return blocks_fn


class Watched(object):
    """Observer of the grader's TinyGPT during ONE call of the submission (a ledger call, or the
    whole sweep). It knows the cases it handed over in that call (`bind`: each case's model and
    the grader's own copy of its batch). Before each forward's own `step` event it sends
    `shape {batch, seq_len, case}` (so Rust knows at which shape each whole step, `step` +
    `step_done`, was taken: the `ledger` check's `steps:`; `case` is false unless the forward ran
    on a case of this call with that case's own inputs: another case's model, a model of its own
    making or tokens of its own are no step of that row), runs the blocks through `_tagged` with
    the tag of this call and the forward's shape, and keeps the first forward's (logits, loss)."""

    def __init__(self, ctx, base, setup, call):
        self.ctx = ctx
        self.base = base
        self.setup = setup
        self.call = call
        self.cases = weakref.WeakKeyDictionary()  # model -> the grader's copy of its batch
        self.first = None
        self.params_at = {}  # id of a `shape` event in the trace -> its model's parameters' data_ptrs

    def __getattr__(self, name):  # the rest of the observer's interface is the base's
        return getattr(self.base, name)

    def bind(self, model, batch):
        self.cases[model] = batch

    def foreign_layer(self):
        """A layer of a course model the grader did not hand over ran (a plain `course.TinyGPT`
        of the submission's own, whose forward is no `ObservedTinyGPT`'s): a forward of another
        model, as a copy's is (red team 44: a whole warm-up step on one, unseen)."""
        self.ctx.event("shape", batch=-1, seq_len=-1, case=False, foreign=True)

    def on_case(self, model, idx, targets):
        """Whether this forward is a step of the case `model` was handed over in: its inputs are
        the grader's tokens of that case (the targets those too, or none: the loss computed
        outside)."""
        try:
            ref = self.cases.get(model)
        except TypeError:
            return False
        if ref is None:
            return False
        label = self.ctx.lib.label
        return label(idx, ref["idx"]) == "batch" and label(targets, ref["targets"]) in ("batch", "none")

    def forward(self, model, idx, targets, blocks_fn):
        ctx = self.ctx
        try:
            b, t = (int(n) for n in idx.shape)
        except (AttributeError, TypeError, ValueError):
            b, t = -1, -1  # not a (B, T) tensor: the forward fails on its own
        ptrs = frozenset(st.data_ptr() for st in ctx.lib.param_storages(model))
        on_case = bool(self.on_case(model, idx, targets))
        ctx.event("shape", batch=b, seq_len=t, case=on_case)
        if ctx.trace:  # which parameters this forward's saves leave out (`Lesson.watched_call`)
            self.params_at[id(ctx.trace[-1])] = ptrs
        tag = self.setup.tag(self.call, b, t)
        _drop_next(model, self.setup.dropped(self.call, b, t), self.base)
        out = self.base.forward(model, idx, targets, _tagged(tag, self.setup.pads(self.call, b, t), blocks_fn))
        if self.first is None and on_case:  # the case's own step, not a copy's (red team 27)
            self.first = out
        return out  # model(idx) without targets: the observer takes the logits for the loss


def _state_bytes(optimizer):
    """The bytes of the distinct storages of the tensors in `optimizer.state`, read by the grader:
    what the state really holds (Σ numel × element_size for the optimizer's own contiguous
    tensors; a zero-stride `expand` of one element put there by hand holds 4 B, not its shape's
    worth: red team 6)."""
    seen = {}
    for st in list(optimizer.state.values()):
        for v in list(st.values()) if isinstance(st, dict) else ():
            if isinstance(v, torch.Tensor):
                try:
                    storage = v.untyped_storage()
                    seen[storage.data_ptr()] = storage.nbytes()
                except (RuntimeError, NotImplementedError, TypeError):
                    seen[("tensor", id(v))] = v.numel() * v.element_size()
    return sum(seen.values())


def _holding(held, still, optimizer, args, kwargs):
    """Step pre-hook the grader registers on every optimizer of a drawn row (`Setup.held`), run last:
    the drawn parameter's gradient is set aside for the step, so the optimizer makes no state for
    it and leaves it as it is; and another drawn parameter's (`Setup.still`) is swapped for
    zeros, so the optimizer makes its state as for any other and moves it by exactly nothing
    (Adam's and SGD's update of a zero gradient is 0). Both are put back by `_stepped` as the step
    returns. Which parameters is decided here, inside the step: the gradients and `param_groups`
    before it (and after it) do not tell (red team 6: state worked out from them before
    `step()`), nor do the weights the step moved (red team 20: state priced for every parameter
    that changed); only the state read after the step does. The held parameter is written in
    place by one (exact) `mul_(1)`, so the parameters the step wrote are not those with state
    either (red team 21: the optimizer's in-place writes seen through the version counters of a
    graph of the submission's own, state priced for each parameter written)."""
    kept = []
    p = held()
    if p is not None and p.grad is not None:
        kept.append((p, p.grad))
        p.grad = None
        with _no_grad():
            p.mul_(1.0)
    q = still()
    if q is not None and q.grad is not None:
        kept.append((q, q.grad))
        q.grad = _zeros_like(q.grad)
    if kept:
        _HELD[id(optimizer)] = kept


_HELD = {}
_HOLDS = {}  # id(optimizer) -> the id of its `_holding` pre-hook (`Setup.hold`)


def _hold_last(optimizer, args, kwargs):
    """Global step pre-hook (torch runs the global ones before an optimizer's own): the row's
    `_holding` moves to the end of the optimizer's own pre-hooks, so it runs after every pre-hook
    of the submission's, which therefore cannot see which gradient the step sets aside (red team
    7: a pre-hook registered after the grader's saw the held gradient gone and priced the state
    from the gradients left)."""
    hid = _HOLDS.get(id(optimizer))
    hooks = optimizer._optimizer_step_pre_hooks
    if hid is not None and hid in hooks:
        hooks.move_to_end(hid)


_register_optimizer_step_pre_hook(_hold_last)


def _stepped(ctx, call, b, t, tagged, optimizer, args, kwargs):
    """Step post-hook the grader registers on every optimizer it hands over, before the
    submission gets it (so it runs first, right as `optimizer.step()` returns): sends
    `opt_step {call, batch, seq_len, state}` in the probe's event trace, `call` and the shape
    those of the case the optimizer was made for, `state` the bytes of the optimizer's state the
    grader read there itself (`_state_bytes`). Rust's `whole_steps` counts a row's step as whole
    only with an `opt_step` of that row's case after its backward in the same call, and holds the
    row's `optimizer_state` to that reading: a sweep that never steps, or state priced from the
    gradients (the parameter left out of the optimizer, `Setup.left_out`, makes that wrong), is
    no measurement."""
    _tag_state(optimizer, tagged)
    state = int(_state_bytes(optimizer))
    _put_back(optimizer, args, kwargs)  # the drawn parameter's gradient back, as before the step
    ctx.event("opt_step", call=call, batch=int(b), seq_len=int(t), state=state)


def _tag_params(lib, model, n):
    """The grader's own parameter in a case's model: `head.grader_tag`, `n` float32 zeros (drawn
    per row: `Setup.param_tag`), registered last, used by no forward (so it gets no gradient and no
    optimizer state). "Σ over `model.parameters()`" counts it; the parameters' bytes worked out
    from the model's config, or kept from another call, do not (red team 27: params priced from
    `model.cfg` once and served from a cache to every later call)."""
    p = torch.nn.Parameter(torch.zeros(n, device=next(model.parameters()).device))
    # on the last module, so it is the last of `model.parameters()` (the draws index the others)
    model.head.register_parameter("grader_tag", p)
    lib.untrained(p)  # no step needs it to get a gradient
    return model


def _tag_state(optimizer, tagged):
    """The grader's tag in the optimizer's state: `tagged` is (a weak reference to the parameter,
    a number of float32 elements), both drawn per row (`Setup.state_tag`); once the step has made
    that parameter's state, a tensor of that many ones joins it (`grader_tag`), on the parameter's
    device. The optimizer's own keys are left as they are (Adam and SGD read only theirs), and
    "Σ over every tensor in `optimizer.state`" counts it: state priced per key of
    `optimizer.state` from the optimizer's formula (red team 25), or written before the step, does
    not."""
    if tagged is None:
        return
    p = tagged[0]()
    st = optimizer.state.get(p) if p is not None else None
    if isinstance(st, dict) and st and "grader_tag" not in st:
        st["grader_tag"] = torch.ones(tagged[1], device=p.device)


def _put_back(optimizer, args, kwargs):
    """Step post-hook: the held and the still parameter's gradients back (`_holding`), as they were
    before the step (the grader's own ledger's; `_stepped` calls it first for the submission's
    cases)."""
    for p, g in _HELD.pop(id(optimizer), ()):
        p.grad = g


def _lm_batch(idx, targets):
    """A batch as language-model inputs usually are: `idx` a view of a (B, T+1) token tensor (its
    first T columns; here the extra column is the targets' last), `targets` contiguous. The view's
    storage is larger than the view, so a ledger that sizes what autograd saved by its views
    (`t.numel() * t.element_size()`, keyed by `t.data_ptr()`) instead of its storages
    (`t.untyped_storage().nbytes()`) misses the extra column; values are the grader's own."""
    tokens = torch.cat([idx, targets[:, -1:]], dim=1)
    return {"idx": tokens[:, : idx.shape[1]], "targets": targets}


def _clone_batch(batch):
    """A copy of a `_lm_batch` batch, `idx` still a view of its own (B, T+1) storage."""
    idx, targets = batch["idx"], batch["targets"]
    return _lm_batch(idx.clone(), targets.clone())


class Setup:
    """What both sides use: the drawn model, the grader's weights and batch, the sweep's grid."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.device = torch.device(ctx.device)
        inputs = ctx.inputs()
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.batch = _lm_batch(inputs["batch/idx"].to(self.device), inputs["batch/targets"].to(self.device))
        m = ctx.model_cfg  # drawn from the seed in Rust (exercise.yaml model_draw)
        self.cfg = Config(
            vocab=m["vocab"], seq_len=m["seq_len"], d_model=m["d_model"], n_heads=m["n_heads"],
            n_blocks=m["n_blocks"], dropout=0.0,
        )
        g = ctx.params["sweep"]
        draw = random.Random(ctx.seed)  # the grid changes with the seed, as does the model's shape
        self.sweep_grid = {
            "batches": sorted(draw.sample([int(b) for b in g["batch_from"]], int(g["batches"]))),
            "seq_lens": sorted(draw.sample([int(t) for t in g["seq_len_from"]], int(g["seq_lens"]))),
        }
        # the sweep's optimizer is picked per run from the seed; the single ledgers use both
        self.sweep_optimizer = OPTIMIZERS[ctx.seed % 2]
        # the parameters' sizes, in `model.parameters()` order: a throwaway model (a few hundred
        # KiB) that leaves the seeded RNG as it found it (not the meta device: its initialisers
        # run torch's reference ops, which import sympy and dynamo, 0.8 s of the grading)
        with torch.random.fork_rng(devices=[]):
            self.param_numels = [p.numel() for p in TinyGPT(self.cfg).parameters()]
        # drawn per grading, per row, out of the submission's reach (issue 38: a number is
        # believed only when the grader saw the work that made it, in the same call):
        # - each row's tag: the storage (float32 elements beyond d_model) of the tensor of the
        #   grader's that every forward saves for backward (`_tagged`), drawn for each call and
        #   each shape a forward runs at in it (every ledger call and every grid point of the
        #   sweep: distinct), so the honest activations differ from TinyGPT's closed form by an
        #   amount only a measurement of that row's forward sees (one row's measurement prices
        #   no other);
        # - the repeated Adam ledger's case: another batch size and sequence length than the
        #   first (≤ it, so it costs less), with tokens of its own, so a cached number is wrong.
        shapes = random.Random(ctx.seed * 7_919 + 38)  # the shape: the seed's (the case shows it)
        tags = random.Random(f"{_SECRET}/tags")  # the sizes: the process's secret
        b0, t0 = (int(n) for n in self.batch["idx"].shape)
        self.again_shape = (
            shapes.choice([b for b in (1, 2, 3) if b != b0]),
            shapes.choice([t for t in (16, 24, 32, 40, 48, 56) if t != t0]),
        )
        rows = [("ledger.adam", b0, t0), ("ledger.sgd", b0, t0), ("ledger.adam_again", *self.again_shape)]
        rows += [("sweep.student", b, t) for b, t in self.grid()]
        self.tag_extra = dict(zip(rows, tags.sample(range(1, 1 << 10), len(rows))))

    def _extra(self, call, b, t):
        """The drawn number of extra elements of the tag of call `call`'s forwards at (b, t)
        (a shape no row has, too: drawn from the seed, the call and the shape)."""
        key = (call, int(b), int(t))
        if key not in self.tag_extra:
            self.tag_extra[key] = random.Random(f"{_SECRET}/{call}/{b}/{t}").randrange(1, 1 << 10)
        return self.tag_extra[key]

    def dropped(self, call, b, t):
        """The index (in `model.parameters()` order) of the parameter that gets no gradient in
        call `call`'s steps at (b, t): drawn per row for the repeated ledger and the sweep (the
        first Adam and SGD ledgers are the libtorch reference's steps: every parameter trained)."""
        if call not in ("ledger.adam_again", "sweep.student"):
            return None
        return random.Random(f"{_SECRET}/{call}/{int(b)}/{int(t)}/drop").randrange(len(self.param_numels))

    def left_out(self, call, b, t):
        """The index of the parameter left out of the optimizer of call `call`'s case at (b, t):
        drawn per row, like `dropped` and never the same one, for the repeated ledger and the
        sweep. It has a gradient but no optimizer state (and the step leaves it as it is), so
        the optimizer's state is not a closed form of the gradients either (red team 5: Adam's
        `2 × grads + 4 B per parameter with one`, SGD's `= grads`): only reading
        `optimizer.state` after the step gives it."""
        k = self.dropped(call, b, t)
        if k is None:
            return None
        others = [i for i in range(len(self.param_numels)) if i != k]
        return random.Random(f"{_SECRET}/{call}/{int(b)}/{int(t)}/left_out").choice(others)

    def held(self, call, b, t):
        """The index of the parameter whose gradient the grader sets aside during the step of
        call `call`'s case at (b, t) (`_holding`): drawn per row, never the dropped or the
        left-out one, so it has a gradient before and after the step and no optimizer state."""
        k, out = self.dropped(call, b, t), self.left_out(call, b, t)
        if k is None:
            return None
        others = [i for i in range(len(self.param_numels)) if i not in (k, out)]
        return random.Random(f"{_SECRET}/{call}/{int(b)}/{int(t)}/held").choice(others)

    def still(self, call, b, t):
        """The index of the parameter whose gradient is zeros during the step of call `call`'s
        case at (b, t) (`_holding`): drawn per row, never the dropped, the left-out or the held
        one, so it has a gradient and optimizer state, and the step leaves it as it is."""
        k, out = self.dropped(call, b, t), self.left_out(call, b, t)
        if k is None:
            return None
        held = self.held(call, b, t)
        others = [i for i in range(len(self.param_numels)) if i not in (k, out, held)]
        return random.Random(f"{_SECRET}/{call}/{int(b)}/{int(t)}/still").choice(others)

    def param_tag(self, call, b, t):
        """The float32 elements of the grader's own parameter in call `call`'s case at (b, t)
        (`_tag_params`): drawn per row, from the process's secret."""
        return random.Random(f"{_SECRET}/{call}/{int(b)}/{int(t)}/param_tag").randrange(1, 1 << 10)

    def state_tag(self, call, b, t):
        """(the index of the parameter whose optimizer state gets the grader's tag, the tag's
        float32 elements) of call `call`'s case at (b, t) (`_tag_state`): drawn per row, every
        ledger's too, from the parameters the step gives state (never the dropped, the left-out or
        the held one)."""
        skip = (self.dropped(call, b, t), self.left_out(call, b, t), self.held(call, b, t))
        draw = random.Random(f"{_SECRET}/{call}/{int(b)}/{int(t)}/state_tag")
        k = draw.choice([i for i in range(len(self.param_numels)) if i not in skip])
        return k, draw.randrange(1, 1 << 10)

    def dropped_bytes(self, call, b, t, optimizer):
        """(grad bytes, optimizer-state bytes) that row's draws take off the parameters' bytes: the
        dropped parameter has neither, the one left out of the optimizer and the one held during
        the step have no state; the grader's tag in the state (`state_tag`) adds its bytes (so
        the state's part is negative where nothing is taken off)."""
        tag = 4 * self.state_tag(call, b, t)[1]
        k, out, held = self.dropped(call, b, t), self.left_out(call, b, t), self.held(call, b, t)
        if k is None:
            return 0, -tag

        def state(i):
            n = 4 * self.param_numels[i]
            return 2 * n + 4 if optimizer == "adam" else n

        return 4 * self.param_numels[k], state(k) + state(out) + state(held) - tag

    def hold(self, opt, model, call, b, t):
        """Registers `_holding` for the row's held and still parameters on `opt`, an optimizer
        over `model`; `_hold_last` runs it after every pre-hook of the submission's."""
        k = self.held(call, b, t)
        if k is None:
            return
        params = list(model.parameters())
        held, still = weakref.ref(params[k]), weakref.ref(params[self.still(call, b, t)])
        _HOLDS[id(opt)] = opt.register_step_pre_hook(functools.partial(_holding, held, still)).id

    def pads(self, call, b, t):
        """The drawn extra elements of the storages call `call`'s forwards at (b, t) copy into
        (`_tagged`): (each block's input and the blocks' output: one per block and one more;
        each block's MLP projection whose output GELU saves, `_PaddedFC`: one per block)."""
        draw = random.Random(f"{_SECRET}/{call}/{int(b)}/{int(t)}/pads")
        n = self.cfg.n_blocks
        return ([draw.randrange(1, 1 << 10) for _ in range(n + 1)],
                [draw.randrange(1, 1 << 10) for _ in range(n)])

    def tag(self, call, b, t):
        """A fresh tag for the forwards of call `call` at shape (b, t): a (d_model,) view of ones
        whose storage holds the drawn number of extra elements; its storage's bytes are added to
        the grader's row (`tag`)."""
        d = self.cfg.d_model
        return torch.ones(d + self._extra(call, b, t), device=self.device)[:d]

    def tag_bytes(self, call, b, t):
        """The bytes the grader's draws add to (b, t)'s honest activations: the tag's storage and
        the pads (float32 elements) beyond what each padded tensor itself needs."""
        return 4 * (self.cfg.d_model + self._extra(call, b, t) + sum(map(sum, self.pads(call, b, t))))

    def again_batch(self):
        """The repeated Adam ledger's batch: drawn from the seed, shaped `again_shape`."""
        b, t = self.again_shape
        gen = torch.Generator().manual_seed((self.ctx.seed * 2_000_003 + 38) % (1 << 62))
        v = self.cfg.vocab
        idx = torch.randint(0, v, (b, t), generator=gen)
        targets = torch.randint(0, v, (b, t), generator=gen)
        return _lm_batch(idx.to(self.device), targets.to(self.device))

    def optimizer(self, name, model, left_out=None):
        """A fresh optimizer over `model`'s parameters, but the one at index `left_out`."""
        p = self.ctx.params
        params = [q for i, q in enumerate(model.parameters()) if i != left_out]
        if name == "adam":
            return _Adam(params, lr=float(p["lr"]))
        return _SGD(params, lr=float(p["lr"]), momentum=float(p["momentum"]))

    def sweep_batch(self, b, t):
        """The batch of grid point (b, t): a function of the seed and the point only, so the grader
        (before the submission is imported) and the submission's sweep get the same tokens."""
        gen = torch.Generator().manual_seed((self.ctx.seed * 1_000_003 + b * 1009 + t) % (1 << 62))
        v = self.cfg.vocab
        idx = torch.randint(0, v, (b, t), generator=gen)
        targets = torch.randint(0, v, (b, t), generator=gen)
        return _lm_batch(idx.to(self.device), targets.to(self.device))

    def grid(self):
        return [(int(b), int(t)) for b in self.sweep_grid["batches"] for t in self.sweep_grid["seq_lens"]]


# -- the grader's own ledger (out of the submission's reach) ----------------------------------------
def _materialized(x, depth=0):
    """What a call of the submission returned, read now, inside the call's watch (issue 38: no
    call of a submission's function runs unobserved): a list or dict of its own class is read
    through its own methods here and kept as a plain one, so work its `__iter__`/`__getitem__`
    would do when the grader reads the rows later (red team 10: a sweep whose steps ran as the
    grader iterated the list it returned) is done in the call, or not at all."""
    if depth > 4:
        return x
    if isinstance(x, dict):
        return {k: _materialized(x[k], depth + 1) for k in list(x)}
    if isinstance(x, list):
        return [_materialized(v, depth + 1) for v in x]
    return x


def _grader_ledger(setup, name, batch, call):
    """Activations (and on CUDA the peak) of one training step of a fresh plain TinyGPT whose
    forward saves call `call`'s tag, as the submission's observed model does in that call."""
    model = TinyGPT(setup.cfg)
    model.load_state_dict(setup.weights, strict=True)
    model = _drop_hooks(_pad_blocks(model.to(setup.device).train()))
    b, t = (int(n) for n in batch["idx"].shape)
    _tag_params(setup.ctx.lib, model, setup.param_tag(call, b, t))
    opt = setup.optimizer(name, model, setup.left_out(call, b, t))
    setup.hold(opt, model, call, b, t)
    opt.register_step_post_hook(_put_back)
    cuda = setup.device.type == "cuda"
    blocks_fn = _tagged(setup.tag(call, b, t), setup.pads(call, b, t))
    if cuda:
        gc.collect()
        _synchronize()
        _reset_peak()
    _drop_next(model, setup.dropped(call, b, t))
    (_, loss), activations = setup.ctx.lib.saved_bytes(
        model, lambda: model(batch["idx"], batch["targets"], blocks_fn=blocks_fn))
    loss.backward()
    opt.step()
    peak = None
    if cuda:
        _synchronize()
        peak = _max_allocated()
    return {"e": "ledger", "batch": b, "seq_len": t, "optimizer": name,
            "activations": int(activations), "tag": setup.tag_bytes(call, b, t), "peak": peak,
            # the grader's own parameter in the model (`_tag_params`): its bytes join the params'
            "params_extra": 4 * setup.param_tag(call, b, t),
            # what the row's parameter without a gradient takes off the grads and optimizer state
            # the grader computes from the model's shape (Rust, `ledger.rs`)
            **dict(zip(("dropped_grad", "dropped_state"), setup.dropped_bytes(call, b, t, name)))}


def before_submission(ctx):
    """The grader probe, run by the driver BEFORE the submission is imported: every row the
    submission's ledgers are compared with. Each record leaves at once; the copies the driver keeps
    for a scenario's own reading are dropped, and nothing else outlives this call."""
    setup = Setup(ctx)

    def send(name, rows):
        ctx.traces[name] = rows
        dict.pop(ctx.traces, name, None)

    def metric(key, value):
        ctx.metric(key, value)
        ctx.metrics.pop(key, None)

    with ctx.probe("grader"):
        if setup.device.type == "cuda":  # warm-up: allocator, cuBLAS workspaces
            _grader_ledger(setup, "adam", setup.batch, "ledger.adam")
        for label, name, batch in (
            ("adam", "adam", setup.batch),
            ("sgd", "sgd_momentum", setup.batch),
            ("adam_again", "adam", setup.again_batch()),  # the repeated Adam ledger's own case
        ):
            row = _grader_ledger(setup, name, batch, f"ledger.{label}")
            send(f"grader.{label}", [row])
            metric(f"grader.{label}.activations", row["activations"])
            if row["peak"] is not None:
                metric(f"grader.{label}.peak", row["peak"])
        send("sweep.grader", [
            _grader_ledger(setup, setup.sweep_optimizer, setup.sweep_batch(b, t), "sweep.student")
            for b, t in setup.grid()
        ])
        ctx.metric("sweep.grid", f"batches {setup.sweep_grid['batches']} × seq_lens {setup.sweep_grid['seq_lens']}")


# -- the submission's side ----------------------------------------------------------------------------
class Lesson:
    def __init__(self, ctx):
        self.ctx = ctx
        self.setup = Setup(ctx)
        self.device = self.setup.device
        self.batch = self.setup.batch

    def need(self, name):
        fn = getattr(self.ctx.sub, name, None)
        if not callable(fn):
            raise ProbeFailed(f"exercise.py defines no function `{name}` (see the contract in README.md)")
        return fn

    def case(self, name, batch=None, observer=None):
        """A fresh case on `batch` (the grader's batch when None): the submission gets a copy of
        the batch; `observer` (a `Watched`) keeps the grader's own, to tell the case's steps."""
        lib = self.ctx.lib
        obs = observer or lib.StepObserver(self.ctx, self.batch)
        model = _drop_hooks(_pad_blocks(
            lib.observed_model(self.ctx, self.setup.cfg, self.setup.weights, self.device, obs)))
        if batch is None:
            batch = self.batch
        b, t = (int(n) for n in batch["idx"].shape)
        call = obs.call if isinstance(obs, Watched) else None
        _tag_params(self.ctx.lib, model, self.setup.param_tag(call, b, t))
        opt = self.setup.optimizer(name, model, self.setup.left_out(call, b, t))
        # every step of the handed-over optimizer is seen where it happens (red team 5): a row's
        # step is whole only with its optimizer's step after the loss's backward (`whole_steps`)
        self.setup.hold(opt, model, call, b, t)
        k, n = self.setup.state_tag(call, b, t)
        tagged = (weakref.ref(list(model.parameters())[k]), n)
        opt.register_step_post_hook(functools.partial(_stepped, self.ctx, call, b, t, tagged))
        if isinstance(obs, Watched):
            obs.bind(model, batch)
        return {"model": model, "optimizer": opt, "batch": _clone_batch(batch), "device": self.device}

    def make_case(self, batch, seq_len):
        """make_case(batch, seq_len) as the submission's sweep() gets it."""
        number = self.ctx.lib.number
        try:
            b = number(batch, integral=True, what="make_case's batch")
            t = number(seq_len, integral=True, what="make_case's seq_len")
        except TypeError as e:
            raise ProbeFailed(f"{e}; expected an int in the sweep's grid") from None
        for name, v, hi in (("batch", b, None), ("seq_len", t, self.setup.cfg.seq_len)):
            if v < 1 or (hi is not None and v > hi):
                raise ProbeFailed(f"make_case got {name}={v!r}; expected an int in the sweep's grid")
        return self.case(self.setup.sweep_optimizer, batch=self.setup.sweep_batch(b, t),
                         observer=self.sweep_seen)

    def watched_call(self, watched, fn, *args, **kwargs):
        """One call of the submission's, with its saved-tensors hooks observed (`ctx.observe_saves`);
        after it, per shape, the bytes its hooks were handed in each whole forward at that shape
        on a case of the call (`lib.hooked_forwards`) go to the probe's trace as `hooked {batch,
        seq_len, bytes}`: a row's activations are believed only as one of them (Rust, `ledger`
        with `steps:`; red team 6)."""
        ctx = self.ctx
        start = len(ctx.trace)
        ctx.observe_saves = True
        try:
            return _materialized(fn(*args, **kwargs))
        finally:
            ctx.observe_saves = False
            seen = {}
            params = lambda shape: watched.params_at.get(id(shape), frozenset())  # noqa: E731
            for fwd, nbytes in ctx.lib.hooked_forwards(list(ctx.trace[start:]), params, sized=True):
                at = fwd.get("shape") or {}
                # a whole forward with autograd recording its layers (`recorded`: not blocks run
                # under `no_grad` beside a tensor of the wanted size, red team 9 in lesson 04)
                if nbytes is not None and fwd["grad"] and fwd.get("whole") and fwd.get("recorded") and at.get("case"):
                    seen.setdefault((at.get("batch"), at.get("seq_len")), set()).add(int(nbytes))
            for (b, t), sizes in sorted(seen.items()):
                ctx.event("hooked", batch=b, seq_len=t, bytes=sorted(sizes))

    def quiesce(self):
        """On CUDA, free the previous case before the next peak is measured (CPU has no peak)."""
        if self.device.type == "cuda":
            gc.collect()
            _synchronize()

    def row(self, batch, optimizer, entries):
        b, t = batch["idx"].shape
        return {"e": "ledger", "batch": int(b), "seq_len": int(t), "optimizer": optimizer, **entries}

    # -- checking what the submission returned ---------------------------------------------------
    def entries(self, got, what):
        """The entries of one returned ledger, each on its own: an entry that is missing or not a
        number becomes `<entry>_error` (only the criteria that compare that entry fail)."""
        got = self.ctx.lib.plain(got, what, ProbeFailed)
        if not isinstance(got, dict):
            raise ProbeFailed(f"{what} returned {type(got).__name__}; expected a dict with keys "
                              + ", ".join(ENTRIES + ("peak",)))
        number = self.ctx.lib.number
        out = {}
        for key in ENTRIES + ("peak",):
            if key not in got:
                out[f"{key}_error"] = f"{what} has no key '{key}' (got keys {sorted(map(str, got))})"
                continue
            v = got[key]
            if key == "peak" and v is None:
                out[key] = None
                continue
            try:
                out[key] = number(v, integral=True, what=f"{what}['{key}']")
            except TypeError as e:
                out[f"{key}_error"] = f"{e}; expected a whole number of bytes" + (
                    " (or None on CPU)" if key == "peak" else "")
        return out

    def record(self, name, row):
        for key in ENTRIES + ("peak",):
            if row.get(key) is not None:
                self.ctx.metric(f"{name}.{key}", row[key])
        if "peak_error" in row:
            reported = "not a number"
        else:
            reported = "none" if row.get("peak") is None else "bytes"
        self.ctx.metric(f"{name}.peak_reported", reported)

    # -- probes ---------------------------------------------------------------------------------
    def ledger(self, opt, run):
        ctx = self.ctx
        memory_ledger = self.need("memory_ledger")
        name = "adam" if opt == "adam" else "sgd_momentum"
        label = opt if run == 1 else f"{opt}_again"
        call = f"ledger.{label}"
        # the repeated call gets a case of its own (another shape, drawn from the seed)
        ref = self.setup.again_batch() if run > 1 else self.batch  # the grader's own copy
        watched = Watched(ctx, self.steps, self.setup, call)
        case = self.case(name, batch=ref, observer=watched)
        model, optimizer, batch = case["model"], case["optimizer"], case["batch"]
        grads, passes = {}, {}

        def caught(g, n):
            # every backward pass that reaches a parameter; the first gradient is the step's
            passes[n] = passes.get(n, 0) + 1
            grads.setdefault(n, g.detach().to("cpu", copy=True))

        for pname, p in model.named_parameters():
            p.register_hook(lambda g, n=pname: caught(g, n))
        self.quiesce()
        ctx.event("call", call=call)  # opens this call's steps in the probe's trace
        got = self.watched_call(watched, memory_ledger, model, optimizer, batch, device=case["device"])
        # what the grader saw of the step, before anything returned is read
        ctx.metric(f"ledger.{label}.backwards", max(passes.values(), default=0))
        if name == "adam":
            steps = [int(st["step"]) for st in optimizer.state.values() if "step" in st]
            ctx.metric(f"ledger.{label}.adam_step", max(steps, default=0))
        # the step's forward, gradients and update, held to libtorch's (the first calls'; the
        # repeated call's step is judged by what the grader saw of it: a whole step at its shape)
        if run == 1 and watched.first is not None:
            logits, loss = watched.first
            ctx.save_tensor(f"ledger/{label}/logits", logits)
            if loss is None:  # model(idx) and the loss computed outside: the same cross-entropy
                targets = ref["targets"]
                loss = F.cross_entropy(logits.detach().reshape(-1, logits.shape[-1]), targets.reshape(-1))
            ctx.save_tensor(f"ledger/{label}/loss", loss)
        for pname, g in grads.items() if run == 1 else ():
            ctx.save_tensor(f"ledger/{label}/grad/{pname}", g)
        for pname, p in model.named_parameters() if run == 1 else ():  # one optimizer step?
            if pname.endswith("grader_tag"):  # the grader's own, used by no forward: no reference's
                continue
            w0 = self.setup.weights[pname].to(torch.float64)
            ctx.save_tensor(f"ledger/{label}/update/{pname}", p.detach().to("cpu", torch.float64) - w0)
        row = self.row(ref, name, self.entries(got, "memory_ledger(...)"))
        self.record(call, row)
        ctx.traces[call] = [row]
        del case, model, optimizer, watched
        self.quiesce()

    def ledgers(self):
        # one observer of steps for the probe: step ids are unique across its three calls
        self.steps = self.ctx.lib.StepObserver(self.ctx, self.batch)
        self.ledger("adam", 1)
        self.ledger("sgd", 1)
        self.ledger("adam", 2)

    def sweep(self):
        sweep = self.need("sweep")
        grid = self.setup.sweep_grid
        # every case of the sweep is watched by one observer (one call; a tag per grid point); Rust
        # holds each returned row to a whole step the grader saw at its shape, on that point's
        # case (the model make_case returned, with its batch), in this call (`steps:`)
        self.sweep_seen = Watched(self.ctx, self.ctx.lib.StepObserver(self.ctx, self.batch),
                                  self.setup, "sweep.student")
        self.ctx.event("call", call="sweep.student")
        got = self.watched_call(self.sweep_seen, sweep, self.make_case, batches=list(grid["batches"]),
                                seq_lens=list(grid["seq_lens"]))
        got = self.ctx.lib.plain(got, "sweep(...)'s result", ProbeFailed)
        if not isinstance(got, (list, tuple)):
            raise ProbeFailed(f"sweep(...) returned {type(got).__name__}; expected a list of dicts")
        number = self.ctx.lib.number
        rows = []
        for i, r in enumerate(got):
            entries = self.entries(r, f"sweep(...)[{i}]")
            try:
                b = number(r.get("batch"), integral=True, what=f"sweep(...)[{i}]['batch']")
                t = number(r.get("seq_len"), integral=True, what=f"sweep(...)[{i}]['seq_len']")
            except TypeError as e:
                raise ProbeFailed(f"{e}: every row needs whole-number 'batch' and 'seq_len' keys") from None
            rows.append({"e": "ledger", "batch": b, "seq_len": t, "optimizer": self.setup.sweep_optimizer,
                         **entries})
        self.ctx.traces["sweep.student"] = rows

    def growth(self):
        growth = self.ctx.lib.plain(getattr(self.ctx.sub, "GROWTH", None), "GROWTH", ProbeFailed)
        if not isinstance(growth, dict):
            raise ProbeFailed(f"GROWTH is {type(growth).__name__}; expected a dict "
                              "{'batch': ..., 'seq_len': ...}")
        for axis in ("batch", "seq_len"):
            v = growth.get(axis)
            self.ctx.metric(f"growth.{axis}", v if isinstance(v, str) else repr(v))


def run(ctx):
    lesson = Lesson(ctx)
    probes = (("ledger", lesson.ledgers), ("sweep", lesson.sweep), ("growth", lesson.growth))
    for name, method in probes:
        with ctx.probe(name):  # probe names = the first segment of what they record
            # the probe's events (empty_cache calls, the grader's step events) leave as they
            # happen: no_empty_cache counts them there, not in a counter the submission can reset
            ctx.trace = trace = []
            try:
                method()
            finally:
                ctx.traces[f"{name}.calls"] = trace
    ctx.metric("calls.empty_cache", ctx.tally("empty_cache"))  # the driver's counter (shown only)
