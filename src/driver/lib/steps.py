"""The observed model: a training step is what ran (`StepObserver`, `ObservedTinyGPT`,
`observed_model`): whole sequences of the batch through every layer, the loss's backward through
every block, checkpoint regions and recomputes — lessons 01, 03, 04."""
import os as _os
import sys as _sys
import weakref as _weakref

import torch
import torch.utils.checkpoint as _cp_mod
from course.model import TinyGPT, _plain_blocks
from .integrity import _profiling, _top_saved_hooks
_equal = torch.equal  # captured before any submission code runs


def label(t, reference, sized=False):
    """`batch` when `t` equals the grader's tensor, `none` for None, else `other`; with `sized`
    (the batch handed over is the step's only input: lesson 04), `shape` for a tensor of another
    shape (a slice of the batch: less work than the step's, so no timed window holds it)."""
    if t is None:
        return "none"
    if not isinstance(t, torch.Tensor):
        return "other"
    if t.shape != reference.shape:
        return "shape" if sized else "other"
    if t.device == reference.device and _equal(t, reference):
        return "batch"
    return "other"


# Parameters a lesson adds to a model for itself that no forward uses (lesson 03's `grader_tag`,
# counted in the parameters' bytes): no backward gives them a gradient, and none has to. By id
# (a tensor's `==` is elementwise), each forgotten when its parameter is freed.
UNTRAINED = set()


def untrained(p):
    """`p` joins `UNTRAINED`; returns it."""
    UNTRAINED.add(id(p))
    _weakref.finalize(p, UNTRAINED.discard, id(p))
    return p


