"""Lesson 2 scenario: what the grader runs against profile_training(), top_ops() and verify().

Each probe records raw observations (metrics, event traces); verdicts are decided in Rust from
rubrics/02-profiler.yaml. Probes:
  reference  the grader's own profile of the same TinyGPT training step (schedule wait=1,
             warmup=1, active=steps): its ranking by self time (`reference.top`) and its event
             count (`reference.events`; record_shapes/profile_memory do not change the count,
             with_stack adds about 60%)
  profile    the submission's profile_training(train_step, steps=...), called twice. Every call
             of the grader's train_step is a `step` event saying whether a profiler was recording
             (`active`, torch's own flag) and the profiler's phase (`none`, `warmup`, `record`);
             from the returned profile object the grader records its event count and, in its own
             code, the ranking top_ops must reproduce (`profile.runN.topK`)
  top_ops    the submission's top_ops(prof, k) for each k and each run (`top_ops.runN.topK`)
  verify     the submission's verify(op, baseline_step, candidate_step) for three candidates
             whose truth the grader knows: fast_right (¼ of the op's work, same output),
             fast_wrong (¼ of the work, wrong output), slow_right (4× the work, same output).
             Every step call is a `step` event (variant baseline/candidate, whether its input
             equals the first one handed to a step, whether a profiler was recording); each
             profiler recording window is a pair of `timer` reads of its own clock
             (`profiler#N`), so warm-up = whole steps before the first profiled one. The grader
             times the op inside every call itself, so the submission's per-step numbers are
             checked against the very calls it profiled.

Instrument: when this scenario is loaded (before the submission is imported) the profiler's
switches in torch.autograd.profiler (_prepare_profiler, _enable_profiler, _disable_profiler —
used by torch.profiler.profile and torch.autograd.profiler.profile alike) are wrapped to mark the
phase and the recording windows; `profiler.tampered` says whether they were still in place at
the end.
"""
import math

import torch
import torch.autograd.profiler as _autograd_profiler
from safetensors.torch import load_file

from course import Config, TinyGPT

_equal = torch.equal
_allclose = torch.allclose
_profiler_enabled = torch._C._autograd._profiler_enabled
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
ProbeFailed = Exception  # replaced by the driver's class in run()

ROLES = ("baseline", "candidate")
CANDIDATES = ("fast_right", "fast_wrong", "slow_right")


class ProfilerWatch:
    """Wraps the profiler's switches: phase (none → warmup → record → none) and windows."""

    NAMES = ("_prepare_profiler", "_enable_profiler", "_disable_profiler")

    def __init__(self):
        self.ctx = None
        self.phase = "none"
        self.windows = 0
        self.real = {n: getattr(_autograd_profiler, n) for n in self.NAMES}
        self.mine = {}
        for n in self.NAMES:
            wrapper = getattr(self, n)
            wrapper.__func__.__wrapped__ = self.real[n]
            self.mine[n] = wrapper
            setattr(_autograd_profiler, n, wrapper)

    def _mark(self, clock):
        if self.ctx is not None:
            self.ctx.event("timer", clock=clock, v=self.ctx.clock())

    def _prepare_profiler(self, *args, **kwargs):
        out = self.real["_prepare_profiler"](*args, **kwargs)
        self.phase = "warmup"
        return out

    def _enable_profiler(self, *args, **kwargs):
        out = self.real["_enable_profiler"](*args, **kwargs)
        self.phase = "record"
        self.windows += 1
        self._mark(f"profiler#{self.windows}")
        return out

    def _disable_profiler(self, *args, **kwargs):
        self._mark(f"profiler#{self.windows}")
        self.phase = "none"
        return self.real["_disable_profiler"](*args, **kwargs)

    def tampered(self):
        return [n for n in self.NAMES if getattr(_autograd_profiler, n) is not self.mine[n]]


WATCH = ProfilerWatch()  # installed now: the scenario is loaded before the submission


def ranking(prof, cuda):
    """The grader's own ranking of a profile: key_averages() rows by self time (device time on
    CUDA), ProfilerStep rows excluded; stable sort, as sorted(..., reverse=True) orders ties."""
    rows = []
    for e in prof.key_averages():
        if e.key.startswith("ProfilerStep"):
            continue
        t = e.self_device_time_total if cuda else e.self_cpu_time_total
        rows.append({"e": "op", "name": e.key, "self_us": float(t), "calls": int(e.count)})
    rows.sort(key=lambda r: r["self_us"], reverse=True)
    return rows


