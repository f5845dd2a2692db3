"""grade's scenario library: instruments every lesson's scenario shares (`ctx.lib` in a scenario).

Embedded in the `grade` binary next to driver.py. What lives here is grader code that several
lessons need, so it is written once:

- `observed_model(...)`: a TinyGPT whose every forward is observed as (the start of) a training
  step. The grader marks, in the active trace,
      step      {id, inputs: {idx, targets}, grad}   the forward began (inputs labelled against
                                                      the batch the grader handed over)
      fwd_end   {id, ckpt, variant}                 the forward returned: checkpoint calls in it
      step_done {id}                                backward reached the embedding output
  A whole training step is a `step` with its `step_done`; a forward without one (measuring bytes,
  inference) is not a step. Every forward is also summarised in `ctx.traces["forwards.<probe>"]`
  (checkpoint calls, autograd on/off, the checkpointing flag when the grader set it), so rules such
  as "one checkpoint per block in every forward where autograd records" hold in every probe.
"""
import torch

from course.model import TinyGPT, _plain_blocks

_equal = torch.equal  # captured before any submission code runs
_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks


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
        ctx.event("step", id=k, inputs=inputs, grad=grad)
        before = ctx.ckpt_calls
        x = model.embed(idx)
        if grad and x.requires_grad:
            x.register_hook(lambda g, k=k: ctx.event("step_done", id=k))
        h = (blocks_fn or _plain_blocks)(model.blocks, x)
        out = model.head_loss(h, targets)
        ckpt = ctx.ckpt_calls - before
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
        ctx.traces.setdefault(f"forwards.{ctx.current_probe}", []).append(rec)
        return out


class ObservedTinyGPT(TinyGPT):
    """TinyGPT whose forward reports to `observer` (a class attribute, so copies keep reporting)."""

    observer = None

    def forward(self, idx, targets=None, blocks_fn=None):
        if ObservedTinyGPT.observer is None:
            return super().forward(idx, targets, blocks_fn=blocks_fn)
        return ObservedTinyGPT.observer.forward(self, idx, targets, blocks_fn)


def observed_model(ctx, cfg, weights, device, observer):
    """A TinyGPT loaded with the grader's weights, in train mode, observed by `observer`."""
    ObservedTinyGPT.observer = observer
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
    (`variant` optional), `sync` per `sync()`.
    """

    def __init__(self, ctx, host=16 * TICK):
        self.ctx = ctx
        self.host = ticks(host)
        self.now = 0.0  # host time (what the clocks read)
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

    def sync(self):
        self.syncs += 1
        self.ctx.event("sync")
        self.now = max(self.now, self.queue_end)

    def idle(self):
        """Let the device drain (between probes), without a `sync` event."""
        self.now = max(self.now, self.queue_end)

    def __enter__(self):
        self.ctx.virtual_now = lambda: self.now
        return self

    def __exit__(self, *exc):
        self.ctx.virtual_now = None
        return False