class StepObserver:
    """Turns forwards of `ObservedTinyGPT` into step events (see the module docstring).

    What a step is, observed where it happens (issue 38). A forward records how many of the
    blocks' layers (`attn`, `mlp`) ran in it and how many of those ran inside a `checkpoint()`
    call (`layers`, `wrapped`: forward pre-hooks on the grader's modules). `step_done` is sent at
    the end of a backward (a callback queued on autograd's engine) that

    - began at the loss the model returned (a hook on it; without targets, on the logits: the
      contract lets the loss be computed outside) and reached the embedding's output in the same
      backward (the same graph task: two separate `autograd.grad` calls, one from the loss and one
      at the embedding, make no step);
    - ran every layer of the model in its forward on every position of the batch (at once or in
      micro-batches: one row run and broadcast back is no step), and went back through every one
      (hooks on each `attn` / `mlp` output, or on its recomputation inside a checkpoint): a
      blocks_fn that runs one layer, or whose output reaches the embedding around the blocks
      (`out.detach() + (x - x.detach())`), backpropagates no whole model;
    - began with a loss's gradient: at the model's loss a positive one; at the logits (no
      targets) a cross-entropy's, each position's row summing to 0 with one negative entry (its
      target's): `(logits * 0).sum()` or `logits.sum()` is no loss;
    - went back through every layer to its input: each layer's input (on every position of
      the batch) had its gradient computed in that backward, which needs the layer's own backward
      (a hook on the tensor the layer was handed; a layer handed a detached input, its output's
      gradient captured, goes back through nothing: red team 44);
    - computed in float32: no layer ran under autocast or on an input of another float type
      (red team 45);
    - had autograd accumulate a gradient into every parameter of the model (its
      AccumulateGrad ran in that backward: a hook the grader registers on each parameter), not a
      `.grad` the submission assigned: `loss.backward(inputs=[x])` with zeros put in `.grad` by a
      hook computes none (red team 44).

    Layers that run again during that backward are recomputations (`recomputed`); `variant(rec)`
    decides a step's variant from the forward's record, and again at the end of its backward with
    `recomputed` added (lesson 04: "on" when every layer ran inside a checkpoint and was
    recomputed). A backward that misses one of the three sends `step_undone` (what it missed) instead.

    `inside()`, when given, says whether a forward runs inside a call of the `step()` the grader
    handed over (lesson 01): a forward outside one is no step of the submission's measurement (it
    sends `outside_step`, not `step`), so a model dug out of `step()` and run on other inputs or
    other terms counts for nothing."""

    def __init__(self, ctx, batch, variant=None, inside=None, checkpoints=False, sized=False):
        self.ctx = ctx
        self.batch = batch
        self.sized = sized  # an input of another shape than the batch's is labelled `shape`
        self.variant = variant or (lambda rec: None)
        self.inside = inside
        # lesson 04: which checkpoint each layer ran in, where its saves went, and whether the
        # backward reran it on its forward's input (see `_checkpoint_regions`, `_fingerprint`)
        self.checkpoints = checkpoints
        self.next_id = 0
        self.current = None  # the forward running now: {"layers", "wrapped"} (see layer_ran)
        self.backward = None  # the step whose backward runs now (began at its loss)
        # ids of parameters whose gradient the lesson itself took away in the running backward
        # (lesson 03's drawn parameter without a gradient): they count as given a new one
        self.dropped = set()
        self.loss_tasks = []  # the graph tasks of the last backwards that began at a model's loss

    def in_loss_backward(self):
        """Is the backward running now one that began at a loss (or logits) an observed forward
        returned, whether the first backward of its step or not? (Lesson 03 takes its drawn
        parameter's gradient away only in those.)"""
        task = _graph_task_id()
        return task != -1 and task in self.loss_tasks

    def layer_begin(self, module, args):
        """A layer's forward begins (`_observed_layer_forward`, inside it: after every forward
        pre-hook on the module): what the run depends on where it starts — whether autograd
        records it, the checkpoint calls around it and where its saves go (lesson 04), its input's
        fingerprint. Nothing counts yet: a run is counted when the layer returns (`layer_end`)."""
        state = self.current
        if state is not None:
            grads = self.ctx.ckpt_grads
            token = {"state": state, "module": module, "args": args,
                     "recorded": torch.is_grad_enabled() or bool(grads and grads[0]),
                     "depth": self.ctx.ckpt_depth}
            if self.checkpoints:
                token["where"] = self._where(state, module, args)
                token["fp"] = _fingerprint(args)
            return token
        if self.backward is not None:  # a checkpoint recomputing a layer during the backward
            token = {"state": None, "backward": self.backward, "module": module, "args": args}
            if self.checkpoints:
                token["fp"] = _fingerprint(args)
            return token
        return None

    def layer_end(self, token, out):
        """The layer begun with `token` returned `out` (or, recomputing inside a non-reentrant
        checkpoint, was stopped by checkpoint's early stop once everything it saves was saved
        again: `out` None). Only now does the run count (red team 13: a layer called with a
        junk extra argument raised right after the grader's pre-hook and counted as run, wrapped
        and recomputed)."""
        if token is None:
            return
        if token["state"] is None:
            state = token["backward"]
            self._watch_input(state, token["module"], token["args"])  # a reentrant rerun's
            state["recomputed"] += 1
            if self.checkpoints:
                m = id(token["module"])
                state["reruns"][m] = state["reruns"].get(m, 0) + 1
                state["refp"].setdefault(m, []).append(token["fp"])
            self.layer_out(token["module"], out)  # its gradient arriving: that layer's backward
            return
        self.layer_ran(token, out)

    def layer_ran(self, token, out):
        state, module, args = token["state"], token["module"], token["args"]
        if state is not None:
            state["layers"] += 1
            # autograd recording the layer: on, or off inside a checkpoint called with it on (a
            # reentrant one's first forward); a layer run with it off in a forward begun with it
            # on records nothing of what that forward is believed to save (red team 9: blocks run
            # under no_grad, a tensor of the wanted size saved after the model returned)
            if not token["recorded"]:
                state["unrecorded"] += 1
            # the contract's step computes in float32: a layer run under autocast, or on an input
            # of another float type, is another step's work (red team 45: the "off" steps' blocks
            # in fp16 on the CPU, slower, to make checkpointing look free)
            if _low_precision(args):
                state["lowp"] += 1
            # a layer ran on the batch when it took in every position of it, at once or over
            # several calls (micro-batches): one row of it, broadcast back, is no step's work
            state["pos"][id(module)] = state["pos"].get(id(module), 0) + _positions(args, state["seq"])
            if state["pos"][id(module)] >= state["need"]:
                state["ran"].add(id(module))
            self._watch_input(state, module, args)
            if self.checkpoints:
                # every run of the layer in this forward (micro-batches run it several times):
                # each is judged, not the last one (red team 13: the real work outside any
                # checkpoint, then a call inside one that overwrote where the layer "ran")
                state["where"].setdefault(id(module), []).append(token["where"])
                state["fp"][id(module)] = token["fp"]
            elif token["depth"]:
                state["wrapped"] += 1
        self.layer_out(module, out)

    @staticmethod
    def _where(state, module, args):
        """Lesson 04, a layer of the forward running now: the checkpoint calls it runs inside
        (`_checkpoint_regions`: whichever entry point of torch.utils.checkpoint, counted or not),
        whether what it saves for backward goes to checkpoint (autograd off inside a reentrant
        checkpoint, or checkpoint's own saved-tensors hook innermost: not a hook of the
        submission's that keeps everything), and its input's fingerprint (a rerun in the backward
        is a recomputation only on that input)."""
        keys = []
        for frame, counted in _checkpoint_regions():
            for k, known in enumerate(state["frames"]):
                if known is frame:
                    break
            else:  # frames held until the blocks return: an id is never reused meanwhile
                state["frames"].append(frame)
                state["counted"].append(counted)
                k = len(state["frames"]) - 1
            keys.append(k)
        top = _top_saved_hooks(False)
        pack = getattr(top[0], "__code__", None) if top is not None else None
        saves = not torch.is_grad_enabled() or (pack is not None and pack.co_filename == _CKPT_FILE)
        return tuple(keys), saves

    @staticmethod
    def _regions_summary(state, model):
        """`wrapped` (layers that ran in exactly one checkpoint, one that holds their own block's
        attn and mlp and nothing else, their saves going to it), `in_ckpt` (layers inside any
        checkpoint), `covered` (those of them whose saves went to checkpoint) and `uncounted` (checkpoints entered other than through the counted
        torch.utils.checkpoint.checkpoint, e.g. CheckpointFunction.apply, that held a layer)."""
        where = state["where"]
        members = {}
        for m, runs in where.items():
            for keys, _ in runs:
                for k in keys:
                    members.setdefault(k, set()).add(m)
        wrapped = in_ckpt = covered = 0
        for b in model.blocks:
            own = {id(b.attn), id(b.mlp)}
            for m in own:
                runs = where.get(m) or [((), False)]
                in_ckpt += any(keys for keys, _ in runs)
                covered += all(keys and saves for keys, saves in runs)
                if all(len(keys) == 1 and saves and members.get(keys[0]) == own for keys, saves in runs):
                    wrapped += 1
        uncounted = sum(1 for counted in state["counted"] if not counted)
        return wrapped, in_ckpt, covered, uncounted

    def layer_out(self, module, out):
        """A layer returned `out`: its gradient arriving is that layer's backward."""
        if (self.current is None and self.backward is None) or not isinstance(out, torch.Tensor):
            return
        if out.requires_grad:
            out.register_hook(lambda grad, m=id(module): self._layer_back(m))

    def foreign_layer(self):
        """A layer of a model the grader did not hand over (a course model of the submission's
        own making) ran outside any observed forward. Nothing here; a lesson that forbids other
        models' work in a call says so (lesson 03's `Watched`)."""

    def _layer_back(self, module):
        state = self.backward
        if state is not None:
            state["back"].add(module)

    def _watch_input(self, state, module, args):
        """A hook on the input a layer of step `state` was handed (in its forward, or in a
        reentrant checkpoint's rerun, whose backward is its own): the gradient of that input is
        computed only after the layer's own backward, so its positions count as gone back
        through (`in_pos`) when it fires in the step's backward."""
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or not x.requires_grad:
            return
        n = _positions(args, state["seq"])
        if n:
            x.register_hook(lambda g, m=id(module), n=n, st=state: self._input_back(st, m, n))

    def _input_back(self, state, module, n):
        if self.backward is state and _in_step_backward(state):
            state["in_pos"][module] = state["in_pos"].get(module, 0) + n

    def accumulated(self, p):
        """Autograd accumulated a gradient into parameter `p` (its AccumulateGrad ran)."""
        state = self.backward
        if state is not None and state["acc"] is not None and _in_step_backward(state):
            state["acc"].add(id(p))

    def forward(self, model, idx, targets, blocks_fn):
        ctx = self.ctx
        if self.inside is not None and not self.inside():
            ctx.event("outside_step", t=ctx.clock())
            return TinyGPT.forward(model, idx, targets, blocks_fn=blocks_fn)
        k = self.next_id
        self.next_id += 1
        # stamped before the grader labels the inputs: that work is in the step, not in the
        # window's own time outside it (which the idle rules hold to the submission)
        t, c, w = ctx.clock(), ctx.cost_clock(), ctx.work()
        grad = torch.is_grad_enabled()
        inputs = {"idx": label(idx, self.batch["idx"], self.sized),
                  "targets": label(targets, self.batch["targets"], self.sized)}
        ctx.event("step", id=k, inputs=inputs, grad=grad, t=t, c=c, w=w)
        before = ctx.tally("ckpt")
        state = {"id": k, "layers": 0, "wrapped": 0, "task": None, "embedding": False,
                 "ran": set(), "pos": {}, "need": 0, "unrecorded": 0, "seq": None, "back": set(), "loss": True, "recomputed": 0,
                 "done": False, "prof": _profiling(),
                 "frames": [], "counted": [], "where": {}, "fp": {},
                 "reruns": {}, "refp": {}, "blocks": model.blocks, "acc": set(), "in_pos": {}, "lowp": 0,
                 "all": {id(m) for b in model.blocks for m in (b.attn, b.mlp)}}
        x = model.embed(idx)
        state["need"] = _positions((x,))  # the batch's positions: what every layer must take in
        state["seq"] = x.shape[1] if x.dim() == 3 else None  # ... as whole sequences of this length
        if grad and x.requires_grad:

            def reached_embedding(g, state=state):
                if state["task"] is not None and _graph_task_id() == state["task"]:
                    state["embedding"] = True

            x.register_hook(reached_embedding)
        outer, self.current = self.current, state
        try:
            h = (blocks_fn or _plain_blocks)(model.blocks, x)
        finally:
            self.current = outer
            state["frames"] = None  # the checkpoint frames, held only while the blocks ran
        out = model.head_loss(h, targets)
        loss = out[1] if out[1] is not None else out[0]  # no targets: the logits stand for the loss
        ckpt = ctx.tally("ckpt") - before
        in_ckpt = None
        if self.checkpoints:
            # every checkpoint that held a layer counts, whichever entry point made it; a layer
            # counts as wrapped only in a checkpoint of its own block that its saves went to
            state["wrapped"], in_ckpt, covered, uncounted = self._regions_summary(state, model)
            ckpt += uncounted
            state["in_ckpt"] = {m for m, runs in state["where"].items() if any(keys for keys, _ in runs)}
        flag = getattr(blocks_fn, "grade_checkpointing", None)
        rec = {
            "e": "forward",
            "probe": ctx.current_probe,
            "grad": grad,
            "ckpt": ckpt,
            # the blocks' layers (attn, mlp) that ran, and those that ran inside a checkpoint call
            "layers": state["layers"],
            "wrapped": state["wrapped"],
            "expected_layers": 2 * len(model.blocks),
            # layers that did not run inside a checkpoint call (not run at all included)
            "unwrapped": 2 * len(model.blocks) - state["wrapped"],
            # the flag the grader asked for, or (a submission's own blocks_fn) what it did
            "checkpointing": bool(flag) if flag is not None else ckpt > 0,
            "flag_from": "grader" if flag is not None else "observed",
        }
        if in_ckpt is not None:
            rec["in_ckpt"] = in_ckpt  # layers that ran inside any checkpoint
            rec["covered"] = covered  # ... and whose saves went to that checkpoint
        if grad and isinstance(loss, torch.Tensor) and loss.requires_grad:
            params = [p for p in model.parameters() if id(p) not in UNTRAINED]
            _watch_accumulation(params)

            def through_loss(g, state=state, rec=rec, params=params, targets=targets):
                self.loss_tasks.append(_graph_task_id())  # every backward from a model's loss
                del self.loss_tasks[:-8]
                if state["done"] or state["task"] is not None:
                    return  # one backward per step: the first that began at its loss
                state["task"] = _graph_task_id()
                state["loss"] = _a_loss_gradient(g, logits=targets is None)
                self.backward = state
                _engine.queue_callback(lambda: self._backward_end(state, rec, params))

            loss.register_hook(through_loss)
        variant = self.variant(rec)
        # `whole`: every layer took in every position of the batch in this forward, `recorded`:
        # with autograd recording each (lesson 04 believes bytes a submission's hooks were handed
        # only in such a forward)
        ctx.event(
            "fwd_end", id=k, ckpt=ckpt, layers=state["layers"], wrapped=state["wrapped"],
            whole=state["all"] <= state["ran"], recorded=not state["unrecorded"],
            **({"variant": variant} if variant else {}),
        )
        ctx.append_row(f"forwards.{ctx.current_probe}", rec)
        return out

    def _backward_end(self, state, rec, params):
        """The backward that began at step `state`'s loss ended: was it the step's?"""
        if self.backward is state:
            self.backward = None
        state["done"] = True
        dropped, self.dropped = self.dropped, set()
        acc, state["acc"] = state["acc"], None
        fresh = sum(1 for p in params if id(p) in acc or id(p) in dropped)
        ctx = self.ctx
        # what the backward reran (lesson 04): judged in every step, whole or not
        reran = self._reran(state, rec) if self.checkpoints else None
        every, ran = state["all"], state["ran"] & state["all"]
        # went back through a layer: its output's gradient arrived, and its input's was computed
        # on every position of the batch
        need, in_pos = state["need"], state["in_pos"]
        back = {m for m in state["back"] & every if in_pos.get(m, 0) >= need}
        whole = (state["embedding"] and state["loss"] and ran == every and back == every
                 and fresh == len(params) and not state["lowp"])
        if not whole:  # what it missed, for the report (measurement.rs)
            ctx.event(
                "step_undone", id=state["id"], embedding=state["embedding"], loss=state["loss"],
                ran=len(ran), model_layers=len(every), back=len(back), grads=fresh,
                params=len(params), lowp=state["lowp"], t=ctx.clock(),
            )
            return
        if reran is not None:
            variant = self.variant({**rec, **reran})
        else:
            variant = self.variant({**rec, "recomputed": state["recomputed"]})
        # its recording after the stamp is the grader's own seconds (`overhead`), not the window's
        c, w = ctx.cost_clock(), ctx.work()
        # `prof`: a profiler recorded (part of) the step: its recording's cost is in the step, no
        # measure of it (red team 24's profiled timed "off" steps in lesson 04: 1.3–1.5× their time)
        more = {"prof": True} if state["prof"] or _profiling() else {}
        ctx.event_after_stamp(c, "step_done", id=state["id"], t=ctx.clock(), c=c, w=w,
                              **({"variant": variant} if variant else {}), **more)

    def _reran(self, state, rec):
        """Lesson 04, at the end of a step's backward: which layers it reran, and on what. A
        recomputation is one rerun of a layer on the input that layer had in the forward (its
        fingerprint): a layer called again on something else (a zero tensor, to look recomputed)
        is none, and a layer rerun twice was checkpointed twice over. Sent as a row of
        `backwards.<probe>` (judged in every probe, not only in timed windows):
        `reruns` (every rerun), `recompute_missing` (layers without exactly one rerun of the
        forward's shape whose block input, the attention's, matched) and `recompute_wrong`
        (also counting a rerun whose input differed at all: dropout masks drawn again),
        `ckpt_not_recomputed` (the same, of the layers that ran inside a checkpoint)."""
        reruns, refp, fp = state["reruns"], state["refp"], state["fp"]
        pairs = []
        for b in state["blocks"]:
            for m, exact in ((id(b.attn), True), (id(b.mlp), False)):
                pairs.append((m, exact, fp.get(m), (refp.get(m) or [None])[0]))
        same = _same_fingerprints([(a, b) for _, _, a, b in pairs])
        missing = wrong = recomputed = wrong_in_ckpt = 0
        for (m, exact, _, _), (shape_ok, value_ok) in zip(pairs, same):
            once = reruns.get(m, 0) == 1 and shape_ok
            missing += not (once and (value_ok or not exact))
            wrong += not (once and value_ok)
            wrong_in_ckpt += m in state.get("in_ckpt", ()) and not (once and value_ok)
            recomputed += once and value_ok
        total = sum(reruns.values())
        row = {
            "e": "backward", "probe": rec["probe"], "checkpointing": rec["checkpointing"],
            "flag_from": rec["flag_from"],
            "reruns": total, "recompute_missing": missing, "recompute_wrong": wrong,
            # of the layers that ran inside a checkpoint: whatever checkpoints there were recomputed
            "ckpt_not_recomputed": wrong_in_ckpt,
        }
        self.ctx.append_row(f"backwards.{rec['probe']}", row)
        return {"recomputed": recomputed, "reruns": total}


