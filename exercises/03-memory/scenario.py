"""Lesson 3 scenario: what the grader runs against a submission's memory_ledger(), sweep() and GROWTH.

Each probe records raw observations; verdicts are decided in Rust from rubrics/03-memory.yaml
(the bytes of params, grads and optimizer state are computed there from the model's shape).

A *case* is what `make_case(batch, seq_len)` returns and `memory_ledger(**case)` takes: a fresh
TinyGPT with the grader's weights (train mode, dropout 0), a fresh optimizer on its parameters and
a batch, all on the grading device: {"model", "optimizer", "batch": {"idx", "targets"}, "device"}.

Probes:
  grader        the grader's own ledger of each case (activations = bytes saved for backward,
                measured with saved_tensors_hooks; on CUDA the peak of one step) and its own sweep
  ledger        the submission's memory_ledger() on an Adam case and on an SGD + momentum case: its
                entries, and the loss, logits and gradients of the training step it ran (compared
                with the libtorch reference); then on a second, identical Adam case (reproducibility)
  sweep         the submission's sweep() over the grid of exercise.yaml
  growth        GROWTH

Traces (one event per ledger row: batch, seq_len, optimizer and the entries):
  ledger.{adam,sgd}, grader.{adam,sgd}, sweep.student, sweep.grader
Metrics: ledger.{adam,adam_again,sgd}.<entry>, grader.{adam,sgd}.<entry>, growth.{batch,seq_len},
calls.empty_cache (torch.cuda.empty_cache() calls while the submission ran, counted on CPU too).
"""
import gc
import random

import torch
from safetensors.torch import load_file

from course import Config

ENTRIES = ("params", "grads", "optimizer_state", "activations")
OPTIMIZERS = ("adam", "sgd_momentum")

_synchronize = torch.cuda.synchronize
_reset_peak = torch.cuda.reset_peak_memory_stats
_max_allocated = torch.cuda.max_memory_allocated
ProbeFailed = Exception  # replaced by the driver's class in run()


class Capture(object):
    """Observer of the grader's TinyGPT: keeps the first forward's (logits, loss)."""

    def __init__(self, base):
        self.base = base
        self.first = None

    def forward(self, model, idx, targets, blocks_fn):
        out = self.base.forward(model, idx, targets, blocks_fn)
        if self.first is None:
            self.first = out
        return out


