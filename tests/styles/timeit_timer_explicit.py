# Style: timeit.Timer with text statements, names passed through globals=, timer=time.perf_counter.
import time
import timeit

_STMT = """
for _ in range(n):
    run()
sync()
"""


def time_windows(run, sync, n, k):
    timer = timeit.Timer(
        stmt=_STMT,
        setup="sync()",
        timer=time.perf_counter,
        globals={"run": run, "sync": sync, "n": n},
    )
    return timer.repeat(repeat=k, number=1)