def _positions(args, seq=None):
    """The positions (batch × sequence rows, the last dimension being the features) a layer's
    first tensor argument holds; 0 without one. With `seq` (the batch's sequence length), only
    whole sequences count: a (B, T, d) input, or a micro-batch (b, T, d) of it. The same positions
    regrouped as B·T sequences of one token (`x.reshape(B * T, 1, d)`) hold every position but
    skip attention's T × T work: no step's work (red team 6)."""
    t = args[0] if args else None
    if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[-1] == 0:
        return 0
    if seq is not None and (t.dim() != 3 or t.shape[1] != seq):
        return 0
    return t.numel() // t.shape[-1]


# Every block's `attn` and `mlp` of an observed model is watched from inside its class's own
# `forward` (course.model's Attention and MLP, wrapped once by the first `observed_model`), not by
# module hooks: `layer.forward(x)` and `Attention.forward(layer, x)` skip hooks, not the class's
# forward (red team 13: the real work done through `attn.forward()` unseen, the layers called
# through their hooks on junk only); and from inside it the layer's own pre-hooks have run, so a
# saved-tensors hook one of them entered is the innermost the run is judged under.
_OBSERVED = _weakref.WeakSet()  # the layers of the grader's observed models (not a copy's)
_StopRecomputation = getattr(_cp_mod, "_StopRecomputationError", None) or ()


