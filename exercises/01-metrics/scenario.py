"""Lesson 1 scenario: what the grader runs against a submission's measure(), summarize() and
COMPARABLE_ACROSS_SEQ_LEN.

Each probe records raw observations (metrics, list metrics, event traces); verdicts are decided in
Rust from rubrics/01-metrics.yaml. Probes:
  sim        measure() on a simulated asynchronous device (`ctx.lib.SimDevice`) whose per-step
             costs the grader draws from this process's secret (not the seed, which torch hands
             back): a warm-up spike on the first calls, a few slow outliers among the timed
             steps, every step's cost different. The submission's
             clocks read the device's virtual clock, so the true seconds per step of every timed
             window is known exactly (`sim.<run>.truth`), and so is what the usual mistakes would
             return on the same device (`sim.<run>.if_*`). Two configurations (a: one step per
             window; b: several), each measured twice on a fresh device with the same costs.
  real       measure() on the real TinyGPT training step (zero_grad, forward + loss, backward)
             — a step is a call of the step() handed over: a forward of the model outside one
             is recorded as `outside_step`, never as a step —
             twice, interleaved with the grader's own measurement of the same step (warm-up, sync,
             one-step windows) before, between and after the two calls; each call's median is
             compared with the grader's blocks around it (`real.run<k>.grader_*`: the slowest
             wall time, and the least thread CPU time of a step, a floor for any wall timing).
  summarize  summarize() on hidden sample sets drawn from the seed (odd and even counts, ties,
             outliers, one sample, two samples) and on the real samples. Only inputs and answers
             are recorded; Rust recomputes median, p90, steps/s and tokens/s itself.
  shapes     steps/s and tokens/s at the grader's shape, at seq_len ÷ 8 and at batch ÷ 4, measured
             with the submission's measure() (interleaved rounds, each call traced as
             `shapes.r<round>.<shape>`) and summarize().
  answer     COMPARABLE_ACROSS_SEQ_LEN.

Out of the submission's reach (issue 17): `before_submission(ctx)` draws the simulated costs and
the hidden sample sets and records the truth, what the usual mistakes would return, and the hidden
inputs before the submission is imported (the driver calls it then; older drivers get it called at
the start of `run`). The probes draw the same values again (the seed; the process's secret for
the simulated costs) to run them; nothing recorded is kept. Every sample a call returns is also held, in Rust, to the window it was rebuilt
from (the clock values the driver recorded), so a sample scaled by a patched clock, halved or made
up fails whatever device it was taken on.

The same face on both devices (issue 19): `step` and `sync` are plain functions of the same shape
on the simulated device and the real one (`_face`), and the virtual clock starts at the real
perf_counter's reading, so a submission cannot behave only while simulated. Each measure() call
gets its own pair, valid while that call runs (`lib.Lease`): one kept and called in a later call
does nothing and fails the integrity gate, so a call's trace holds only its own steps.
"""
import contextlib
import gc
import math
import random
import statistics
import time

import torch

from course import Config

_median = statistics.median  # captured before the submission is imported
_thread_time = time.thread_time  # CPU time of this thread: a floor for any wall-clock timing
_gc_disable, _gc_enable = gc.disable, gc.enable
_synchronize = torch.cuda.synchronize
ProbeFailed = Exception  # replaced by the driver's class in run()

SUMMARY_KEYS = ("median_s", "p90_s", "steps_per_s", "tokens_per_s")


_lib = None  # grade_lib (`ctx.lib`), set by before_submission / run: `number` reads every number
_PREPARED = False  # before_submission ran (by the driver, before the submission was imported)
# What the simulated costs are drawn from: a secret of this process (os.urandom, when the scenario
# is loaded, before the import), not the seed, which torch hands back (`torch.initial_seed()`)
_SIM_KEY = random.SystemRandom().getrandbits(128)


def _number(x, what):
    """A float from a number the submission returned (`ctx.lib.number`: any real number type)."""
    try:
        return float(_lib.number(x, what=what))
    except _lib.NotANumber as e:
        raise ProbeFailed(f"{e}; expected a number of seconds") from None


def numbers(what, value):
    """A list of floats from what the submission returned, or ProbeFailed saying what it was."""
    value = _lib.plain(value, what, ProbeFailed)
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise ProbeFailed(f"{what} returned {type(value).__name__}; expected a list of floats (seconds per step)")
    out = [_number(v, f"{what}[{i}]") for i, v in enumerate(value)]
    if not all(math.isfinite(v) for v in out):
        raise ProbeFailed(f"{what} returned non-finite values: {out[:6]}")
    return out


