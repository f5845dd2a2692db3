# Style: a contextlib.contextmanager that syncs and reads time.monotonic_ns() on entry and exit.
import contextlib
import time


@contextlib.contextmanager
def _timed(sync, out):
    sync()
    t0 = time.monotonic_ns()
    yield
    sync()
    out.append((time.monotonic_ns() - t0) / 1e9)


def time_windows(run, sync, n, k):
    out = []
    for _ in range(k):
        with _timed(sync, out):
            for _ in range(n):
                run()
    return out