def _observed_layer_forward(forward):
    def observed(self, *args, **kwargs):
        observer = _observer[0]
        if observer is None:
            return forward(self, *args, **kwargs)
        if self not in _OBSERVED:
            if observer.current is None:  # a layer of another model, outside any observed forward
                observer.foreign_layer()
            return forward(self, *args, **kwargs)
        token = observer.layer_begin(self, args)
        try:
            out = forward(self, *args, **kwargs)
        except _StopRecomputation:  # checkpoint's early stop: the rerun saved all it had to
            observer.layer_end(token, None)
            raise
        observer.layer_end(token, out)
        return out

    observed.__wrapped__ = forward
    observed.__name__, observed.__qualname__ = forward.__name__, forward.__qualname__
    return observed


# its code, one for every wrapped class: an entry point (`grade_lib.ENTRY_POINTS`), since the
# submission may call a layer's forward itself
_LAYER_FORWARD = _observed_layer_forward(lambda self: None)


def _watch_layer_classes(classes):
    for cls in classes:
        if "forward" in vars(cls) and not hasattr(vars(cls)["forward"], "__wrapped__"):
            cls.forward = _observed_layer_forward(vars(cls)["forward"])


# Lesson 04: where a layer runs, seen from the Python stack (`_checkpoint_regions`). A checkpoint
# is whatever frame of torch.utils.checkpoint runs a function for it: `checkpoint()` itself (the
# non-reentrant path calls the function from there), `CheckpointFunction.forward` (the reentrant
# one, reached from `checkpoint()` or called directly; the driver's wrapper of it and torch's own)
# and the driver's counting wrapper around `checkpoint()`; frames of torch (and the driver) between
# two of them belong to one call, a frame of anyone else's code separates two. Every such frame is
# registered while a function runs under it (`grade_instruments.CKPT_LIVE`): the walk stops once
# it has passed all of them, and does not start when there are none, so that its cost does not
# grow with the depth of the submission's stack.
_CKPT_FILE = _cp_mod.__file__
_COUNTED_CODE = _cp_mod.checkpoint.__code__ if hasattr(_cp_mod.checkpoint, "__wrapped__") else None
_DRIVER_FILE = _COUNTED_CODE.co_filename if _COUNTED_CODE is not None else None
# the driver's torch._dynamo stand-in's `disable(fn)` wrapper (instruments.py): where torch's own
# wrapper would be, between checkpoint() and its body
_STAND_IN_FILE = getattr(_sys.modules.get("grade_instruments"), "STAND_IN_FILE", None)
_CF = _cp_mod.CheckpointFunction.forward
_CF_FORWARD = _CF.__code__
_CF_REAL = getattr(_CF, "__wrapped__", _CF).__code__
_LIVE = getattr(_sys.modules.get("grade_instruments"), "CKPT_LIVE", None)
_TORCH_DIR = _os.path.dirname(torch.__file__) + _os.sep
_getframe = _sys._getframe