def number(v):
    if hasattr(v, "item") and getattr(v, "numel", lambda: 1)() == 1:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return v


def boolean(v):
    if hasattr(v, "item") and getattr(v, "numel", lambda: 1)() == 1:
        v = v.item()
    return v if isinstance(v, bool) else None


class Lesson:
    def __init__(self, ctx):
        self.ctx = ctx
        self.device = torch.device(ctx.device)
        self.cuda = self.device.type == "cuda"
        inputs = load_file(ctx.job["inputs"])
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.batch = {
            "idx": inputs["batch/idx"].to(self.device),
            "targets": inputs["batch/targets"].to(self.device),
        }
        self.profiles = {}

    def need(self, name):
        fn = getattr(self.ctx.sub, name, None)
        if not callable(fn):
            raise ProbeFailed(f"exercise.py defines no function `{name}` (see the contract in README.md)")
        return fn

    def activities(self):
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        return acts

    def model(self):
        m = self.ctx.model_cfg
        cfg = Config(
            vocab=m["vocab"],
            seq_len=m["seq_len"],
            d_model=m["d_model"],
            n_heads=m["n_heads"],
            n_blocks=m["n_blocks"],
            dropout=0.0,
        )
        model = TinyGPT(cfg)
        model.load_state_dict(self.weights, strict=True)
        return model.to(self.device).train()

    def train_step(self):
        """One training step (zero_grad, forward + loss, backward) of a fresh model; every call
        is a `step` event with the recording flag and the profiler phase."""
        ctx, model, batch = self.ctx, self.model(), self.batch
        count = [0]

        def train_step():
            k = count[0]
            count[0] += 1
            ctx.event("step", id=k, active=bool(_profiler_enabled()), phase=WATCH.phase)
            model.zero_grad(set_to_none=True)
            _, loss = model(batch["idx"], batch["targets"])
            loss.backward()
            ctx.event("step_done", id=k)
            return loss.detach()

        return train_step

    # -- probes -------------------------------------------------------------------------------
    def reference(self):
        steps = int(self.ctx.params["steps"])
        step = self.train_step()
        sched = torch.profiler.schedule(wait=1, warmup=1, active=steps)
        with torch.profiler.profile(activities=self.activities(), schedule=sched) as prof:
            for _ in range(2 + steps):
                step()
                prof.step()
        self.ctx.metric("reference.events", len(prof.events()))
        self.ctx.traces["reference.top"] = ranking(prof, self.cuda)[:10]

    def profile(self):
        fn = self.need("profile_training")
        ctx = self.ctx
        steps = int(ctx.params["steps"])
        for run in ("run1", "run2"):
            step = self.train_step()
            ctx.trace = trace = []
            try:
                prof = fn(step, steps=steps)
            finally:
                ctx.trace = None
                ctx.traces[f"profile.{run}"] = trace
            if not (hasattr(prof, "key_averages") and hasattr(prof, "events")):
                raise ProbeFailed(
                    f"profile_training() must return the torch.profiler.profile object; got {type(prof).__name__}"
                )
            self.profiles[run] = prof
            ctx.metric(f"profile.{run}.events", len(prof.events()))
            rows = ranking(prof, self.cuda)
            for k in ctx.params["k"]:
                ctx.traces[f"profile.{run}.top{int(k)}"] = rows[: int(k)]
            if self.cuda:
                acts = getattr(prof, "activities", None) or []
                has = torch.profiler.ProfilerActivity.CUDA in acts
                ctx.metric(f"profile.{run}.cuda_activity", "yes" if has else "no")

    def top_ops(self):
        fn = self.need("top_ops")
        if not self.profiles:
            raise ProbeFailed("no profile to rank: profile_training() did not return one")
        for run, prof in self.profiles.items():
            for k in self.ctx.params["k"]:
                k = int(k)
                got = fn(prof, k=k)
                if not isinstance(got, (list, tuple)):
                    raise ProbeFailed(f"top_ops(prof, k={k}) must return a list of dicts; got {type(got).__name__}")
                rows = []
                for item in got:
                    if not isinstance(item, dict):
                        raise ProbeFailed(
                            f"top_ops(prof, k={k}) must return a list of dicts with name, self_time_us, calls; "
                            f"got an item of type {type(item).__name__}"
                        )
                    name = item.get("name")
                    calls = number(item.get("calls"))
                    rows.append(
                        {
                            "e": "op",
                            "name": name if isinstance(name, str) else repr(name)[:80],
                            "self_us": number(item.get("self_time_us")),
                            "calls": int(calls) if calls is not None and math.isfinite(calls) and calls == int(calls) else None,
                        }
                    )
                self.ctx.traces[f"top_ops.{run}.top{k}"] = rows

    def verify(self):
        fn = self.need("verify")
        ctx = self.ctx
        v = ctx.params["verify"]
        op, rows, dim, work = str(v["op"]), int(v["rows"]), int(v["dim"]), int(v["work"])
        gen = torch.Generator().manual_seed(ctx.seed + 2)
        W = (torch.randn(dim, dim, generator=gen) / math.sqrt(dim)).to(self.device)
        WT = W.t()
        cuda = self.cuda

        def make_input():
            """A new random input on every call (make one and feed it to both steps)."""
            return torch.randn(rows, dim, generator=gen).to(self.device)

        def timed(x, w, acc):
            """The named op, timed by the grader (its own clock; CUDA events on the GPU)."""
            if cuda:
                a, b = _Event(enable_timing=True), _Event(enable_timing=True)
                a.record()
                y = x @ w
                b.record()
                acc.append((a, b))
            else:
                t0 = ctx.clock()
                y = x @ w
                acc.append(ctx.clock() - t0)
            return y

        def repeat(n, w=W):
            def body(x, acc):
                for _ in range(n):
                    y = timed(x, w, acc)
                return torch.tanh(y)

            return body

        bodies = {
            "baseline": repeat(work),
            "fast_right": repeat(1),
            "fast_wrong": repeat(1, WT),  # x @ W.T: same cost as x @ W, wrong answer
            "slow_right": repeat(work * work),
        }

        for cand in CANDIDATES:
            state = {"next": 0, "ref": None, "profiled": {r: [] for r in ROLES}}

            def wrap(role, body):
                def step(x):
                    k = state["next"]
                    state["next"] += 1
                    if state["ref"] is None and isinstance(x, torch.Tensor):
                        state["ref"] = x.detach().clone()
                    ref = state["ref"]
                    same = (
                        isinstance(x, torch.Tensor)
                        and x.shape == ref.shape
                        and x.device == ref.device
                        and _equal(x, ref)
                    )
                    active = bool(_profiler_enabled())
                    ctx.event("step", id=k, variant=role, inputs={"x": "batch" if same else "other"}, active=active)
                    acc = []
                    out = body(x, acc)
                    if cuda:
                        _synchronize()
                        secs = sum(a.elapsed_time(b) for a, b in acc) / 1e3
                    else:
                        secs = sum(acc)
                    ctx.event("step_done", id=k, op_us=secs * 1e6)
                    if active:
                        state["profiled"][role].append(secs * 1e6)
                    return out

                step.make_input = make_input
                return step

            baseline_step = wrap("baseline", bodies["baseline"])
            candidate_step = wrap("candidate", bodies[cand])
            ctx.trace = trace = []
            try:
                result = fn(op, baseline_step, candidate_step)
            finally:
                ctx.trace = None
                ctx.traces[f"verify.{cand}"] = trace
            if not isinstance(result, dict):
                raise ProbeFailed(f"verify() must return a dict; got {type(result).__name__}")
            for key in ("baseline_us", "candidate_us"):
                x = number(result.get(key))
                ctx.metric(f"verify.{cand}.{key}", x if x is not None else f"not a number: {result.get(key)!r}"[:80])
            for key in ("faster", "outputs_close"):
                b = boolean(result.get(key))
                ctx.metric(f"verify.{cand}.{key}", b if b is not None else f"not a bool: {result.get(key)!r}"[:80])
            for role in ROLES:
                seen = state["profiled"][role]
                ctx.metric(
                    f"verify.{cand}.observed.{role}_us",
                    sum(seen) / len(seen) if seen else f"no {role}_step call ran while a profiler recorded",
                )


def run(ctx):
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    WATCH.ctx = ctx
    lesson = Lesson(ctx)
    for name in ("reference", "profile", "top_ops", "verify"):
        with ctx.probe(name):
            getattr(lesson, name)()
    tampered = WATCH.tampered()
    ctx.metric("profiler.tampered", ", ".join(tampered) if tampered else "none")
