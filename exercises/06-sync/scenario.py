"""Lesson 6 scenario: what the grader runs against a submission's train(), generate() and
count_syncs(), next to the grader's own baseline (exercises/06-sync/baseline.py, loaded by path).

Each probe records raw observations; verdicts are decided in Rust from rubrics/06-sync.yaml.
What the submission is compared with is computed out of its reach: the baseline's runs and the
grader's profile of the baseline in `before_submission` (before the submission is imported), the
grader's profile of the submission's train() only after count_syncs() has returned, counts as
events (Rust counts them), the greedy decode in libtorch (src/reference/).
  baseline     (before_submission) the baseline trains identically initialised models on the
               same batches, twice (`short` and `long` runs): logged losses, final parameters,
               read-backs and tensors from Python values (`ctx.lib.HostReads`: traces
               `host.baseline.<run>`); the grader's own torch.profiler count of
               `aten::_local_scalar_dense` for one baseline train() (`profile.grader.baseline`)
  train        the submission's train() the same way (`host.train.<run>`: events `readback {op,
               bytes, line}`, `factory {op, line}`, `kept_graph {steps, line}` — a read-back whose
               autograd graph still reaches the losses of several steps, or more than two steps'
               graphs alive at once at a read-back or at a step boundary, `at: "step"`)
  generate     the submission's greedy decode from the prompt idx[0, :seq_len/4], seq_len/2 new
               tokens (the grader decodes the same in libtorch: `reference/greedy/tokens`), its
               read-backs and constants (`host.generate`), and `forward {grad}` for every forward of
               the model (autograd on or off)
  timing       the grader times baseline and submission train() on the same batches, one log window
               per call, in adjacent pairs (order alternating), on its cost clock (wall time less
               the time spent waiting for a CPU): the median of the pairs' ratios; each call
               on a fresh model and optimizer, as every call gets, its parameters' digest
               (`timing/params/<who>/<call>`) equal to the baseline's
  count_syncs  what the submission's count_syncs(fn) says for a baseline and a submission train(),
               each followed by a number of the grader's own read-backs drawn for each fn
               (`count_syncs.extra_reads.<who>`); the grader's fn
               emits `call {profiling_start, profiling_end}` (was a torch profiler recording when fn
               began and ended, as torch itself reports it) into `count_syncs.<who>`; after each
               count returned, the grader's own profile of the same job (`count_syncs.grader.<who>`)
  profile      the grader's own profiler count for one submission train() (`profile.grader.train`),
               taken after count_syncs() returned, so the submission never had it in reach
"""
import importlib.util
import itertools
import math
import os
import random
import statistics

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile as _profile

from course import Config, TinyGPT

SYNC_EVENTS = ("aten::_local_scalar_dense",)
# captured when the scenario is loaded, before any submission code runs
_synchronize = torch.cuda.synchronize
_profiler_enabled = torch._C._autograd._profiler_enabled
_is_grad_enabled = torch.is_grad_enabled
_draw = random.SystemRandom().randrange  # from os.urandom: no state the submission could read
# the batch offset of each train-probe run ({run: offset}), drawn from os.urandom when the
# baseline's runs are made (before the submission is imported), the two runs' different: the
# long run's batches are not the short run's, so no run's logs are another's replayed
_OFFSETS = {}
ProbeFailed = Exception  # replaced by the driver's class in run()


def _scalar(ctx, v, integral=False):
    """Is `v` exactly a Python or numpy number (an int where `integral`)? Judged by its type
    alone: nothing of the submission's runs (no `__float__`, no `numbers.Real` registration)."""
    if type(v) in (torch.Tensor, torch.nn.Parameter, np.ndarray):
        return False  # a tensor (or array) in the list only postpones its read-back
    if integral and type(v) in (float, np.float16, np.float32, np.float64):
        return False
    try:
        ctx.lib.number(v, integral=integral)
    except ctx.lib.NotANumber:
        return False
    return True