def _checkpoint_regions():
    """The checkpoint calls the running layer is inside, innermost first, up to the observed
    model's forward (a checkpoint around the whole model is not one of its blocks'):
    `[(outermost frame of the call, entered through the counted checkpoint())]`."""
    live = _LIVE
    if live is not None and not live:
        return []  # no checkpoint call is running
    pending = len(live) if live is not None else -1  # registered frames not passed yet
    groups = []
    joined = False  # the frames since the last checkpoint frame were torch's or the driver's
    f = _getframe(1)
    stop = StepObserver.forward.__code__
    while f is not None:
        code = f.f_code
        if code is stop:
            break
        if code is _COUNTED_CODE or code is _CF_FORWARD or code is _CF_REAL or (
            code.co_name == "checkpoint" and code.co_filename == _CKPT_FILE
        ):
            if joined:
                groups[-1][0] = f
                groups[-1][1] = groups[-1][1] or code is _COUNTED_CODE
            else:
                groups.append([f, code is _COUNTED_CODE])
                joined = True
            if pending > 0 and any(fr is f for fr in live):
                pending -= 1
                if not pending:
                    break  # every checkpoint frame of the stack is behind
        elif joined and not (code.co_filename.startswith(_TORCH_DIR) or code.co_filename in (_DRIVER_FILE, _STAND_IN_FILE)):
            joined = False
        f = f.f_back
    return [(frame, counted) for frame, counted in groups]


