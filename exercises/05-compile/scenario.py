"""Lesson 5 scenario: what the grader runs against a submission's time_calls(), break_even() and
compile_for_shapes().

Each probe records raw observations (metrics, event traces, tensors); verdicts are decided in Rust
from rubrics/05-compile.yaml. Probes:
  sim         time_calls() on a simulated device (`ctx.lib.SimDevice`, exact virtual clock): the
              first call carries a known compile cost (blocking host time), every later call a known
              device cost, all drawn per run. Records the truth, what known mistakes would return
              on the same device (to name them), the submission's answer, and the event trace.
  break_even  break_even() on hidden cases drawn per run (values are multiples of 2^-10 s, so the
              arithmetic is exact): ordinary, equality at the boundary, compiled step equal to or
              slower than eager, first call no dearer than eager. Rust computes the answers.
  real        the grader torch.compile()s TinyGPT's forward (inference) and has time_calls()
              measure eager and compiled; the grader's own clock times the same calls; outputs are
              saved for the tch reference; break_even() on the measured numbers is one more case.
  shapes      compile_for_shapes() over seq lens drawn per run: dynamo's counters before/after
              (graphs compiled, graph breaks) and every output against eager's.
"""
import random
import signal
import statistics

import torch
from safetensors.torch import load_file

from course import Config, TinyGPT

_synchronize = torch.cuda.synchronize
ProbeFailed = Exception  # replaced by the driver's class in run()
BREAK_EVEN_LIMIT_S = 5.0  # one break_even() call may take this long (a loop that never ends)
UNIT = 2.0 ** -10  # hidden break-even values are whole multiples of this (exact in binary)


class _Hang(Exception):
    pass


