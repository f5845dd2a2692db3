"""01-metrics, the reference solution with every timing through the style's `time_windows`
(tests/style_matrix.rs pastes a style of tests/styles/ at the marker below)."""

# {{STYLE}}

COMPARABLE_ACROSS_SEQ_LEN = "tokens_per_s"


def measure(step, sync, *, warmup, repeats, steps_per_repeat):
    for _ in range(warmup):
        step()
    windows = time_windows(step, sync, steps_per_repeat, repeats)
    return [w / steps_per_repeat for w in windows]


def percentile(samples, q):
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
