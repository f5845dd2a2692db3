# Style: time.time() (the wall clock since the epoch), module imported under another name.
import time as clock


def time_windows(run, sync, n, k):
    out = []
    for _ in range(k):
        sync()
        t0 = clock.time()
        for _ in range(n):
            run()
        sync()
        out.append(clock.time() - t0)
    return out
