# Style: time.perf_counter() read directly, sync() before each read.
import time


def time_windows(run, sync, n, k):
    out = []
    for _ in range(k):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            run()
        sync()
        out.append(time.perf_counter() - t0)
    return out