def _load_baseline():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline.py")
    spec = importlib.util.spec_from_file_location("grade_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Lesson:
    def __init__(self, ctx):
        self.ctx = ctx
        self.p = ctx.params
        self.device = torch.device(ctx.device)
        inputs = ctx.inputs()
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.idx = inputs["batch/idx"].to(self.device)
        self.targets = inputs["batch/targets"].to(self.device)
        self.baseline = _load_baseline()

    def files(self, who):
        return [self.baseline.__file__] if who == "baseline" else [self.ctx.sub.__file__]

    def need(self, name):
        fn = getattr(self.ctx.sub, name, None)
        if not callable(fn):
            raise ProbeFailed(f"exercise.py defines no function `{name}` (see the contract in README.md)")
        return fn

    def model(self):
        m = self.ctx.model_cfg
        cfg = Config(vocab=m["vocab"], seq_len=m["seq_len"], d_model=m["d_model"],
                     n_heads=m["n_heads"], n_blocks=m["n_blocks"], dropout=0.0)
        model = TinyGPT(cfg)
        model.load_state_dict(self.weights, strict=True)
        return model.to(self.device).train()

    def optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=float(self.p["lr"]), momentum=float(self.p["momentum"]), foreach=True)

    def batches(self, steps, offset=0):
        """`steps` batches, all made from the grader's batch (step k: tokens rolled by offset + k)."""
        return [
            (self.idx.roll(offset + k, dims=1).clone(), self.targets.roll(offset + k, dims=1).clone())
            for k in range(steps)
        ]

    def sync(self):
        if self.device.type == "cuda":
            _synchronize()

    def counter(self, who, marks=None, tag=None, autograd=False):
        """The grader's read-back counter for `who`'s file (`lib.HostReads`); `marks` the step
        marks of the model trained (`lib.step_marks`), `tag` fields added to every event. A kept
        graph is looked for in what the submission's frames hold too (`held`); the baseline's
        kept graphs are judged by nothing, and it reads back every step, so it is spared the
        walk."""
        return self.ctx.lib.HostReads(self.ctx, self.files(who), self.device, marks=marks, tag=tag,
                                      held=who != "baseline", autograd=autograd)

    def observed(self, stream, who, fn, marks=None, autograd=False):
        """fn() under the grader's read-back counter for `who`'s file; events into `stream`."""
        ctx = self.ctx
        counter = self.counter(who, marks, autograd=autograd)
        ctx.trace = trace = []
        try:
            with counter:
                out = fn()
        finally:
            ctx.trace = None
            ctx.traces[stream] = trace
        return out, counter

    def record_counts(self, prefix, counter):
        self.ctx.metric(f"{prefix}.readbacks", len(counter.readbacks))
        self.ctx.metric(f"{prefix}.d2h_bytes", sum(r["bytes"] for r in counter.readbacks))
        self.ctx.metric(f"{prefix}.factories", len(counter.factories))

    def train_fn(self, who):
        return self.baseline.train if who == "baseline" else self.need("train")

    def mark_steps(self, model):
        """Numbers each forward's loss in a table of the grader's (`lib.step_marks`: nothing is
        written on the node), so a read-back whose graph reaches several steps' losses shows as
        `kept_graph`. Returns (marks, hook handle)."""
        return self.ctx.lib.step_marks(model)

    @staticmethod
    def count_work(model, opt, shape):
        """Counters of one train() call's work, kept by hooks of the grader's that read no value
        (nothing waits for the device): [forwards of `model` on a (B, T) input of `shape` that
        returned, backwards that reached the token embedding, steps of `opt`]. Returns (counts,
        handles). A forward counts as it returns, not as it begins (red teams 27 and 29: a call of
        the model made to raise right after its embedding counted as the step's forward, while
        the step was computed by hand beside it)."""
        work = [0, 0, 0]

        def forward(module, args, out):
            if args and isinstance(args[0], torch.Tensor) and args[0].shape == shape:
                work[0] += 1

        def backward(p):
            work[1] += 1

        def stepped(optimizer, args, kwargs):
            work[2] += 1

        first = next(iter(model.parameters()))
        return work, [model.register_forward_hook(forward),
                      first.register_post_accumulate_grad_hook(backward),
                      opt.register_step_post_hook(stepped)]

    def logs_tensor(self, logged):
        """What a train() call returned, as float64 (NaN when it is not a list of numbers: it
        equals nothing)."""
        if type(logged) in (list, tuple) and all(_scalar(self.ctx, v) for v in logged):
            return torch.tensor([self.ctx.lib.number(v) for v in logged], dtype=torch.float64)
        return torch.full((1,), float("nan"), dtype=torch.float64)

    def train_runs(self, who):
        """Both runs of `who`'s train(); the first bad return value fails the probe at the end."""
        ctx = self.ctx
        log_every = int(self.p["log_every"])
        fn = self.train_fn(who)
        errors = []
        if who == "baseline":
            seq_len = int(ctx.model_cfg["seq_len"])
            _OFFSETS["short"] = _draw(seq_len)
            _OFFSETS["long"] = (_OFFSETS["short"] + 1 + _draw(seq_len - 1)) % seq_len
        for run, steps in (("short", int(self.p["short_steps"])), ("long", int(self.p["long_steps"]))):
            model = self.model()
            opt = self.optimizer(model)
            batches = self.batches(steps, _OFFSETS[run])
            marks, hook = self.mark_steps(model)
            logged, counter = self.observed(
                f"host.{who}.{run}", who, lambda: fn(model, batches, opt, log_every=log_every), marks
            )
            hook.remove()
            self.record_counts(f"{who}.{run}", counter)
            for name, p in model.named_parameters():
                ctx.save_tensor(f"params/{who}/{run}/{name}", p)
            if who == "baseline":
                ctx.metric(f"{run}.expected_logs", math.ceil(steps / log_every))
            # exactly a list (or tuple) of Python or numpy numbers: nothing of the submission's own
            # runs when the grader reads them (a lazy object, a list whose iteration reads back)
            ok = type(logged) in (list, tuple) and all(_scalar(ctx, v) for v in logged)
            if not ok:
                kinds = sorted({type(v).__name__ for v in logged}) if type(logged) in (list, tuple) else []
                errors.append(
                    f"train() must return a list of Python floats; got {type(logged).__name__}"
                    + (f" of {', '.join(kinds)}" if kinds else "")
                    + " (a tensor in the list only hides its read-back)"
                )
                continue
            values = [ctx.lib.number(v, what="a logged loss") for v in logged]
            ctx.metric(f"{who}.{run}.logs", len(values))
            ctx.save_tensor(f"losses/{who}/{run}/logged", torch.tensor(values, dtype=torch.float64))
        if errors:
            raise ProbeFailed(errors[0])

    def profile_job(self, who, extra_reads=0):
        """A fresh train() of `profile_steps` steps for `who`, ready to call, and its step marks:
        (job, marks, hook); then `extra_reads` read-backs of the grader's own (one `.item()`
        each). The caller runs it under the read-back counter (every call is watched)."""
        steps = int(self.p["profile_steps"])
        log_every = int(self.p["log_every"])
        train = self.train_fn(who)
        model = self.model()
        opt = self.optimizer(model)
        batches = self.batches(steps)
        value = torch.zeros((), device=self.device)
        marks, hook = self.mark_steps(model)

        def job():
            # and the work it did (red team 25: a train() that knew this job by its batches
            # returned the logs of an earlier one, and trained nothing)
            work, hooks = self.count_work(model, opt, batches[0][0].shape)
            try:
                out = job.logged = train(model, batches, opt, log_every=log_every)
            finally:
                for h in hooks:
                    h.remove()
                job.work = work
            for _ in range(extra_reads):
                value.item()
            return out

        job.logged = None  # what train() returned (`save_logs`): no call, nothing returned
        job.work = [0, 0, 0]  # its forwards, backwards and optimizer steps (`count_work`)

        return job, marks, hook

    def grader_profile(self, who, extra_reads=0, key=None):
        """The grader's own torch.profiler count of sync events for one `who` job (`profile_job`),
        watched by the read-back counter as every call is (`host.<key>`); recorded at once (as
        `key`, default `profile.grader.<who>`), no copy kept."""
        ctx = self.ctx
        key = key or f"profile.grader.{who}"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        run, marks, hook = self.profile_job(who, extra_reads)
        ctx.trace = trace = []
        try:
            with _profile(activities=activities) as prof, self.counter(who, marks):
                run()
        finally:
            hook.remove()
            ctx.trace = None
            ctx.traces[f"host.{key}"] = trace
        # the profiler's raw events (what prof.events() is built from, without its slow
        # Python post-processing)
        events = prof.profiler.kineto_results.events()
        ctx.metric(key, sum(1 for e in events if e.name() in SYNC_EVENTS))
        self.save_logs(who, key.split(".")[0] + "_grader", run)

    def save_logs(self, who, purpose, job):
        """What the train() of a profiled job returned (`jobs/logs/<who>/<purpose>`): every such
        job trains the same batches from the same weights, so the submission's logs must be the
        baseline's, in the calls that are profiled or counted too (every call is held to the
        contract: red team 6 logged nothing in the calls whose result nobody read)."""
        self.ctx.save_tensor(f"jobs/logs/{who}/{purpose}", self.logs_tensor(job.logged))
        self.ctx.save_tensor(f"jobs/work/{who}/{purpose}", torch.tensor(job.work, dtype=torch.float64))

    # -- probes -------------------------------------------------------------------------------
    def train(self):
        self.train_runs("train")

    def generate(self):
        """generate() twice, each call watched the same way (its read-backs, constants, forwards
        and grad mode in `host.generate` / `host.generate.fresh`): on the seed's prompt, whose
        tokens Rust decodes with libtorch (`reference/greedy`), then on a prompt drawn from
        os.urandom as the call starts, whose tokens the grader decodes itself first, greedily, with
        the plain model (`grader/fresh`). Red team 27 decoded every rotation of the train batch in
        an earlier call and returned cached tokens looked up by the prompt: the second prompt is
        in no batch and known to no earlier call."""
        ctx = self.ctx
        T = int(ctx.model_cfg["seq_len"])
        prompt_len, steps = T // 4, T // 2  # the reference decodes the same (src/reference/)
        generate = self.need("generate")
        # what generate() is held to, sent before it runs: the read-back bytes allowed (the new
        # tokens' bytes × the allowance) and the forwards due (one per new token, no cache);
        # the reads and forwards themselves are events sent as they happen, totalled in Rust
        ctx.metric("generate.token_bytes", steps * 8)
        ctx.metric("generate.max_d2h_bytes", steps * 8 * ctx.params["generate_max_bytes_per_token"])
        ctx.metric("generate.forwards_due", steps)
        self.generate_call(generate, "host.generate", self.idx[:1, :prompt_len].clone(), steps, "decode/submission")
        vocab = int(ctx.model_cfg["vocab"])
        g = torch.Generator().manual_seed(_draw(2**62))
        fresh = torch.randint(0, vocab, (1, prompt_len), generator=g, dtype=self.idx.dtype).to(self.device)
        ctx.save_tensor("grader/fresh/tokens", self.greedy(fresh, steps))
        self.generate_call(generate, "host.generate.fresh", fresh, steps, "decode/fresh")

    def greedy(self, prompt, steps):
        """The grader's own greedy decode of `steps` tokens after `prompt`, with the plain model
        (the reference's loop: a whole forward per token, the last position's argmax)."""
        model = self.model().eval()
        out = prompt
        with torch.no_grad():
            for _ in range(steps):
                logits, _ = model(out)
                out = torch.cat([out, logits[:, -1, :].argmax(dim=-1, keepdim=True)], dim=1)
        return out[0, prompt.shape[1]:].to("cpu", torch.int64)

    def generate_call(self, generate, stream, prompt, steps, name):
        """One call of generate() on a fresh model, watched into `stream`; its tokens saved as
        `name/tokens`."""
        ctx = self.ctx
        model = self.model()
        hook = model.register_forward_hook(lambda m, a, o: ctx.event("forward", grad=bool(_is_grad_enabled())))
        # the counter also sends `autograd {op}` for the first result autograd recorded while
        # generate() ran (what the forward did, not how grad mode looked to the hook above)
        tokens, counter = self.observed(stream, "generate", lambda: generate(model, prompt.clone(), steps=steps),
                                        autograd=True)
        hook.remove()
        if stream == "host.generate":
            self.record_counts("generate", counter)  # shown only
        if type(tokens) not in (list, tuple) or not all(_scalar(ctx, v, integral=True) for v in tokens):
            raise ProbeFailed(
                f"generate() must return a list of Python ints; got {type(tokens).__name__}"
                + (f" of {sorted({type(v).__name__ for v in tokens})}" if type(tokens) in (list, tuple) else "")
            )
        values = [ctx.lib.number(v, integral=True) for v in tokens]
        ctx.save_tensor(f"{name}/tokens", torch.tensor(values, dtype=torch.int64))

    def timing(self):
        """Baseline and submission train() in adjacent pairs (the order alternating), one log
        window per call: each pair's ratio compares two calls made moments apart, so load that
        comes and goes hits both; the median of the pairs' ratios is judged. Timed on the
        grader's cost clock (wall time less the time spent waiting for a CPU), so being
        descheduled on a busy machine lands on neither side. No untimed warm-up pair by default
        (`timing.warmup: 0`): both sides are warm by then, every train() having run in the
        baseline and train probes (their first calls paid the one-off costs).

        Every timed call is made as every other call of train() is (red team 4: a call that
        recognises a model it has seen is one it can be fast in): a fresh model from the
        grader's weights and a fresh optimizer, on batches drawn from os.urandom as it starts
        (the same for both sides of a pair), so no call's result can be known or made ahead of
        it. The timed calls must do the training, or their time says
        nothing: after each call a digest of the model's parameters (per tensor: the sum, and
        a sum weighted by weights drawn as the probe runs) is sent (`timing/params/<who>/<call>`),
        and both sides' must be equal.

        Every timed call is watched as every other call is (the read-back counter, the step
        marks): its read-backs, constants and kept graphs go to `host.timing` tagged with `who`
        and `call`, held to the same contract as the train probe's runs (`timing.max_readbacks`,
        `timing.max_factories`, sent before the first call). The counter is entered before the
        opening clock read and left after the closing one, the same for both sides."""
        t = self.p["timing"]
        clock = self.ctx.cost_clock
        log_every, steps = int(self.p["log_every"]), int(t["steps"])
        variants = ("baseline", "train")
        fns = {who: self.train_fn(who) for who in variants}
        calls = int(t["warmup"]) + int(t["pairs"])  # per side
        per_call = math.ceil(steps / log_every) + int(self.p["readback_allowance"])
        self.ctx.metric("timing.calls", calls)
        self.ctx.metric("timing.max_readbacks", calls * per_call)
        self.ctx.metric("timing.max_factories", calls * (steps - 1))  # fewer than one per step
        count = {who: itertools.count() for who in variants}
        gen = torch.Generator().manual_seed(_draw(2**62))
        weights = {}  # parameter name -> the digest's weights, drawn as the probe runs

        def digest(model):
            rows = []
            for name, p in model.named_parameters():
                d = p.detach().to("cpu", torch.float64).flatten()
                w = weights.get(name)
                if w is None:
                    w = weights[name] = torch.rand(d.numel(), generator=gen, dtype=torch.float64)
                rows.append(torch.stack([d.sum(), (d * w).sum()]))
            return torch.stack(rows)

        def once(who, batches, samples=None):
            """One call of `who`'s train() on a fresh model and optimizer, watched; timed into
            `samples` when given; its parameters' digest sent."""
            k = next(count[who])
            model = self.model()
            opt = self.optimizer(model)
            marks, hook = self.mark_steps(model)
            work, hooks = self.count_work(model, opt, batches[0][0].shape)
            counter = self.counter(who, marks, tag={"who": who, "call": k})
            try:
                self.sync()
                # both sides under the same logging: torch's step loggers at their levels from
                # before the submission existed (red team 27: a handler of the submission's on
                # `torch.autograd.graph` burnt CPU in the baseline's backwards only)
                with counter, self.ctx.lib.loggers_as_before(self.ctx):
                    t0 = clock()
                    logged = fns[who](model, batches, opt, log_every=log_every)
                    self.sync()
                    if samples is not None:
                        samples.append(clock() - t0)
                # a profile left recording runs the other side's next call profiled (red team
                # 44: the baseline's timed calls 1.6x slower under a profile train() started and
                # never stopped); the counter put back the rest of what the call left (`left`)
                for what in self.ctx.lib.leftover_state(profiler=True):
                    self.ctx.event("left", what=what)
            finally:
                hook.remove()
                for h in hooks:
                    h.remove()
            self.ctx.save_tensor(f"timing/params/{who}/{k}", digest(model))
            # and the call did the training, as the contract says (red team 6: parameters copied
            # in from a side run made in an earlier call; the logs skipped in the calls nobody
            # reads): its forwards on batches of the call's shape, its backwards and its
            # optimizer steps, and what it returned, each equal to the baseline's on those batches
            self.ctx.save_tensor(f"timing/work/{who}/{k}", torch.tensor(work, dtype=torch.float64))
            self.ctx.save_tensor(f"timing/logs/{who}/{k}", self.logs_tensor(logged))

        vocab = int(self.ctx.model_cfg["vocab"])

        def drawn():
            """The call's batches, tokens drawn from os.urandom as it starts (the same for both
            sides): not rolls of the grader's batch, whose few offsets a side run in an earlier
            call can all train ahead and serve from a cache (red team 9)."""
            g = torch.Generator().manual_seed(_draw(2**62))
            shape = (steps, *self.idx.shape)
            idx = torch.randint(0, vocab, shape, generator=g, dtype=self.idx.dtype)
            targets = torch.randint(0, vocab, shape, generator=g, dtype=self.targets.dtype)
            return {who: [(idx[k].to(self.device).clone(), targets[k].to(self.device).clone()) for k in range(steps)]
                    for who in variants}

        self.ctx.trace = trace = []
        samples = {who: [] for who in variants}
        try:
            for _ in range(int(t["warmup"])):
                batches = drawn()
                for who in variants:
                    once(who, batches[who])
            for r in range(int(t["pairs"])):
                batches = drawn()
                for who in variants if r % 2 == 0 else variants[::-1]:
                    once(who, batches[who], samples[who])
        finally:
            self.ctx.trace = None
            self.ctx.traces["host.timing"] = trace
        for who in variants:
            self.ctx.metric(f"timing.{who}.median_s", statistics.median(samples[who]))
        ratios = [s / b for s, b in zip(samples["train"], samples["baseline"])]
        self.ctx.metric("timing.ratio", statistics.median(ratios))

    def count_syncs(self):
        """The submission's count_syncs(fn) for a baseline and a submission train(). The grader's
        fn says, as an event sent at once, whether torch's profiler was recording when it began
        and ended (asked of torch itself, not of anything the submission can write). Each fn
        trains `profile_steps` steps, then reads back a value of the grader's own a number of
        times drawn from os.urandom for each fn (`count_syncs_extra_reads`; drawn apart, so
        neither count follows from the other), so no count can
        be known ahead of the call; once count_syncs(fn) has returned, the grader profiles the
        same job itself (`count_syncs.grader.<who>`), out of the submission's reach."""
        ctx = self.ctx
        count_syncs = self.need("count_syncs")
        errors = []
        # drawn for each fn, never the same: neither count follows from the other (a
        # count_syncs() that returns the first count less the syncs it saved is wrong by their
        # difference)
        most = int(self.p["count_syncs_extra_reads"])
        first = _draw(most)
        extras = {"baseline": first, "train": (first + 1 + _draw(most - 1)) % most}
        for who in ("baseline", "train"):
            extra = extras[who]
            ctx.metric(f"count_syncs.extra_reads.{who}", extra)
            inner, marks, hook = self.profile_job(who, extra)

            def fn(inner=inner):
                start = bool(_profiler_enabled())
                try:
                    return inner()
                finally:  # sent even when train() raises
                    ctx.event("call", profiling_start=start, profiling_end=bool(_profiler_enabled()))

            ctx.trace = trace = []
            try:
                # count_syncs() and the train() inside it watched as every call is: its
                # read-backs, constants and kept graphs in the same stream as the `call` events
                with self.counter(who, marks):
                    n = count_syncs(fn)
            except Exception as e:  # the other count still runs
                errors.append(f"count_syncs() raised {type(e).__name__}: {str(e)[:200]}")
                continue
            finally:
                hook.remove()
                ctx.trace = None
                ctx.traces[f"count_syncs.{who}"] = trace
            try:
                n = ctx.lib.number(n, integral=True, what=f"count_syncs()'s result ({who})")
            except ctx.lib.NotANumber as e:
                errors.append(f"{e}: count_syncs() must return how many sync events it counted, an int")
                continue
            ctx.metric(f"count_syncs.{who}", n)
            self.save_logs(who, "count_syncs", inner)
            self.grader_profile(who, extra, key=f"count_syncs.grader.{who}")
        if errors:
            raise ProbeFailed(errors[0])

    def profile(self):
        self.grader_profile("train")


def before_submission(ctx):
    """Before the submission is imported: the baseline's runs and the grader's profile of the
    baseline, recorded at once (nothing kept: the Lesson is dropped when this returns)."""
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    lesson = Lesson(ctx)
    with ctx.probe("baseline"):
        lesson.train_runs("baseline")
        lesson.grader_profile("baseline")


def around_import(ctx):
    """The submission's import, under the read-back counter (events sent nowhere: nothing is
    judged of the import itself): the CPU device boundary holds from before any submission code
    runs, so a `.numpy()` (`__array__`, `__dlpack__`) of a tensor made at import is a copy, not
    an alias through which later reads are free, and a tensor of numpy's memory made there is the
    host's in every later call (the counters share their host table)."""
    return ctx.lib.HostReads(ctx, [ctx.job["submission"]], torch.device(ctx.device))


def run(ctx):
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    lesson = Lesson(ctx)
    for name in ("train", "generate", "timing", "count_syncs", "profile"):
        with ctx.probe(name):
            getattr(lesson, name)()
