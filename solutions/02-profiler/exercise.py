"""02-profiler — reference solution (参考答案).

profile_training(): a short schedule (wait 1, warm-up 1, then exactly `steps` recorded steps),
prof.step() once per training step, CUDA activity when available.
top_ops(): key_averages() rows by self time (self device time on CUDA), ProfilerStep rows
excluded, with their call counts.
verify(): one fixed input for both steps, warm-up before profiling, the op's self time per
profiled step from a profile of each step, and the outputs compared on that same input.
"""
import torch
from torch.profiler import ProfilerActivity, profile, schedule


def _activities():
    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return acts


def profile_training(train_step, *, steps=3):
    wait, warmup = 1, 1
    with profile(
        activities=_activities(),
        schedule=schedule(wait=wait, warmup=warmup, active=steps, repeat=1),
        record_shapes=True,  # only for these few steps: the trace stays small
    ) as prof:
        for _ in range(wait + warmup + steps):
            train_step()
            prof.step()
    return prof


def _self_us(evt):
    return evt.self_device_time_total if torch.cuda.is_available() else evt.self_cpu_time_total


def top_ops(prof, k=3):
    rows = [e for e in prof.key_averages() if not e.key.startswith("ProfilerStep")]
    rows = sorted(rows, key=_self_us, reverse=True)[:k]
    return [{"name": e.key, "self_time_us": _self_us(e), "calls": e.count} for e in rows]


def _op_us_per_step(step, x, op, *, warmup=2, steps=5):
    for _ in range(warmup):  # untimed: allocation, caches, lazy initialisation
        step(x)
    with profile(activities=_activities()) as prof:
        for _ in range(steps):
            step(x)
    total = sum(_self_us(e) for e in prof.key_averages() if e.key == op)
    return total / steps


def verify(op, baseline_step, candidate_step):
    x = baseline_step.make_input()  # one input, fed to both steps
    baseline_us = _op_us_per_step(baseline_step, x, op)
    candidate_us = _op_us_per_step(candidate_step, x, op)
    with torch.no_grad():
        outputs_close = torch.allclose(baseline_step(x), candidate_step(x))
    return {
        "baseline_us": baseline_us,
        "candidate_us": candidate_us,
        "faster": candidate_us < baseline_us,
        "outputs_close": bool(outputs_close),
    }
