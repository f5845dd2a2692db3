"""01-metrics — 先定义正确的性能指标 / Define the right performance metrics first.

Fill in the TODOs, then run `./grade exercise 01-metrics`. The contract is in README.md.
完成 TODO，然后运行 `./grade exercise 01-metrics`。接口说明见 README.md。
"""
import time

# TODO(zh): 哪一个能跨序列长度比较？"steps_per_s" 或 "tokens_per_s"
# TODO(en): which one is comparable across sequence lengths? "steps_per_s" or "tokens_per_s"
COMPARABLE_ACROSS_SEQ_LEN = None


def measure(step, sync, *, warmup, repeats, steps_per_repeat):
    """Return `repeats` samples: seconds per step of each timed window of `steps_per_repeat` steps.

    step() may return before the device has finished; sync() waits until it has.
    """
    # TODO(zh): 先预热；每个计时窗口读时钟前都 sync()；每个窗口除以它包含的步数。
    # TODO(en): warm up first; sync() before every clock read; divide each window by its steps.
    raise NotImplementedError("TODO: measure(step, sync, *, warmup, repeats, steps_per_repeat)")


def summarize(samples, *, batch, seq_len):
    """Return {"median_s", "p90_s", "steps_per_s", "tokens_per_s"} (rates from the median)."""
    # TODO(zh): 中位数；p90 用线性插值（numpy.percentile 默认）；steps/s 与 tokens/s 都由中位数得到。
    # TODO(en): median; p90 by linear interpolation (numpy.percentile's default); both rates from the median.
    raise NotImplementedError("TODO: summarize(samples, *, batch, seq_len)")