def _face(work, wait):
    """`step()` and `sync()` as measure() gets them, on the simulated device and the real one
    alike: plain functions of one shape (one free variable each, no defaults, no bound method)."""

    def step():
        work()

    def sync():
        wait()

    return step, sync


def _busy(ctx, fn, kind, lease):
    """`fn` stamped on the grader's cost clock (wall time less run-queue wait): a `call {fn, c0,
    c1}` event when it returns. A timed window's seconds are the work the grader saw in it (these
    calls), not idle time the submission added after the last one (measurement.rs, `idle`).
    `lease` is the one measure() call it is handed to (`lib.Lease`): kept and called in another
    call, it does nothing and the integrity gate names it, so the steps a call's trace holds are
    that call's own (issue 38, round 4: the simulated step kept from the first call)."""
    handed = ctx.lib.handed

    def run():
        # none of the submission's code runs inside (a hook, a finalizer: the collector is off
        # until after the closing stamp, so a collection it provoked falls outside the call)
        with handed(ctx, kind, lease):
            return fn()

    return run


def _draws(ctx, params):
    """Everything the grader draws, in draw order: per sim configuration its costs (and w, r, s),
    and the hidden summarize cases with their batch and seq_len. Called before the submission is
    imported (to record the answers) and again by the probes (to run them). The simulated costs
    and the hidden sets come from this process's secret (`_SIM_KEY`), not from the seed: the seed
    is torch's initial seed (`torch.initial_seed()`), readable by anyone, and the recipe is public
    (issue 38, round 4: the truth replayed from the seed)."""
    sim_rng = random.Random(f"{_SIM_KEY}:sim")
    sim = {}
    for cfg in ("a", "b"):
        w, r, s = Lesson.config(params["sim"][cfg])
        sim[cfg] = (w, r, s, Lesson.draw_costs(ctx.lib.ticks, sim_rng, w, r, s))
    # the hidden sets too, from this process's secret: from the seed, a summarize() could replay
    # them at import and hand back answers queued in call order without reading its arguments
    # (red team 35's `summarize_replay`)
    sum_rng = random.Random(f"{_SIM_KEY}:summarize")
    cases = {}
    for name, samples in Lesson.hidden_cases(sum_rng).items():
        batch = sum_rng.choice([1, 2, 4, 8, 16, 32])
        seq_len = sum_rng.choice([16, 128, 512, 1024, 2048])
        cases[name] = (samples, batch, seq_len)
    return sim, cases