def _dynamo_counts():
    """Graphs compiled, frames compiled and graph breaks so far (torch._dynamo's own counters)."""
    from torch._dynamo.utils import counters

    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "frames": int(counters["frames"]["ok"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


class Lesson:
    def __init__(self, ctx):
        self.ctx = ctx
        self.device = torch.device(ctx.device)
        inputs = load_file(ctx.job["inputs"])
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.idx = inputs["batch/idx"].to(self.device)
        self.rng = random.Random(ctx.seed)

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
        model = TinyGPT(cfg)
        model.load_state_dict(self.weights, strict=True)
        return model.to(self.device).eval()

    def sync(self):
        if self.device.type == "cuda":
            _synchronize()

    @staticmethod
    def timings(result, what):
        """`(first_s, steady_s)` from time_calls()'s result, or ProbeFailed saying what came back."""
        if not isinstance(result, dict) or "first_s" not in result or "steady_s" not in result:
            got = f"a dict with keys {sorted(result)}" if isinstance(result, dict) else type(result).__name__
            raise ProbeFailed(f"{what} must return {{'first_s': float, 'steady_s': [float, ...]}}; got {got}")
        first, steady = result["first_s"], result["steady_s"]
        try:
            first = float(first)
            steady = [float(s) for s in steady]
        except (TypeError, ValueError):
            raise ProbeFailed(
                f"{what}: first_s must be a number and steady_s a list of numbers; got "
                f"{type(first).__name__} and {type(steady).__name__}"
            ) from None
        return first, steady

    def ask_break_even(self, fn, eager, first, step):
        """The submission's answer as recorded: an int, None, or a string saying what came instead."""

        def hang(*_):
            raise _Hang()

        old = signal.signal(signal.SIGALRM, hang)
        signal.setitimer(signal.ITIMER_REAL, BREAK_EVEN_LIMIT_S)
        try:
            out = fn(eager_step_s=eager, compiled_first_s=first, compiled_step_s=step)
        except _Hang:
            return f"no answer within {BREAK_EVEN_LIMIT_S:g} s (a loop that never stops?)"
        except Exception as e:  # noqa: BLE001 — the submission's error is the observation
            return f"raised {type(e).__name__}: {e}"[:200]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if out is None:
            return None
        if isinstance(out, bool) or not hasattr(out, "__index__"):
            return f"{out!r} ({type(out).__name__}, not an int)"[:200]
        return int(out.__index__())

    def case(self, fn, eager, first, step):
        return {
            "e": "case",
            "eager_step_s": eager,
            "compiled_first_s": first,
            "compiled_step_s": step,
            "answer": self.ask_break_even(fn, eager, first, step),
        }

    # -- probes -------------------------------------------------------------------------------
    def sim(self):
        time_calls = self.need("time_calls")
        ctx, rng, lib = self.ctx, self.rng, self.ctx.lib
        lo, hi = self.ctx.params["sim_calls"]
        calls = rng.randint(int(lo), int(hi))
        compile_s = lib.ticks(rng.uniform(0.5, 2.0))
        # costs[k]: device work of call k (extra ones for submissions that call more often)
        costs = [lib.ticks(rng.uniform(2e-3, 6e-3)) for _ in range(calls + 8)]
        sim = lib.SimDevice(ctx)
        made = [0]

        def fn(x):
            k = made[0]
            made[0] += 1
            sim.work(costs[min(k, len(costs) - 1)], block=compile_s if k == 0 else 0.0)
            return x

        ctx.trace = trace = []
        try:
            with sim:
                result = time_calls(fn, self.idx, sync=sim.sync, calls=calls)
        finally:
            ctx.trace = None
            ctx.traces["sim"] = trace
        ctx.metric("sim.calls_made", made[0])
        ctx.metric("sim.calls_expected", calls + 1)
        first, steady = self.timings(result, f"time_calls(fn, x, sync=sync, calls={calls})")
        ctx.metric("sim.first_s", [first])
        ctx.metric("sim.steady_s", steady)
        # the truth, and what known mistakes return on this device (to name them in the report)
        truth_first = compile_s + costs[0]
        later = costs[1 : calls + 1]
        ctx.metric("sim.truth.first_s", [truth_first])
        ctx.metric("sim.truth.steady_s", later)
        ctx.metric("sim.mistake.first_unsynced", [compile_s + sim.host])
        ctx.metric("sim.mistake.first_after_warmup", [costs[1]])
        ctx.metric("sim.mistake.first_in_list", [truth_first] + costs[1:calls])
        ctx.metric("sim.mistake.first_in_list_plus", [truth_first] + later)
        ctx.metric("sim.mistake.block", [sum(later) / calls] * calls)
        ctx.metric("sim.mistake.block_with_first", [(truth_first + sum(costs[1:calls])) / calls] * calls)
        ctx.metric("sim.mistake.unsynced", [sim.host] * calls)
        ctx.metric("sim.mistake.after_warmup", costs[2 : calls + 2])

    def break_even(self):
        be = self.need("break_even")
        r = self.rng

        def q(lo, hi):
            return r.randint(lo, hi) * UNIT

        cases = []
        for _ in range(3):  # ordinary: compiled faster, first call dearer
            c = q(4, 40)
            e = c + q(1, 20)
            cases.append((e, e + q(50, 3000), c))
        for _ in range(2):  # exact equality at the boundary: first + (n-1)·c == n·e
            c, d, n = q(4, 40), q(1, 20), r.randint(2, 500)
            cases.append((c + d, c + n * d, c))
        c = q(4, 40)
        cases.append((c, c + q(50, 3000), c))  # compiled step equal to eager: never pays → None
        e = q(4, 40)
        cases.append((e, e + q(50, 3000), e + q(1, 20)))  # compiled step slower → None
        c = q(4, 40)
        e = c + q(4, 20)
        cases.append((e, e - q(1, 3), c))  # first call cheaper than eager → 1
        e = q(4, 40)
        cases.append((e, e, e + q(1, 20)))  # first call equal to eager, compiled slower → 1
        r.shuffle(cases)
        self.ctx.traces["break_even.hidden"] = [self.case(be, *c) for c in cases]

    def real(self):
        time_calls = self.need("time_calls")
        be = self.need("break_even")
        ctx = self.ctx
        calls = int(ctx.params["calls"])
        model = self.model()
        variants = (("eager", model), ("compiled", torch.compile(model)))
        measured = {}
        for name, m in variants:
            grader = []  # the grader's own clock around each call (a sanity cross-check)
            last = {}
            k = [0]

            def fn(x, m=m, grader=grader, last=last, k=k):
                ctx.event("step", id=k[0])
                t0 = ctx.clock()
                with torch.no_grad():
                    out = m(x)
                self.sync()
                grader.append(ctx.clock() - t0)
                ctx.event("step_done", id=k[0])
                k[0] += 1
                last["logits"] = out[0] if isinstance(out, tuple) else out
                return out

            def sync():
                ctx.event("sync")
                self.sync()

            ctx.trace = trace = []
            try:
                result = time_calls(fn, self.idx.clone(), sync=sync, calls=calls)
            finally:
                ctx.trace = None
                ctx.traces[f"real.{name}"] = trace
            first, steady = self.timings(result, f"time_calls({name} model, x, sync=sync, calls={calls})")
            if not steady or not grader:
                raise ProbeFailed(f"time_calls({name} model, ...) returned no steady-state times")
            step = statistics.median(steady)
            measured[name] = (first, step)
            ctx.metric(f"real.{name}.first_s", first)
            ctx.metric(f"real.{name}.steady_s", steady)
            ctx.metric(f"real.{name}.step_s", step)
            ctx.metric(f"real.{name}.grader_first_s", grader[0])
            ctx.metric(f"real.{name}.grader_step_s", statistics.median(grader[1:] or grader))
            ctx.metric(f"real.{name}.calls_made", len(grader))
            if "logits" in last:
                ctx.save_tensor(f"real/{name}/logits", last["logits"])
        (eager_first, eager_step), (compiled_first, compiled_step) = measured["eager"], measured["compiled"]
        ctx.traces["real.break_even"] = [self.case(be, eager_step, compiled_first, compiled_step)]

    def shapes(self):
        compile_for_shapes = self.need("compile_for_shapes")
        ctx = self.ctx
        import torch._dynamo

        torch._dynamo.reset()  # the real probe's graphs must not count here
        p = ctx.params
        lens = self.rng.sample([int(t) for t in p["seq_lens"]], int(p["n_shapes"]))
        batch = int(self.idx.shape[0])
        shapes = [(batch, t) for t in lens]
        ctx.metric("shapes.seq_lens", lens)
        eager = self.model()
        before = _dynamo_counts()
        fn = compile_for_shapes(self.model(), list(shapes))
        if not callable(fn):
            raise ProbeFailed(f"compile_for_shapes() returned {type(fn).__name__}, not a callable")
        for b, t in shapes:
            x = self.idx[:b, :t].contiguous()
            with torch.no_grad():
                out = fn(x)
                ref = eager(x)[0]
            got = out[0] if isinstance(out, (tuple, list)) else out
            if not isinstance(got, torch.Tensor):
                raise ProbeFailed(
                    f"compile_for_shapes(...)(x) returned {type(out).__name__}; expected what the model "
                    "returns: (logits, None)"
                )
            ctx.save_tensor(f"shapes/compiled/T{t}", got)
            ctx.save_tensor(f"shapes/eager/T{t}", ref)
        after = _dynamo_counts()
        for key in after:
            ctx.metric(f"shapes.{key}", after[key] - before[key])


def run(ctx):
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # compile in this process: one CPU thread, no worker pool
    lesson = Lesson(ctx)
    for name in ("sim", "break_even", "real", "shapes"):
        with ctx.probe(name):
            getattr(lesson, name)()
    # not judged: whether inductor's on-disk cache served the compiles (README: cold vs warm)
    from torch._dynamo.utils import counters

    for key in ("fxgraph_cache_hit", "fxgraph_cache_miss"):
        ctx.metric(f"compile.{key}", int(counters["inductor"][key]))
