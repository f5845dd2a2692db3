# Style: a generator of synced stamps (`next(stamps)` syncs, then reads time.perf_counter_ns()),
# chained: each stamp closes one window and opens the next.
import time


def _stamps(sync):
    while True:
        sync()
        yield time.perf_counter_ns()


def time_windows(run, sync, n, k):
    stamps = _stamps(sync)
    prev = next(stamps)
    out = []
    for _ in range(k):
        for _ in range(n):
            run()
        t = next(stamps)
        out.append((t - prev) / 1e9)
        prev = t
    return out
