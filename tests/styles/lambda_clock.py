# Style: clocks behind lambdas: `now_ns = lambda: time.time_ns()` read directly, and a lambda
# handed to timeit as its timer (and as its setup); the windows alternate between the two.
import time
import timeit

now_ns = lambda: time.time_ns()  # noqa: E731


def time_windows(run, sync, n, k):
    def window():
        for _ in range(n):
            run()
        sync()

    timer = timeit.Timer(window, setup=lambda: sync(), timer=lambda: time.perf_counter())
    out = []
    for i in range(k):
        if i % 2 == 0:
            sync()
            t0 = now_ns()
            for _ in range(n):
                run()
            sync()
            out.append((now_ns() - t0) / 1e9)
        else:
            out.append(timer.timeit(number=1))
    return out
