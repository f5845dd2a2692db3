"""02-profiler — 用 PyTorch Profiler 找真正瓶颈 / Finding the real bottleneck with the PyTorch Profiler.

Fill in the three TODOs, then run `./grade exercise 02-profiler`. The contract is in README.md.
完成三个 TODO，然后运行 `./grade exercise 02-profiler`。接口说明见 README.md。
"""
import torch
from torch.profiler import ProfilerActivity, profile, schedule


def profile_training(train_step, *, steps=3):
    """Profile exactly `steps` calls of train_step() after a schedule's wait/warm-up steps, calling
    prof.step() once per step (CUDA activity when available); return the torch profiler object
    that recorded those steps (the grader ranks its own copy of that recording, not your object)."""
    # TODO(zh): 用短 schedule（wait、warmup、active=steps），每步之后调用 prof.step()。
    # TODO(en): a short schedule (wait, warmup, active=steps); call prof.step() after every step.
    raise NotImplementedError("TODO: profile_training(train_step, *, steps=3)")


def top_ops(prof, k=3):
    """The k ops with the most self time (self device time on CUDA, self CPU time otherwise),
    ProfilerStep rows excluded: [{"name", "self_time_us", "calls"}, ...]."""
    # TODO(zh): 用 prof.key_averages()，按自身耗时排序，带上调用次数。
    # TODO(en): use prof.key_averages(), sort by self time, keep the call counts.
    raise NotImplementedError("TODO: top_ops(prof, k=3)")


def verify(op, baseline_step, candidate_step):
    """Is candidate_step really faster on `op`, and still right? Same input for both, warm-up,
    profile each; return {"baseline_us", "candidate_us", "faster", "outputs_close"}."""
    # TODO(zh): 同一个输入（baseline_step.make_input()）、先预热再 profile、比较算子自身耗时和输出。
    # TODO(en): one input (baseline_step.make_input()), warm up then profile, compare the op's self time and the outputs.
    raise NotImplementedError("TODO: verify(op, baseline_step, candidate_step)")
