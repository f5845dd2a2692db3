# Style: perf_counter windows, each also stamped with the wall clock (time.time()) as it opens and
# closes, for a log: another clock's reads around every window.
import time

WALL_LOG = []  # (opened, closed) wall-clock stamps of every window


def time_windows(run, sync, n, k):
    out = []
    for _ in range(k):
        sync()
        opened = time.time()
        t0 = time.perf_counter()
        for _ in range(n):
            run()
        sync()
        t1 = time.perf_counter()
        WALL_LOG.append((opened, time.time()))
        out.append(t1 - t0)
    return out