def _low_precision(args):
    """Does a layer run on `args` compute in less than float32: under autocast for its input's
    device, or on a floating input of another type?"""
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None:
        return False
    if x.is_floating_point() and x.dtype != torch.float32:
        return True
    return torch.is_autocast_enabled(x.device.type)


def _fingerprint(args):
    """A layer input's shape and two sums (device tensors: read once, at the backward's end)."""
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None:
        return None
    with torch.no_grad():
        d = x.detach().float()
        return tuple(d.shape), torch.stack((d.sum(), torch.linalg.vector_norm(d)))


def _same_fingerprints(pairs):
    """[(same shape, same values)] of each (forward's, rerun's) fingerprint pair."""
    out, values = [], []
    for a, b in pairs:
        shape_ok = a is not None and b is not None and a[0] == b[0]
        out.append(shape_ok)
        if shape_ok:
            values.append(torch.stack((a[1], b[1])).cpu())
    close = []
    if values:
        for (s0, n0), (s1, n1) in torch.stack(values).double().tolist():
            # a rerun of the same ops on the same input: equal up to reduction order
            tol = 1e-5 * n0 + 1e-6
            close.append(abs(n0 - n1) <= tol and abs(s0 - s1) <= tol * 64)
    it = iter(close)
    return [(ok, next(it) if ok else False) for ok in out]


