# Style: time.monotonic() in chained stamps: one read closes a window and opens the next (the
# sync() before it serves both).
import time


def time_windows(run, sync, n, k):
    sync()
    stamps = [time.monotonic()]
    for _ in range(k):
        for _ in range(n):
            run()
        sync()
        stamps.append(time.monotonic())
    return [b - a for a, b in zip(stamps, stamps[1:])]
