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
    (src/reference/), compared with what the grader caught of the ledger's step.

A *case* is what `make_case(batch, seq_len)` returns and `memory_ledger(**case)` takes: a fresh
TinyGPT with the grader's weights (train mode, dropout 0), a fresh optimizer on its parameters and
a batch, all on the grading device: {"model", "optimizer", "batch": {"idx", "targets"}, "device"}.

Probes:
  grader        the grader's own ledger of each case (activations = bytes saved for backward,
                measured with saved_tensors_hooks; on CUDA the peak of one step) and its own sweep
  ledger        the submission's memory_ledger() on an Adam case and on an SGD + momentum case: its
                entries, what the grader saw of the step it ran (backward passes that reached the
                parameters, Adam's step counter) and its loss, logits, gradients and the change of
                every weight (compared with the libtorch reference); then on a second, identical
                Adam case (reproducibility: that rerun must be a step the grader saw too)
  sweep         the submission's sweep() over the grid of exercise.yaml
  growth        GROWTH

Traces (one event per ledger row: batch, seq_len, optimizer and the entries; an entry that is not a
number is left out and its `<entry>_error` says why):
  ledger.{adam,sgd}, grader.{adam,sgd}, sweep.student, sweep.grader
Event traces {ledger,sweep,growth}.calls: what happened during each probe (`empty_cache` calls, the
grader's `step` / `fwd_end` / `step_done` events), sent as it happens.
Metrics: ledger.{adam,adam_again,sgd}.<entry>, ledger.{adam,adam_again,sgd}.backwards,
ledger.{adam,adam_again}.adam_step, grader.{adam,sgd}.{activations,peak}, growth.{batch,seq_len},
calls.empty_cache (torch.cuda.empty_cache() calls while the submission ran, counted on CPU too).
Tensors: ledger/{adam,sgd}/{loss,logits,grad/<param>,update/<param>}.
"""
import gc
import random

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from course import Config
from course.model import TinyGPT

ENTRIES = ("params", "grads", "optimizer_state", "activations")
OPTIMIZERS = ("adam", "sgd_momentum")

_synchronize = torch.cuda.synchronize
_reset_peak = torch.cuda.reset_peak_memory_stats
_max_allocated = torch.cuda.max_memory_allocated
_Adam, _SGD = torch.optim.Adam, torch.optim.SGD
ProbeFailed = Exception  # replaced by the driver's class before anything runs


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


class ShapesSeen(object):
    """Observer of the sweep's cases: the (batch, seq_len) of every forward of the grader's TinyGPT
    (the cases of the grid have distinct shapes), so a row the submission returns for a grid
    point whose case never ran a forward was not measured."""

    def __init__(self, base):
        self.base = base
        self.shapes = set()

    def forward(self, model, idx, targets, blocks_fn):
        self.shapes.add(tuple(int(n) for n in idx.shape))
        return self.base.forward(model, idx, targets, blocks_fn)


class Setup:
    """What both sides use: the drawn model, the grader's weights and batch, the sweep's grid."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.device = torch.device(ctx.device)
        inputs = load_file(ctx.job["inputs"])
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

    def optimizer(self, name, model):
        p = self.ctx.params
        if name == "adam":
            return _Adam(model.parameters(), lr=float(p["lr"]))
        return _SGD(model.parameters(), lr=float(p["lr"]), momentum=float(p["momentum"]))

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
def _grader_ledger(setup, name, batch):
    """Activations (and on CUDA the peak) of one training step of a fresh plain TinyGPT."""
    model = TinyGPT(setup.cfg)
    model.load_state_dict(setup.weights, strict=True)
    model = model.to(setup.device).train()
    opt = setup.optimizer(name, model)
    cuda = setup.device.type == "cuda"
    if cuda:
        gc.collect()
        _synchronize()
        _reset_peak()
    (_, loss), activations = setup.ctx.lib.saved_bytes(model, lambda: model(batch["idx"], batch["targets"]))
    loss.backward()
    opt.step()
    peak = None
    if cuda:
        _synchronize()
        peak = _max_allocated()
    b, t = batch["idx"].shape
    return {"e": "ledger", "batch": int(b), "seq_len": int(t), "optimizer": name,
            "activations": int(activations), "peak": peak}


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
            _grader_ledger(setup, "adam", setup.batch)
        for opt, name in (("adam", "adam"), ("sgd", "sgd_momentum")):
            row = _grader_ledger(setup, name, setup.batch)
            send(f"grader.{opt}", [row])
            metric(f"grader.{opt}.activations", row["activations"])
            if row["peak"] is not None:
                metric(f"grader.{opt}.peak", row["peak"])
        send("sweep.grader", [
            _grader_ledger(setup, setup.sweep_optimizer, setup.sweep_batch(b, t)) for b, t in setup.grid()
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
        lib = self.ctx.lib
        obs = observer or lib.StepObserver(self.ctx, self.batch)
        model = lib.observed_model(self.ctx, self.setup.cfg, self.setup.weights, self.device, obs)
        opt = self.setup.optimizer(name, model)
        if batch is None:
            batch = _clone_batch(self.batch)
        return {"model": model, "optimizer": opt, "batch": batch, "device": self.device}

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

    def quiesce(self):
        """On CUDA, free the previous case before the next peak is measured (CPU has no peak)."""
        if self.device.type == "cuda":
            gc.collect()
            _synchronize()

    def row(self, case, optimizer, entries):
        b, t = case["batch"]["idx"].shape
        return {"e": "ledger", "batch": int(b), "seq_len": int(t), "optimizer": optimizer, **entries}

    # -- checking what the submission returned ---------------------------------------------------
    def entries(self, got, what):
        """The entries of one returned ledger, each on its own: an entry that is missing or not a
        number becomes `<entry>_error` (only the criteria that compare that entry fail)."""
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
        capture = Capture(ctx.lib.StepObserver(ctx, self.batch))
        case = self.case(name, observer=capture)
        model, optimizer = case["model"], case["optimizer"]
        grads, passes = {}, {}

        def caught(g, n):
            # every backward pass that reaches a parameter; the first gradient is the step's
            passes[n] = passes.get(n, 0) + 1
            grads.setdefault(n, g.detach().to("cpu", copy=True))

        for pname, p in model.named_parameters():
            p.register_hook(lambda g, n=pname: caught(g, n))
        self.quiesce()
        got = memory_ledger(model, optimizer, case["batch"], device=case["device"])
        # what the grader saw of the step, before anything returned is read
        ctx.metric(f"ledger.{label}.backwards", max(passes.values(), default=0))
        if name == "adam":
            steps = [int(st["step"]) for st in optimizer.state.values() if "step" in st]
            ctx.metric(f"ledger.{label}.adam_step", max(steps, default=0))
        # the step's forward, gradients and update (held to libtorch's; the rerun's to the first
        # call's: it measures the same case again, so a second call that only pretends to train
        # fails ledger_reproducible, while a wrong step fails step_matches_reference alone)
        if capture.first is not None:
            logits, loss = capture.first
            ctx.save_tensor(f"ledger/{label}/logits", logits)
            if loss is None:  # model(idx) and the loss computed outside: the same cross-entropy
                targets = self.batch["targets"]
                loss = F.cross_entropy(logits.detach().reshape(-1, logits.shape[-1]), targets.reshape(-1))
            ctx.save_tensor(f"ledger/{label}/loss", loss)
        for pname, g in grads.items():
            ctx.save_tensor(f"ledger/{label}/grad/{pname}", g)
        for pname, p in model.named_parameters():  # each weight's change: one optimizer step?
            w0 = self.setup.weights[pname].to(torch.float64)
            ctx.save_tensor(f"ledger/{label}/update/{pname}", p.detach().to("cpu", torch.float64) - w0)
        row = self.row(case, name, self.entries(got, "memory_ledger(...)"))
        self.record(f"ledger.{label}", row)
        if run == 1:
            ctx.traces[f"ledger.{opt}"] = [row]
        del case, model, optimizer
        self.quiesce()

    def ledgers(self):
        self.ledger("adam", 1)
        self.ledger("sgd", 1)
        self.ledger("adam", 2)

    def sweep(self):
        sweep = self.need("sweep")
        grid = self.setup.sweep_grid
        self.sweep_seen = ShapesSeen(self.ctx.lib.StepObserver(self.ctx, self.batch))
        got = sweep(self.make_case, batches=list(grid["batches"]), seq_lens=list(grid["seq_lens"]))
        # grid points whose case never ran a forward: their rows were not measured
        unmeasured = [f"{b}×{t}" for b, t in self.setup.grid() if (b, t) not in self.sweep_seen.shapes]
        self.ctx.metric("sweep.unmeasured", len(unmeasured))
        if unmeasured:
            self.ctx.metric("sweep.unmeasured_points", ", ".join(unmeasured))
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
        growth = getattr(self.ctx.sub, "GROWTH", None)
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
