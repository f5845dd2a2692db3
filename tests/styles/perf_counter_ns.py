# Style: time.perf_counter_ns(), integer nanoseconds, converted to seconds once per window.
import time


def time_windows(run, sync, n, k):
    out = []
    for _ in range(k):
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            run()
        sync()
        t1 = time.perf_counter_ns()
        out.append((t1 - t0) / 1e9)
    return out
