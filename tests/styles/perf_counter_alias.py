# Style: an alias bound at import (`from time import perf_counter as now`), a helper of its own that
# syncs then reads.
from time import perf_counter as now


def _synced_now(sync):
    sync()
    return now()


def time_windows(run, sync, n, k):
    out = []
    for _ in range(k):
        start = _synced_now(sync)
        for _ in range(n):
            run()
        out.append(_synced_now(sync) - start)
    return out
