"""Lesson 6 scenario: what the grader runs against a submission's train(), generate() and
count_syncs(), next to the grader's own baseline (exercises/06-sync/baseline.py, loaded by path).

Each probe records raw observations; verdicts are decided in Rust from rubrics/06-sync.yaml.
  train     baseline and submission train identically initialised models on the same batches,
            twice (`short` and `long` runs): logged losses and final parameters of both, and every
            host read-back and tensor-from-Python-values each made (`ctx.lib.HostReads`: traces
            `host.baseline.<run>` / `host.train.<run>`, events `readback {op, bytes, line}` and
            `factory {op, line}`)
  generate  the submission's greedy decode from the prompt idx[0, :seq_len/4], seq_len/2 new
            tokens (the grader decodes the same in libtorch: `reference/greedy/tokens`), its
            read-backs (`host.generate`) and device-to-host bytes
  timing    the grader times baseline and submission train() on the same batches: warm-up, sync,
            interleaved repeats, median
  profile   the grader's own torch.profiler count of `aten::_local_scalar_dense` for one baseline
            and one submission train(), and what the submission's count_syncs() says for each
"""
import importlib.util
import math
import os
import statistics

import torch
from safetensors.torch import load_file
from torch.profiler import ProfilerActivity, profile as _profile

from course import Config, TinyGPT

SYNC_EVENTS = ("aten::_local_scalar_dense",)
_synchronize = torch.cuda.synchronize
ProbeFailed = Exception  # replaced by the driver's class in run()


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
        inputs = load_file(ctx.job["inputs"])
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.idx = inputs["batch/idx"].to(self.device)
        self.targets = inputs["batch/targets"].to(self.device)
        self.baseline = _load_baseline()
        self.files = {
            "baseline": [self.baseline.__file__],
            "train": [ctx.sub.__file__],
            "generate": [ctx.sub.__file__],
        }

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
        return torch.optim.SGD(model.parameters(), lr=float(self.p["lr"]), momentum=float(self.p["momentum"]))

    def batches(self, steps):
        """`steps` batches, all made from the grader's batch (step k: tokens rolled by k)."""
        return [(self.idx.roll(k, dims=1).clone(), self.targets.roll(k, dims=1).clone()) for k in range(steps)]

    def sync(self):
        if self.device.type == "cuda":
            _synchronize()

    def observed(self, stream, who, fn):
        """fn() under the grader's read-back counter for `who`'s file; events into `stream`."""
        ctx = self.ctx
        counter = ctx.lib.HostReads(ctx, self.files[who], self.device)
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

    # -- probes -------------------------------------------------------------------------------
    def train(self):
        ctx = self.ctx
        log_every = int(self.p["log_every"])
        train = self.need("train")
        runs = (("short", int(self.p["short_steps"])), ("long", int(self.p["long_steps"])))
        errors = []  # every run is observed before a bad return value fails the probe
        for run, steps in runs:
            for who, fn in (("baseline", self.baseline.train), ("train", train)):
                model = self.model()
                opt = self.optimizer(model)
                batches = self.batches(steps)
                logged, counter = self.observed(
                    f"host.{who}.{run}", who, lambda: fn(model, batches, opt, log_every=log_every)
                )
                self.record_counts(f"{who}.{run}", counter)
                for name, p in model.named_parameters():
                    ctx.save_tensor(f"params/{who}/{run}/{name}", p)
                if not isinstance(logged, (list, tuple)) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in logged
                ):
                    kinds = sorted({type(v).__name__ for v in logged}) if isinstance(logged, (list, tuple)) else []
                    errors.append(
                        f"train() must return a list of Python floats; got {type(logged).__name__}"
                        + (f" of {', '.join(kinds)}" if kinds else "")
                        + " (a tensor in the list only hides its read-back)"
                    )
                    continue
                ctx.metric(f"{who}.{run}.logs", len(logged))
                ctx.save_tensor(f"losses/{who}/{run}/logged", torch.tensor([float(v) for v in logged], dtype=torch.float64))
            ctx.metric(f"{run}.expected_logs", math.ceil(steps / log_every))
        if errors:
            raise ProbeFailed(errors[0])

    def generate(self):
        ctx = self.ctx
        T = int(ctx.model_cfg["seq_len"])
        prompt_len, steps = T // 4, T // 2  # the reference decodes the same (src/reference/)
        prompt = self.idx[:1, :prompt_len].clone()
        generate = self.need("generate")
        model = self.model()
        tokens, counter = self.observed("host.generate", "generate", lambda: generate(model, prompt.clone(), steps=steps))
        self.record_counts("generate", counter)
        ctx.metric("generate.token_bytes", steps * 8)
        base = self.baseline.generate(self.model(), prompt.clone(), steps=steps)
        ctx.save_tensor("decode/baseline/tokens", torch.tensor(base, dtype=torch.int64))
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in tokens):
            raise ProbeFailed(
                f"generate() must return a list of Python ints; got {type(tokens).__name__}"
                + (f" of {sorted({type(v).__name__ for v in tokens})}" if isinstance(tokens, (list, tuple)) else "")
            )
        ctx.save_tensor("decode/submission/tokens", torch.tensor(list(tokens), dtype=torch.int64))

    def timing(self):
        t = self.p["timing"]
        clock = self.ctx.clock
        log_every = int(self.p["log_every"])
        variants = ("baseline", "train")
        setups = {}
        for who in variants:
            model = self.model()
            setups[who] = (self.train_fn(who), model, self.optimizer(model), self.batches(int(t["steps"])))

        def once(who):
            fn, model, opt, batches = setups[who]
            return fn(model, batches, opt, log_every=log_every)

        for who in variants:
            for _ in range(int(t["warmup"])):
                once(who)
        samples = {who: [] for who in variants}
        for r in range(int(t["repeats"])):
            for who in variants if r % 2 == 0 else variants[::-1]:  # interleaved: drift hits both
                self.sync()
                t0 = clock()
                once(who)
                self.sync()
                samples[who].append(clock() - t0)
        for who in variants:
            self.ctx.metric(f"timing.{who}.median_s", statistics.median(samples[who]))

    def profile(self):
        ctx = self.ctx
        count_syncs = self.need("count_syncs")
        steps = int(self.p["profile_steps"])
        log_every = int(self.p["log_every"])
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        for who in ("baseline", "train"):
            train = self.train_fn(who)

            def job():
                model = self.model()
                opt = self.optimizer(model)
                batches = self.batches(steps)
                return lambda: train(model, batches, opt, log_every=log_every)

            run = job()
            with _profile(activities=activities) as prof:
                run()
            # the profiler's raw events (what prof.events() is built from, without its slow
            # Python post-processing)
            events = prof.profiler.kineto_results.events()
            ctx.metric(f"profile.grader.{who}", sum(1 for e in events if e.name() in SYNC_EVENTS))
            calls = [0]
            inner = job()

            def fn():
                calls[0] += 1
                return inner()

            n = count_syncs(fn)
            if hasattr(n, "item") and getattr(n, "numel", lambda: 0)() == 1:
                n = n.item()
            if isinstance(n, bool) or not isinstance(n, int):
                raise ProbeFailed(f"count_syncs() must return an int; got {n!r}")
            ctx.metric(f"profile.student.{who}", n)
            ctx.metric(f"profile.calls.{who}", calls[0])


def run(ctx):
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    lesson = Lesson(ctx)
    for name in ("train", "generate", "timing", "profile"):
        with ctx.probe(name):
            getattr(lesson, name)()