class Lesson:
    def __init__(self, ctx):
        self.ctx = ctx
        self.device = torch.device(ctx.device)
        inputs = load_file(ctx.job["inputs"])
        self.weights = {k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}
        self.batch = {
            "idx": inputs["batch/idx"].to(self.device),
            "targets": inputs["batch/targets"].to(self.device),
        }
        m = ctx.model_cfg
        self.cfg = Config(
            vocab=m["vocab"], seq_len=m["seq_len"], d_model=m["d_model"], n_heads=m["n_heads"],
            n_blocks=m["n_blocks"], dropout=0.0,
        )
        g = ctx.params["sweep"]
        draw = random.Random(ctx.seed)  # the grid changes with the seed: no table can be hard-coded
        self.sweep_grid = {
            "batches": sorted(draw.sample([int(b) for b in g["batch_from"]], int(g["batches"]))),
            "seq_lens": sorted(draw.sample([int(t) for t in g["seq_len_from"]], int(g["seq_lens"]))),
        }
        # the sweep's optimizer is picked per run from the seed; the single ledgers use both
        self.sweep_optimizer = OPTIMIZERS[ctx.seed % 2]
        self.gen = torch.Generator().manual_seed(ctx.seed + 3)
        self.sweep_batches = {}  # (batch, seq_len) -> the batch both sweeps use

    def need(self, name):
        fn = getattr(self.ctx.sub, name, None)
        if not callable(fn):
            raise ProbeFailed(f"exercise.py defines no function `{name}` (see the contract in README.md)")
        return fn

    # -- cases ----------------------------------------------------------------------------------
    def case(self, optimizer, batch=None, observer=None):
        lib = self.ctx.lib
        obs = observer or lib.StepObserver(self.ctx, self.batch)
        model = lib.observed_model(self.ctx, self.cfg, self.weights, self.device, obs)
        p = self.ctx.params
        if optimizer == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=float(p["lr"]))
        else:
            opt = torch.optim.SGD(model.parameters(), lr=float(p["lr"]), momentum=float(p["momentum"]))
        if batch is None:
            batch = {k: v.clone() for k, v in self.batch.items()}
        return {"model": model, "optimizer": opt, "batch": batch, "device": self.device}

    def sweep_batch(self, b, t):
        """A fixed random batch of shape (b, t) for the grid point (the same for both sweeps)."""
        key = (b, t)
        if key not in self.sweep_batches:
            v = self.cfg.vocab
            idx = torch.randint(0, v, (b, t), generator=self.gen)
            targets = torch.randint(0, v, (b, t), generator=self.gen)
            self.sweep_batches[key] = (idx, targets)
        idx, targets = self.sweep_batches[key]
        return {"idx": idx.to(self.device), "targets": targets.to(self.device)}

    def make_case(self, batch, seq_len):
        """make_case(batch, seq_len) as the submission's sweep() gets it."""
        for name, v, hi in (("batch", batch, None), ("seq_len", seq_len, self.cfg.seq_len)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1 or (hi is not None and v > hi):
                raise ProbeFailed(f"make_case got {name}={v!r}; expected an int in the sweep's grid")
        return self.case(self.sweep_optimizer, batch=self.sweep_batch(batch, seq_len))

    def quiesce(self):
        """On CUDA, free the previous case before the next peak is measured (CPU has no peak)."""
        if self.device.type == "cuda":
            gc.collect()
            _synchronize()

    # -- the grader's own ledger ----------------------------------------------------------------
    def grader_ledger(self, case):
        model, opt, batch = case["model"], case["optimizer"], case["batch"]
        cuda = self.device.type == "cuda"
        model.zero_grad(set_to_none=True)
        if cuda:
            _synchronize()
            _reset_peak()
        (logits, loss), activations = self.ctx.lib.saved_bytes(
            model, lambda: model(batch["idx"], batch["targets"])
        )
        loss.backward()
        opt.step()
        peak = None
        if cuda:
            _synchronize()
            peak = _max_allocated()
        nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        params = list(model.parameters())
        return {
            "params": nbytes(params),
            "grads": nbytes(p.grad for p in params if p.grad is not None),
            "optimizer_state": nbytes(
                t for st in opt.state.values() for t in st.values() if isinstance(t, torch.Tensor)
            ),
            "activations": activations,
            "peak": peak,
        }

    def row(self, case, optimizer, ledger):
        b, t = case["batch"]["idx"].shape
        return {"e": "ledger", "batch": int(b), "seq_len": int(t), "optimizer": optimizer, **ledger}

    # -- checking what the submission returned ---------------------------------------------------
    def entries(self, got, what):
        if not isinstance(got, dict):
            raise ProbeFailed(f"{what} returned {type(got).__name__}; expected a dict with keys "
                              + ", ".join(ENTRIES + ("peak",)))
        out = {}
        for key in ENTRIES + ("peak",):
            if key not in got:
                raise ProbeFailed(f"{what} has no key '{key}' (got keys {sorted(map(str, got))})")
            v = got[key]
            if hasattr(v, "item") and getattr(v, "numel", lambda: 0)() == 1:
                v = v.item()
            if key == "peak" and v is None:
                out[key] = None
                continue
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProbeFailed(f"{what}['{key}'] is {v!r}; expected an int number of bytes"
                                  + (" (or None on CPU)" if key == "peak" else ""))
            out[key] = v
        return out

    def record(self, name, row):
        for key in ENTRIES + ("peak",):
            if row.get(key) is not None:
                self.ctx.metric(f"{name}.{key}", row[key])
        self.ctx.metric(f"{name}.peak_reported", "none" if row.get("peak") is None else "bytes")

    # -- probes ---------------------------------------------------------------------------------
    def grader(self):
        if self.device.type == "cuda":  # warm-up: allocator, cuBLAS workspaces
            self.grader_ledger(self.case("adam"))
            self.quiesce()
        for opt in ("adam", "sgd"):
            name = "adam" if opt == "adam" else "sgd_momentum"
            case = self.case(name)
            row = self.row(case, name, self.grader_ledger(case))
            del case
            self.quiesce()
            self.ctx.traces[f"grader.{opt}"] = [row]
            self.record(f"grader.{opt}", row)
        rows = []
        for b in self.sweep_grid["batches"]:
            for t in self.sweep_grid["seq_lens"]:
                case = self.make_case(int(b), int(t))
                rows.append(self.row(case, self.sweep_optimizer, self.grader_ledger(case)))
                del case
                self.quiesce()
        self.ctx.traces["sweep.grader"] = rows
        self.ctx.metric("sweep.grid", f"batches {self.sweep_grid['batches']} × seq_lens {self.sweep_grid['seq_lens']}")

    def ledger(self, opt, run):
        memory_ledger = self.need("memory_ledger")
        name = "adam" if opt == "adam" else "sgd_momentum"
        capture = Capture(self.ctx.lib.StepObserver(self.ctx, self.batch))
        case = self.case(name, observer=capture)
        grads = {}
        for pname, p in case["model"].named_parameters():
            # the first gradient each parameter receives: the training step the ledger ran
            p.register_hook(lambda g, n=pname: grads.setdefault(n, g.detach().to("cpu", copy=True)))
        self.quiesce()
        got = memory_ledger(case["model"], case["optimizer"], case["batch"], device=case["device"])
        row = self.row(case, name, self.entries(got, "memory_ledger(...)"))
        label = opt if run == 1 else f"{opt}_again"
        self.record(f"ledger.{label}", row)
        if run == 1:
            self.ctx.traces[f"ledger.{opt}"] = [row]
            if capture.first is not None:
                logits, loss = capture.first
                self.ctx.save_tensor(f"ledger/{opt}/logits", logits)
                if loss is not None:
                    self.ctx.save_tensor(f"ledger/{opt}/loss", loss)
            for pname, g in grads.items():
                self.ctx.save_tensor(f"ledger/{opt}/grad/{pname}", g)
        del case
        self.quiesce()

    def ledgers(self):
        self.ledger("adam", 1)
        self.ledger("sgd", 1)
        self.ledger("adam", 2)

    def sweep(self):
        sweep = self.need("sweep")
        batches = [int(b) for b in self.sweep_grid["batches"]]
        seq_lens = [int(t) for t in self.sweep_grid["seq_lens"]]
        got = sweep(self.make_case, batches=list(batches), seq_lens=list(seq_lens))
        if not isinstance(got, (list, tuple)):
            raise ProbeFailed(f"sweep(...) returned {type(got).__name__}; expected a list of dicts")
        rows = []
        for i, r in enumerate(got):
            entries = self.entries(r, f"sweep(...)[{i}]")
            b, t = r.get("batch"), r.get("seq_len")
            if isinstance(b, bool) or isinstance(t, bool) or not isinstance(b, int) or not isinstance(t, int):
                raise ProbeFailed(f"sweep(...)[{i}] needs int 'batch' and 'seq_len' keys (got {b!r}, {t!r})")
            rows.append({"e": "ledger", "batch": b, "seq_len": t, "optimizer": self.sweep_optimizer, **entries})
        self.ctx.traces["sweep.student"] = rows

    def growth(self):
        growth = getattr(self.ctx.sub, "GROWTH", None)
        if not isinstance(growth, dict):
            raise ProbeFailed(f"GROWTH is {type(growth).__name__}; expected a dict "
                              "{'batch': ..., 'seq_len': ...}")
        for axis in ("batch", "seq_len"):
            v = growth.get(axis)
            self.ctx.metric(f"growth.{axis}", v if isinstance(v, str) else repr(v))


def run(ctx):
    global ProbeFailed
    ProbeFailed = ctx.ProbeFailed
    lesson = Lesson(ctx)
    probes = (("grader", lesson.grader), ("ledger", lesson.ledgers), ("sweep", lesson.sweep), ("growth", lesson.growth))
    for name, method in probes:
        with ctx.probe(name):  # probe names = the first segment of what they record
            method()
    ctx.metric("calls.empty_cache", ctx.empty_cache_calls)  # the submission's own calls (driver.py)
