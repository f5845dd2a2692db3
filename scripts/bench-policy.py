"""What the course's Python costs inside a student's own loops (issue 37, item 4).

    .venv/bin/python scripts/bench-policy.py [--pairs N]

Each lesson's reference solution is loaded twice from the same source: compiled under the course's
policy (src/driver/policy.py, as the driver runs it) and compiled by plain Python. The lesson's
timed function is then called on the same model and inputs, the two versions interleaved pair by
pair (policy first in even pairs, plain first in odd ones), and the median of the per-pair ratios
policy/plain is printed, with the guard calls one call made (counted, deterministic) and their
cost. The work is the lesson's own: a TinyGPT training step (lessons 01, 03, 04, 06), a profiled
step (02), the model's forward (05). Prints a Markdown table for docs/benchmarks.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "exercises"))
sys.path.insert(0, os.path.join(ROOT, "src", "driver"))

import torch  # noqa: E402

import policy  # noqa: E402
from course.model import Config, TinyGPT  # noqa: E402

torch.set_num_threads(1)


def course_policy():
    """The course's Python as the driver gets it (`grade policy --format json`)."""
    out = subprocess.run(
        [os.path.join(ROOT, "target", "debug", "grade"), "policy", "--format", "json"],
        capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("bench-policy: `grade policy --format json` failed (build with ./setup.sh)\n" + out.stderr)
    return json.loads(out.stdout)


def load(lesson, guarded):
    path = os.path.join(ROOT, "solutions", lesson, "exercise.py")
    with open(path) as fh:
        source = fh.read()
    if guarded:
        code, found = policy.compile_source(source, path)
        assert not found, found
        return policy.run(code, path, name=f"sol_{lesson.replace('-', '_')}_guarded")
    ns = {"__name__": f"sol_{lesson.replace('-', '_')}_plain", "__file__": path}
    exec(compile(source, path, "exec"), ns)
    return type("Plain", (), ns)


def model_and_batch(seed=0, batch=8, seq_len=64):
    torch.manual_seed(seed)
    cfg = Config(vocab=256, seq_len=seq_len, d_model=64, n_heads=4, n_blocks=4)
    model = TinyGPT(cfg).train()
    idx = torch.randint(0, cfg.vocab, (batch, seq_len))
    targets = torch.randint(0, cfg.vocab, (batch, seq_len))
    return model, {"idx": idx, "targets": targets}


def lesson_calls():
    """Per lesson: a function (module) -> callable doing one timed call of its contract."""
    model, batch = model_and_batch()
    idx, targets = batch["idx"], batch["targets"]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        model.zero_grad(set_to_none=True)
        _, loss = model(idx, targets)
        loss.backward()

    step.make_input = lambda: idx

    def train_step(x=None):
        step()

    train_step.make_input = lambda: idx
    batches = [(idx, targets)] * 8
    eager = lambda x: model(x)[0]  # noqa: E731
    return {
        "01-metrics": lambda m: m.measure(step, lambda: None, warmup=1, repeats=5, steps_per_repeat=1),
        "02-profiler": lambda m: m.top_ops(m.profile_training(train_step, steps=3), k=3),
        "03-memory": lambda m: m.memory_ledger(model, opt, batch, device="cpu"),
        "04-checkpoint": lambda m: m.compare(model, batch, sync=lambda: None, warmup=1, repeats=3),
        "05-compile": lambda m: m.time_calls(eager, idx, sync=lambda: None, calls=10),
        "06-sync": lambda m: m.train(model, batches, opt, log_every=4),
    }


def count_guards(fn):
    """How many guard calls (attribute reads and writes) one call makes."""
    n = [0]
    real_get, real_write = policy._getattr_, policy._write_

    def get(*a, **k):
        n[0] += 1
        return real_get(*a, **k)

    def write(*a, **k):
        n[0] += 1
        return real_write(*a, **k)

    policy.BUILTINS["_getattr_"], policy.BUILTINS["_write_"] = get, write
    try:
        fn()
    finally:
        policy.BUILTINS["_getattr_"], policy.BUILTINS["_write_"] = real_get, real_write
    return n[0]


def guard_cost_s():
    """One guard call's cost: `_getattr_(tensor, "shape")` against plain `getattr`."""
    t = torch.zeros(1)
    g, n = policy._getattr_, 200_000
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            g(t, "shape")
        t1 = time.perf_counter()
        for _ in range(n):
            getattr(t, "shape")
        t2 = time.perf_counter()
        best.append(((t1 - t0) - (t2 - t1)) / n)
    return statistics.median(best)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    policy.configure(course_policy(), {os.path.join(ROOT, "solutions", d, "exercise.py")
                                        for d in os.listdir(os.path.join(ROOT, "solutions"))})
    per_guard = guard_cost_s()
    calls = lesson_calls()
    print(f"one guard call: {per_guard * 1e9:.0f} ns more than a plain attribute read\n")
    print("| lesson | timed call | guard calls | median policy / plain (interleaved) | guards' cost / call |")
    print("|---|---|---:|---:|---:|")
    for lesson, call in calls.items():
        if args.only and lesson not in args.only:
            continue
        guarded, plain = load(lesson, True), load(lesson, False)
        call(guarded), call(plain)  # warm-up (lesson 05: nothing compiles here; eager calls)
        n = count_guards(lambda: call(guarded))
        ratios, plain_s = [], []
        for i in range(args.pairs):
            order = [(guarded, "g"), (plain, "p")] if i % 2 == 0 else [(plain, "p"), (guarded, "g")]
            took = {}
            for mod, tag in order:
                t0 = time.perf_counter()
                call(mod)
                took[tag] = time.perf_counter() - t0
            ratios.append(took["g"] / took["p"])
            plain_s.append(took["p"])
        share = n * per_guard / statistics.median(plain_s)
        print(f"| {lesson} | {statistics.median(plain_s) * 1e3:.1f} ms | {n} | "
              f"{statistics.median(ratios):.3f} | {share * 100:.3f} % |")


if __name__ == "__main__":
    main()
