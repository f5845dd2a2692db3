# Style: timeit.default_timer read directly, bound at import (`from timeit import default_timer`).
from timeit import default_timer


def time_windows(run, sync, n, k):
    out = []
    for _ in range(k):
        sync()
        t0 = default_timer()
        for _ in range(n):
            run()
        sync()
        out.append(default_timer() - t0)
    return out
