# Style: functools.partial everywhere: the statement and the clock timeit reads are partials
# (timer=functools.partial(time.monotonic)).
import functools
import time
import timeit


def _window(run, sync, n):
    for _ in range(n):
        run()
    sync()


def time_windows(run, sync, n, k):
    timer = timeit.Timer(
        functools.partial(_window, run, sync, n),
        setup=functools.partial(sync),
        timer=functools.partial(time.monotonic),
    )
    return timer.repeat(repeat=k, number=1)
