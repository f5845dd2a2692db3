"""Lesson 4 scenario: what the grader runs against a submission's forward() and compare().

Each probe records raw observations (tensors, metrics, event traces); verdicts are decided in Rust
from rubrics/04-checkpoint.yaml. Probes:
  numerics       loss, logits, every gradient with checkpointing off/on (dropout 0); activation
                 bytes saved for backward and the bytes the forward's results keep alive, both
                 measured by the grader
  dropout        gradients off/on with dropout > 0 and the same seed (RNG preserved?)
  no_input_grad  gradients when the blocks' input does not require grad (reentrant loses them)
  inference      checkpoint calls under torch.no_grad()
  timing         the grader's own step-time measurement: warm-up, sync, interleaved pairs, medians
                 and the median of the pairs' on/off ratios
  memory         (CUDA only) peak allocated bytes of one step off/on
  compare        the submission's compare(), called twice (the second time on another batch drawn
                 from the seed: other rows, another batch size), with its clock/sync/step trace

Every forward of every probe goes through the grader's observed TinyGPT (`ctx.lib`), which counts
the checkpoint calls it made (`forwards.<probe>` traces) and, inside compare(), marks each whole
training step (forward, loss, backward done) and the inputs it ran on.
"""
import statistics

import torch

from course import Config

VARIANTS = (("off", False), ("on", True))

_equal = torch.equal
_synchronize = torch.cuda.synchronize
ProbeFailed = Exception  # replaced by the driver's class in run()


