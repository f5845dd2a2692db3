"""01-metrics — reference solution (参考答案).

measure(): warm-up steps first (untimed), then `repeats` windows of `steps_per_repeat` steps, each
opened and closed by a clock read right after sync(); seconds per step of each window.
summarize(): median, p90 by linear interpolation (numpy.percentile's default), steps/s and
tokens/s from the median.
"""
import time

# Tokens per second divides out the sequence length (and the batch): a step at seq_len 512 does
# about 4× the work of one at 128, so steps/s changes with the shape while tokens/s stays put.
COMPARABLE_ACROSS_SEQ_LEN = "tokens_per_s"


def measure(step, sync, *, warmup, repeats, steps_per_repeat):
    for _ in range(warmup):  # one-off costs (allocation, caches, autotuning) stay out of the timing
        step()
    samples = []
    for _ in range(repeats):
        sync()  # the device has finished the earlier work before the window opens
        t0 = time.perf_counter()
        for _ in range(steps_per_repeat):
            step()
        sync()  # ... and this window's work before it closes (otherwise: queue time)
        samples.append((time.perf_counter() - t0) / steps_per_repeat)
    return samples


def percentile(samples, q):
    """Linear interpolation between the closest ranks, as numpy.percentile does by default."""
    xs = sorted(samples)
    h = (len(xs) - 1) * q / 100
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def summarize(samples, *, batch, seq_len):
    median_s = percentile(samples, 50)
    return {
        "median_s": median_s,
        "p90_s": percentile(samples, 90),
        "steps_per_s": 1.0 / median_s,
        "tokens_per_s": batch * seq_len / median_s,
    }
