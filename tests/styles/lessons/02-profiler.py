"""02-profiler, the reference solution with host-clock timing added through the style's
`time_windows` (tests/style_matrix.rs pastes a style of tests/styles/ at the marker below). The
lesson's numbers come from the profile; the host clock only logs how long the unprofiled warm-up
and each profiled call took, which must change no verdict. verify() averages over the calls it
counted itself (torch's Timer runs its statement more often than asked)."""
import torch
from torch.profiler import ProfilerActivity, profile, schedule

# {{STYLE}}

HOST_LOG = []  # (what, seconds): the host clock's view, for the student's own eyes


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


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
        record_shapes=True,
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
    calls = [0]

    def run():
        calls[0] += 1
        step(x)

    HOST_LOG.append(("warm-up", time_windows(run, _sync, warmup, 1)))  # untimed by the profile
    calls[0] = 0
    with profile(activities=_activities()) as prof:
        HOST_LOG.append(("profiled calls", time_windows(run, _sync, 1, steps)))
    total = sum(_self_us(e) for e in prof.key_averages() if e.key == op)
    return total / calls[0]


def verify(op, baseline_step, candidate_step):
    x = baseline_step.make_input()
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