class Lesson:
    def __init__(self, ctx):
        self.ctx = ctx
        self.device = torch.device(ctx.device)
        inputs = ctx.inputs()
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.batch = {
            "idx": inputs["batch/idx"].to(self.device),
            "targets": inputs["batch/targets"].to(self.device),
        }
        # compare()'s second call runs on another batch, drawn from the seed: other rows and
        # another batch size, so the honest activation bytes change and a number cached from
        # the first call (or pasted from an earlier report) is wrong
        self.batch2 = self.other_batch(inputs["batch/idx"], inputs["batch/targets"])
        # a step's variant is decided by what ran (issue 38): "on" when every layer of every
        # block ran inside a checkpoint call and was recomputed in the backward, "off" when they all ran and nothing checkpointed;
        # anything else (layers skipped, a checkpoint beside the blocks) is neither
        self.observer = ctx.lib.StepObserver(ctx, self.batch, variant=self.variant, checkpoints=True, sized=True)

    @staticmethod
    def variant(rec):
        """A forward's variant when it returns, and again at the end of its step's backward
        (`reruns`, `recomputed` added). "on": every layer of every block ran in a checkpoint, its
        saves going to that checkpoint (how many per block: one_checkpoint_per_block) and, in the backward,
        was rerun exactly once on the input it had in the forward; "off": no layer ran in any
        checkpoint (whichever entry point) and none was rerun."""
        if rec["layers"] != rec["expected_layers"]:
            return "partial"
        layers = rec["layers"]
        if rec["ckpt"] and rec["covered"] == layers:
            if "reruns" not in rec:
                return "on"
            return "on" if rec["recomputed"] == layers == rec["reruns"] else "partial"
        if not rec["ckpt"] and not rec["wrapped"] and not rec.get("in_ckpt") and not rec.get("reruns"):
            return "off"
        return "partial"

    def other_batch(self, idx, targets):
        """compare()'s second batch: a seeded draw of 2..B-1 rows (never B) in a seeded order,
        each row rolled by a seeded shift (the tokens differ as well as the size)."""
        g = torch.Generator().manual_seed(int(self.ctx.seed) * 7919 + 4)
        B = idx.shape[0]
        b2 = int(torch.randint(max(2, B // 2), B, (1,), generator=g)) if B > 2 else B
        rows = torch.randperm(B, generator=g)[:b2]
        shift = int(torch.randint(1, idx.shape[1], (1,), generator=g)) if idx.shape[1] > 1 else 0
        return {
            "idx": idx[rows].roll(shift, dims=1).contiguous().to(self.device),
            "targets": targets[rows].roll(shift, dims=1).contiguous().to(self.device),
        }

    def need(self, name):
        fn = getattr(self.ctx.sub, name, None)
        if not callable(fn):
            raise ProbeFailed(f"exercise.py defines no function `{name}` (see the contract in README.md)")
        return fn

    def model(self, dropout=0.0):
        m = self.ctx.model_cfg
        cfg = Config(
            vocab=m["vocab"],
            seq_len=m["seq_len"],
            d_model=m["d_model"],
            n_heads=m["n_heads"],
            n_blocks=m["n_blocks"],
            dropout=dropout,
        )
        return self.ctx.lib.observed_model(self.ctx, cfg, self.weights, self.device, self.observer)

    def blocks_fn(self, checkpointing, detach_input=False):
        forward = self.need("forward")

        def run(blocks, x):
            if detach_input:
                x = x.detach()
            out = forward(blocks, x, checkpointing=checkpointing)
            if not isinstance(out, torch.Tensor) or out.shape != x.shape:
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ProbeFailed(
                    f"forward(blocks, x, checkpointing={checkpointing}) returned {got}, "
                    f"expected a Tensor of shape {tuple(x.shape)}"
                )
            return out

        run.grade_checkpointing = checkpointing  # the flag the grader asked for, in forwards.*
        return run

    def sync(self):
        if self.device.type == "cuda":
            _synchronize()

    def step(self, model, blocks_fn):
        model.zero_grad(set_to_none=True)
        logits, loss = model(self.batch["idx"], self.batch["targets"], blocks_fn=blocks_fn)
        loss.backward()
        return logits, loss

    def save_grads(self, prefix, model):
        missing = 0
        for name, p in model.named_parameters():
            if p.grad is None:
                missing += 1
            else:
                self.ctx.save_tensor(f"{prefix}/grad/{name}", p.grad)
        return missing

    def saved_bytes(self, model, fn):
        """Bytes of distinct storages saved for backward during fn(), parameters excluded."""
        return self.ctx.lib.saved_bytes(model, fn)  # shared with lesson 03

    def hooked_bytes(self, trace, params):
        """{variant: {bytes}}: what saved-tensors hooks entered in this compare() call were handed
        (`saved` events, the driver's observed `saved_tensors_hooks`) in each forward of the
        observed model with autograd on, by what that forward ran (its `fwd_end` variant: "off"
        when no layer ran in any checkpoint; "on" when every layer did, or some layer ran in a
        checkpoint of its block, `wrapped`; others count for neither): per forward, the
        distinct storages' bytes (by `data_ptr`), the grader's parameters excluded
        (`lib.hooked_forwards`). A number the submission reports for a
        variant is believed only when it is one of that variant's (issue 38): a formula of the
        shapes, bytes measured in another model, in an earlier call, or in a forward of the other
        variant (hooks hiding the blocks' saves in a forward that checkpoints nothing) are none of
        them. Which inputs the forward ran on is judged elsewhere (compare_same_inputs; the bytes
        must also equal the grader's own for that variant on that call's batch).

        A forward's bytes count only when every save the driver saw in it went to one hooks'
        entry entered before it began, and it ran every layer on the whole batch (`fwd_end
        {whole}`) with autograd recording it (`recorded`): bytes measured on a slice of the batch
        and scaled up, then shown to a hook in a forward of one row (red team 5), or in a forward
        whose blocks ran under `no_grad` beside a tensor of the wanted size (red team 9), are none
        of them."""
        seen = {}
        for forward, nbytes in self.ctx.lib.hooked_forwards(trace, params, sized=True):
            # an "off" row's bytes from a forward that checkpointed nothing; an "on" row's from one
            # where every layer ran in a checkpoint or some layer in a checkpoint of its block (how
            # well is judged elsewhere; one checkpoint of nothing beside unwrapped blocks is
            # neither: red team 6), of the whole batch, with autograd on
            variant = forward.get("variant")
            kind = "off" if variant == "off" else "on" if variant == "on" or forward.get("wrapped") else None
            if (nbytes is not None and forward["grad"] and forward.get("whole") and forward.get("recorded")
                    and kind is not None):
                seen.setdefault(kind, set()).add(nbytes)
        return seen

    # -- probes -------------------------------------------------------------------------------
    def numerics(self):
        ctx = self.ctx
        # the model's own forward, none of the submission's code in it: what "off" saves (a
        # forward that keeps more when off, to halve its ratio, is no baseline; red team 7)
        model = self.model()
        model.zero_grad(set_to_none=True)
        _, nbytes = self.saved_bytes(model, lambda: model(self.batch["idx"], self.batch["targets"]))
        ctx.metric("numerics.plain.activation_bytes", nbytes)
        # ... and what its results keep alive: the yardstick "on" must halve (not the submission's
        # "off", which memory of its own kept alive can inflate: red team 13)
        _, kept = ctx.lib.kept_bytes(
            model, lambda: model(self.batch["idx"], self.batch["targets"]), ctx.lib.param_storages(model)
        )
        ctx.metric("numerics.plain.kept_bytes", kept)
        del model
        for variant, flag in VARIANTS:
            model = self.model()
            # the parameters the grader made, before any of the submission's code ran on the
            # model: one it registers later (and fills) is kept memory like any other
            params = ctx.lib.param_storages(model)
            blocks_fn = self.blocks_fn(flag)
            model.zero_grad(set_to_none=True)
            (logits, loss), nbytes = self.saved_bytes(
                model, lambda: model(self.batch["idx"], self.batch["targets"], blocks_fn=blocks_fn)
            )
            loss.backward()
            ctx.metric(f"numerics.{variant}.activation_bytes", nbytes)
            # the same measure on compare()'s second batch (compare_bytes_agree for run2)
            b2 = self.batch2
            _, nbytes2 = self.saved_bytes(model, lambda: model(b2["idx"], b2["targets"], blocks_fn=blocks_fn))
            ctx.metric(f"numerics.{variant}.activation_bytes_batch2", nbytes2)
            ctx.save_tensor(f"numerics/{variant}/loss", loss)
            ctx.save_tensor(f"numerics/{variant}/logits", logits)
            ctx.metric(f"numerics.{variant}.missing_grads", self.save_grads(f"numerics/{variant}", model))
            del logits, loss
            # a second forward, on its own (no instrument around the first changes): what its
            # results really keep alive, whatever saved-tensors hooks were active — hooks of the
            # submission's own, innermost, hide what it saves from the first measure, not this one
            _, kept = ctx.lib.kept_bytes(
                model,
                lambda: model(self.batch["idx"], self.batch["targets"], blocks_fn=blocks_fn),
                params,
            )
            ctx.metric(f"numerics.{variant}.kept_bytes", kept)

    def dropout(self):
        p = float(self.ctx.params["dropout"])
        # the model's own step without dropout, none of the submission's code in it: the "off"
        # step must differ from it (dropout ran; a forward that switches it off, `blocks.eval()`,
        # agrees on/off with nothing dropped: red team 7)
        model = self.model(dropout=0.0)
        torch.manual_seed(self.ctx.seed + 1)
        _, undropped = self.step(model, None)
        undropped = undropped.detach()
        del model
        for variant, flag in VARIANTS:
            model = self.model(dropout=p)
            torch.manual_seed(self.ctx.seed + 1)
            _, loss = self.step(model, self.blocks_fn(flag))
            self.ctx.save_tensor(f"dropout/{variant}/loss", loss)
            self.save_grads(f"dropout/{variant}", model)
            if variant == "off":
                with torch.no_grad():
                    same = loss.shape == undropped.shape and bool(_equal(loss.detach(), undropped))
                self.ctx.metric("dropout.off_dropped", not same)

    def no_input_grad(self):
        for variant, flag in VARIANTS:
            model = self.model()
            _, loss = self.step(model, self.blocks_fn(flag, detach_input=True))
            missing = self.save_grads(f"no_input_grad/{variant}", model)
            self.ctx.metric(f"no_input_grad.{variant}.missing_grads", missing)

    def inference(self):
        model = self.model()
        with torch.no_grad():
            logits, _ = model(self.batch["idx"], None, blocks_fn=self.blocks_fn(True))
        self.ctx.save_tensor("inference/on/logits", logits)

    def timing(self):
        t = self.ctx.params["timing"]
        clock = self.ctx.cost_clock  # wall time less the time spent waiting for a CPU
        model = self.model()
        fns = {variant: self.blocks_fn(flag) for variant, flag in VARIANTS}
        for variant, _ in VARIANTS:
            for _ in range(int(t["warmup"])):
                self.step(model, fns[variant])
        samples = {"off": [], "on": []}
        n = int(t["steps_per_repeat"])
        for r in range(int(t["repeats"])):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]  # interleave: drift hits both
            for variant, _ in order:
                self.sync()
                t0 = clock()
                for _ in range(n):
                    self.step(model, fns[variant])
                self.sync()
                samples[variant].append((clock() - t0) / n)
        for variant, _ in VARIANTS:
            self.ctx.metric(f"timing.{variant}.median_s", statistics.median(samples[variant]))
            self.ctx.metric(f"timing.{variant}.min_s", min(samples[variant]))
        # on/off from pairs timed back to back: load that comes and goes hits both halves of a
        # pair alike, so the median of the pairs' ratios holds on a busy machine where a ratio
        # of two medians (taken over different moments) can swing by 2x
        pairs = [on / off for on, off in zip(samples["on"], samples["off"]) if off > 0]
        self.ctx.metric("timing.on_over_off", statistics.median(pairs))

    def memory(self):
        if self.device.type != "cuda":
            raise ProbeFailed("peak memory needs --device cuda (torch.cuda stats are 0 on CPU)")
        for variant, flag in VARIANTS:
            model = self.model()
            self.step(model, self.blocks_fn(flag))  # warm-up: allocator and cuBLAS workspaces
            model.zero_grad(set_to_none=True)
            _synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            self.step(model, self.blocks_fn(flag))
            _synchronize()
            self.ctx.metric(f"memory.{variant}.peak_bytes", torch.cuda.max_memory_allocated() - base)

    def compare(self):
        compare = self.need("compare")
        ctx = self.ctx
        p = ctx.params
        for run, batch in (("run1", self.batch), ("run2", self.batch2)):
            model = self.model()
            self.observer.batch = batch  # compare_same_inputs: the batch this call was handed
            ctx.metric(f"compare.{run}.batch", int(batch["idx"].shape[0]))

            def sync():
                # the event's recording is the grader's seconds, not the window's own
                ctx.event_after_stamp(ctx.cost_clock(), "sync")
                self.sync()

            params = {st.data_ptr() for st in ctx.lib.param_storages(model)}
            ctx.trace = trace = []
            ctx.observe_saves = True  # what the submission's saved-tensors hooks are handed
            try:
                result = compare(
                    model,
                    {k: v.clone() for k, v in batch.items()},  # theirs to mutate
                    sync=sync,
                    warmup=int(p["warmup"]),
                    repeats=int(p["repeats"]),
                )
            finally:
                ctx.observe_saves = False
                ctx.trace = None
                ctx.traces[f"compare.{run}"] = trace
                self.observer.batch = self.batch
            result = ctx.lib.plain(result, "compare()'s result", ProbeFailed)
            # the parameters' addresses then and now: one that moved during the call (a storage
            # grown with `resize_`) freed an address a later save may have taken (`saved_bytes`)
            params &= {st.data_ptr() for st in ctx.lib.param_storages(model)}
            hooked = self.hooked_bytes(trace, params)
            for variant, _ in VARIANTS:
                rec = result.get(variant) if isinstance(result, dict) else None
                if not isinstance(rec, dict):
                    raise ProbeFailed(
                        f"compare() must return {{'off': {{...}}, 'on': {{...}}}}; got {type(result).__name__}"
                        + (f" with keys {sorted(result)}" if isinstance(result, dict) else "")
                    )
                for key, kind in (("step_s", (int, float)), ("activation_bytes", (int,))):
                    value = rec.get(key)
                    if hasattr(value, "item"):
                        value = value.item()
                    if isinstance(value, bool) or not isinstance(value, kind):
                        raise ProbeFailed(
                            f"compare()['{variant}']['{key}'] is {value!r}; expected "
                            + ("a number of seconds" if key == "step_s" else "an int number of bytes")
                        )
                    ctx.metric(f"compare.{run}.{variant}.{key}", value)
                    if key == "activation_bytes":
                        # the bytes the grader saw handed to the submission's pack hook in a
                        # forward of this call (compare_bytes_agree): the reported number when
                        # it is one of them, else the nearest (none seen: 0)
                        mine = hooked.get(variant, ())
                        near = min(mine, key=lambda b: abs(b - value)) if mine else 0
                        ctx.metric(f"compare.{run}.{variant}.hooked_bytes", near)


def run(ctx):
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    lesson = Lesson(ctx)
    probes = ["numerics", "dropout", "no_input_grad", "inference", "timing", "compare"]
    if lesson.device.type == "cuda":
        probes.insert(5, "memory")  # peak_memory_drops is CUDA-only (torch.cuda stats are 0 on CPU)
    for name in probes:
        with ctx.probe(name):
            getattr(lesson, name)()