def before_submission(ctx):
    """The grader's answers, recorded before the submission exists: the simulated device's truth
    and what the usual mistakes would return on it, and the hidden sample sets summarize() gets.
    Nothing is kept (locals only)."""
    global _lib, _PREPARED
    _lib = ctx.lib
    _PREPARED = True
    sim, cases = _draws(ctx, ctx.params)
    host = ctx.lib.SimDevice(ctx).host  # the launch overhead an unsynced window measures
    for cfg, (w, r, s, costs) in sim.items():
        window = lambda first, i: costs[first + i * s: first + (i + 1) * s]  # noqa: E731
        truth = [sum(window(w, i)) / s for i in range(r)]
        for run in (1, 2):
            name = f"sim.{cfg}{run}"
            ctx.metric(f"{name}.truth", truth)
            # what the usual mistakes return on this very device
            ctx.metric(f"{name}.if_no_sync", [host] * r)
            ctx.metric(f"{name}.if_no_warmup", [sum(window(0, i)) / s for i in range(r)])
            ctx.metric(f"{name}.if_single", [sum(costs[w: w + r * s]) / (r * s)])
            if s > 1:
                ctx.metric(f"{name}.if_not_divided", [sum(window(w, i)) for i in range(r)])
                ctx.metric(f"{name}.if_one_step", [costs[w + i] for i in range(r)])
    for name, (samples, batch, seq_len) in cases.items():
        ctx.metric(f"summarize.{name}.samples", list(samples))
        ctx.metric(f"summarize.{name}.batch", batch)
        ctx.metric(f"summarize.{name}.seq_len", seq_len)


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
        # a step is a call of the step() the grader handed over (issue 38): a forward of the model
        # outside one is no step (`outside_step`), whatever the submission ran it on
        self.calls_running = 0
        self.observer = ctx.lib.StepObserver(
            ctx, self.batch, variant=lambda rec: "real", inside=lambda: self.calls_running > 0
        )
        self.real_samples = None

    def need(self, name):
        fn = getattr(self.ctx.sub, name, None)
        if not callable(fn):
            raise ProbeFailed(f"exercise.py defines no function `{name}` (see the contract in README.md)")
        return fn

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
        return self.ctx.lib.observed_model(self.ctx, cfg, self.weights, self.device, self.observer)

    @contextlib.contextmanager
    def step_call(self):
        """The span of one call of the handed-over step(): the forwards in it are steps."""
        self.calls_running += 1
        try:
            yield
        finally:
            self.calls_running -= 1

    def clean(self, where):
        """Fail when global state (a saved-tensors hook, a mode, grad mode, …) differs from before
        the submission was imported; it is put back first (`lib.leftover_state`)."""
        left = self.ctx.lib.leftover_state(profiler=True)
        if left:
            raise ProbeFailed(
                f"before {where}: the submission left {'; '.join(left)} (a call of the submission must "
                "leave torch's global state as it found it: see the contract in README.md)"
            )

    def call(self, what, fn, *args, **kwargs):
        """One call of the submission's `fn`, between two checks that it found and left the global
        state the grader's own work runs under as it was before the import."""
        self.clean(what)
        out = fn(*args, **kwargs)
        left = self.ctx.lib.leftover_state(profiler=True)
        if left:
            raise ProbeFailed(
                f"{what} left {'; '.join(left)} behind when it returned: a call of the submission must "
                "leave torch's global state as it found it (see the contract in README.md)"
            )
        return out

    def sync_device(self):
        if self.device.type == "cuda":
            _synchronize()

    def traced(self, name, fn):
        """Run fn() with the events it causes recorded as trace `name`."""
        ctx = self.ctx
        ctx.trace = trace = []
        try:
            return fn()
        finally:
            ctx.trace = None
            ctx.traces[name] = trace

    @staticmethod
    def config(p):
        w, r, s = int(p["warmup"]), int(p["repeats"]), int(p["steps_per_repeat"])
        if int(p["calls"]) != w + r * s:
            raise RuntimeError(f"exercise.yaml: calls must be warmup + repeats * steps_per_repeat in {p}")
        return w, r, s

    # -- sim ----------------------------------------------------------------------------------
    @staticmethod
    def draw_costs(ticks, rng, w, r, s, extra=64):
        """Seconds of device work of each step() call, in whole ticks: jittered, a warm-up spike on
        the first calls (all inside the warm-up), one slow step in a minority of the windows."""
        base = rng.uniform(2e-3, 6e-3)
        costs = [ticks(base * rng.uniform(0.9, 1.1)) for _ in range(w + r * s + extra)]
        for k in range(rng.randint(1, w)):
            costs[k] = ticks(costs[k] * rng.uniform(10, 30))
        for i in rng.sample(range(r), max(1, (r - 1) // 3)):
            k = w + i * s + rng.randrange(s)
            costs[k] = ticks(costs[k] * rng.uniform(4, 8))
        return costs

    def sim(self):
        """measure() on the simulated device; the truth was recorded by before_submission."""
        ctx = self.ctx
        measure = self.need("measure")
        sim, _ = _draws(ctx, ctx.params)
        # every device's clock starts at the real perf_counter's reading when the probe began
        # (one value for all: a `_ns` clock rounds base + time the same way on every device, so
        # measuring again on a fresh device gives identical samples)
        base = ctx.clock()
        for cfg, (w, r, s, costs) in sim.items():
            for run in (1, 2):
                name = f"sim.{cfg}{run}"
                device = ctx.lib.SimDevice(ctx, base=base)

                def work(device=device, costs=costs):
                    k = device.calls
                    device.work(costs[k] if k < len(costs) else costs[-1], variant="sim")

                def wait(device=device):
                    device.sync()

                lease = ctx.lib.Lease("step()/sync()", "measure()")
                step, sync = _face(_busy(ctx, work, "step", lease), _busy(ctx, wait, "sync", lease))

                def run_measure(device=device, lease=lease, step=step, sync=sync, w=w, r=r, s=s):
                    with device, lease:
                        return measure(step, sync, warmup=w, repeats=r, steps_per_repeat=s)

                samples = self.traced(name, lambda: self.call("measure()", run_measure))
                ctx.metric(f"{name}.samples", numbers("measure()", samples))
                ctx.metric(f"{name}.calls", device.calls)

    # -- real ---------------------------------------------------------------------------------
    def real(self):
        ctx = self.ctx
        measure = self.need("measure")
        p = ctx.params["real"]
        w, r, s = self.config(p)
        model = self.model()
        idx, targets = self.batch["idx"], self.batch["targets"]

        def work():
            with self.step_call():
                model.zero_grad(set_to_none=True)
                _, loss = model(idx, targets)
                loss.backward()

        def wait():
            ctx.event("sync")
            self.sync_device()

        def handed():
            """step() and sync() for one measure() call, and the call's lease (`_busy`)."""
            lease = ctx.lib.Lease("step()/sync()", "measure()")
            return lease, _face(_busy(ctx, work, "step", lease), _busy(ctx, wait, "sync", lease))

        def one_call(lease, step, sync):
            with lease:
                return measure(step, sync, warmup=w, repeats=r, steps_per_repeat=s)

        sealed = ctx.lib.sealed

        def grader_block():  # the grader's own measurement of the same step: sync, one step each
            # never under state a submission's call left behind (a hook that slows the grader's
            # steps), nor with its garbage collected (a `__del__` of its objects) inside: the
            # collector is off for the block (no `gc.collect()` before it: 80 ms a block here)
            self.clean("the grader's own measurement")
            _gc_disable()
            out = []  # (wall seconds, CPU seconds of this thread)
            try:
                for _ in range(int(p["grader_repeats"])):
                    self.sync_device()
                    t0, c0 = ctx.clock(), _thread_time()
                    with sealed(ctx):  # as the submission's step() runs it (`_busy`)
                        work()
                    self.sync_device()
                    out.append((ctx.clock() - t0, _thread_time() - c0))
            finally:
                _gc_enable()
            return out

        for _ in range(w):
            work()
        # G0, run1, G1, run2, G2: each run is compared with the grader's blocks right around it,
        # so drift in the machine's speed over the probe cancels out
        blocks = [grader_block()]
        for run in (1, 2):
            name = f"real.run{run}"
            lease, (step, sync) = handed()
            samples = numbers(
                "measure()", self.traced(name, lambda: self.call("measure()", one_call, lease, step, sync))
            )
            ctx.metric(f"{name}.samples", samples)
            if samples:
                ctx.metric(f"{name}.median_s", _median(samples))
            if run == 1:
                self.real_samples = samples
            blocks.append(grader_block())
            around = blocks[-2] + blocks[-1]
            ctx.metric(f"{name}.grader_median_s", _median([w for w, _ in around]))
            ctx.metric(f"{name}.grader_max_s", max(w for w, _ in around))
            # no wall-clock timing of a step can be shorter than the CPU time the step takes
            ctx.metric(f"{name}.grader_cpu_min_s", min(c for _, c in around))

    # -- summarize ----------------------------------------------------------------------------
    def summary(self, prefix, samples, batch, seq_len, record=True):
        """summarize() on `samples`; its inputs are recorded first unless before_submission did."""
        summarize = self.need("summarize")
        ctx = self.ctx
        if record:
            ctx.metric(f"{prefix}.samples", list(samples))
            ctx.metric(f"{prefix}.batch", batch)
            ctx.metric(f"{prefix}.seq_len", seq_len)
        out = ctx.lib.plain(self.call("summarize()", summarize, list(samples), batch=batch, seq_len=seq_len),
                            "summarize()'s result", ProbeFailed)
        if not isinstance(out, dict):
            raise ProbeFailed(f"summarize() returned {type(out).__name__}; expected a dict with {', '.join(SUMMARY_KEYS)}")
        missing = [k for k in SUMMARY_KEYS if k not in out]
        if missing:
            raise ProbeFailed(f"summarize() returned no {', '.join(missing)} (keys: {sorted(map(str, out))})")
        for k in SUMMARY_KEYS:
            ctx.metric(f"{prefix}.{k}", _number(out[k], f"summarize()['{k}']"))
        return out

    @staticmethod
    def hidden_cases(rng):
        """Sample sets the submission has never seen (seconds per step). Their sizes reach past
        the real (3) and shapes (12) probes': every grading has a set of 13 or more, and every other
        one a set of 4 (red team 35's `summarize_untested` was right only for the sizes the grader
        used, 1–3 and 5–12, and passed)."""
        u = lambda: rng.uniform(1e-3, 2e-2)  # noqa: E731
        base = rng.uniform(3e-3, 8e-3)
        ties = sorted(round(rng.uniform(1e-3, 2e-2), 4) for _ in range(3))  # middle value 4×
        n_even = rng.choice([4, rng.randrange(14, 41, 2)])
        n_odd = rng.randrange(13, 40, 2) if n_even == 4 else rng.randrange(3, 12, 2)
        cases = {
            "odd": [u() for _ in range(n_odd)],
            "even": [u() for _ in range(n_even)],
            "ties": [ties[0]] * 2 + [ties[1]] * 4 + [ties[2]] * 2,
            "outliers": [base * rng.uniform(0.95, 1.05) for _ in range(rng.randint(9, 30))],
            "single": [u()],
            "two": [u(), u()],
        }
        for k in rng.sample(range(len(cases["outliers"])), 2):
            cases["outliers"][k] *= rng.uniform(10, 50)
        for v in cases.values():
            rng.shuffle(v)
        return cases

    def summarize(self):
        _, cases = _draws(self.ctx, self.ctx.params)  # recorded by before_submission
        for name, (samples, batch, seq_len) in cases.items():
            self.summary(f"summarize.{name}", samples, batch, seq_len, record=False)
        if self.real_samples:
            m = self.ctx.model_cfg
            self.summary("real.summary", self.real_samples, m["batch"], m["seq_len"])
        else:
            raise ProbeFailed("no samples from the `real` probe to summarize")

    # -- shapes -------------------------------------------------------------------------------
    def shapes(self):
        ctx = self.ctx
        measure = self.need("measure")
        self.need("summarize")
        p = ctx.params["shapes"]
        B, T = ctx.model_cfg["batch"], ctx.model_cfg["seq_len"]
        shapes = {"base": (B, T), "short": (B, max(1, T // 8)), "small": (max(1, B // 4), T)}
        model = self.model()

        def step_for(b, t):
            idx = self.batch["idx"][:b, :t].contiguous()
            targets = self.batch["targets"][:b, :t].contiguous()

            def step():
                with self.step_call():
                    model.zero_grad(set_to_none=True)
                    _, loss = model(idx, targets)
                    loss.backward()

            return step

        def wait():
            ctx.event("sync")
            self.sync_device()

        w, r, rounds = int(p["warmup"]), int(p["repeats"]), int(p["rounds"])
        if int(p["calls"]) != rounds * len(shapes) * (w + r):
            raise RuntimeError(f"exercise.yaml: shapes.calls must be rounds × 3 × (warmup + repeats) in {p}")
        bodies = {k: step_for(*bt) for k, bt in shapes.items()}

        def one_call(k):
            """measure() on shape k, with its own step() and sync() (`_busy`: a step kept from
            another call, another shape's say, does nothing and the gate names it)."""
            lease = ctx.lib.Lease("step()/sync()", "measure()")
            step = _face(_busy(ctx, bodies[k], "step", lease), wait)[0]
            sync = _face(wait, _busy(ctx, wait, "sync", lease))[1]
            with lease:
                return measure(step, sync, warmup=w, repeats=r, steps_per_repeat=1)

        samples = {k: [] for k in shapes}
        names = list(shapes)
        for rnd in range(rounds):
            for k in names[rnd % len(names):] + names[: rnd % len(names)]:  # rotate: drift hits all
                name = f"shapes.r{rnd}.{k}"
                got = numbers("measure()", self.traced(name, lambda: self.call("measure()", one_call, k)))
                ctx.metric(f"{name}.samples", got)
                samples[k] += got
        for k, (b, t) in shapes.items():
            self.summary(f"shapes.{k}", samples[k], b, t)

    # -- answer -------------------------------------------------------------------------------
    def answer(self):
        if not hasattr(self.ctx.sub, "COMPARABLE_ACROSS_SEQ_LEN"):
            raise ProbeFailed("exercise.py defines no COMPARABLE_ACROSS_SEQ_LEN")
        value = self.ctx.sub.COMPARABLE_ACROSS_SEQ_LEN
        self.ctx.metric("answer.comparable", value if isinstance(value, str) else repr(value))


def run(ctx):
    global ProbeFailed, _lib
    ProbeFailed = ctx.ProbeFailed
    _lib = ctx.lib
    if not _PREPARED:  # a driver without the before_submission hook
        before_submission(ctx)
    lesson = Lesson(ctx)
    for name in ("sim", "real", "summarize", "shapes", "answer"):
        with ctx.probe(name):
            getattr(lesson, name)()