def _a_loss_gradient(g, logits):
    """Is `g`, arriving where a step's backward began, a loss's gradient? At the model's loss
    (a scalar): positive. At the logits (the loss computed outside the model): a cross-entropy's,
    softmax − one-hot up to a positive scale: every position's row sums to 0 and has exactly one
    negative entry, its target's (a saturated softmax may leave a few rows without one)."""
    with torch.no_grad():
        if not logits:
            return g.numel() == 1 and bool(g.reshape(()) > 0)
        rows = g.reshape(-1, g.shape[-1]).float()
        if rows.numel() == 0:
            return False
        neg = (rows < 0).sum(-1)
        if bool((neg > 1).any()) or float((neg == 1).float().mean()) < 0.99:
            return False
        return bool((rows.sum(-1).abs() <= 1e-3 * rows.abs().sum(-1) + 1e-30).all())


_graph_task_id = torch._C._current_graph_task_id  # which backward is running (-1: none)
_engine = torch.autograd.Variable._execution_engine  # queue_callback: run at that backward's end
# a reentrant checkpoint's backward: the graph tasks it was called from (grade_instruments)
_CKPT_BACK_TASKS = getattr(_sys.modules.get("grade_instruments"), "CKPT_BACK_TASKS", None)
_CFB = _cp_mod.CheckpointFunction.backward
_CFB_REAL = getattr(_CFB, "__wrapped__", _CFB).__code__
_LIB_DIR = _os.path.dirname(__file__) + _os.sep  # the grader's library (reads.py's engine watch)


def _in_step_backward(state):
    """Is the backward running now step `state`'s: the one that began at its loss, or the backward
    a reentrant checkpoint runs of its rerun function on behalf of that one (torch's own call in
    `CheckpointFunction.backward`, nobody's code between: a backward the rerun function itself
    starts, of `p.sum() * 0` say, is not the step's)?"""
    task = _graph_task_id()
    if task == state["task"]:
        return True
    if not _CKPT_BACK_TASKS or state["task"] not in _CKPT_BACK_TASKS:
        return False
    f = _getframe(2)
    while f is not None:
        code = f.f_code
        if code is _CFB_REAL:
            return True
        name = code.co_filename
        if not (name.startswith(_TORCH_DIR) or name.startswith(_LIB_DIR) or name == _DRIVER_FILE):
            return False
        f = f.f_back
    return False


# parameters the grader's accumulation hook is on, each once whichever model it is in: id -> a
# weak reference (by id: a tensor's `==` is elementwise)
_ACCUMULATION_WATCHED = {}


def _accumulated(p):
    observer = _observer[0]
    if observer is not None:
        observer.accumulated(p)


def _watch_accumulation(params):
    """The grader's post-accumulate-grad hook on each of `params` not yet watched: it runs only
    when autograd's AccumulateGrad of that parameter ran, not when `.grad` is assigned."""
    for p in params:
        known = _ACCUMULATION_WATCHED.get(id(p))
        if p.requires_grad and (known is None or known() is not p):
            p.register_post_accumulate_grad_hook(_accumulated)
            _ACCUMULATION_WATCHED[id(p)] = _weakref.ref(p)


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
    _watch_layer_classes({type(layer) for block in model.blocks for layer in (block.attn, block.mlp)})
    for block in model.blocks:
        for layer in (block.attn, block.mlp):
            _OBSERVED.add(layer)
    return model.to(device).train()

