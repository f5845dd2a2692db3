# Style: timeit's module functions: timeit.timeit(window, setup=sync, number=1), one call per window.
import timeit


def time_windows(run, sync, n, k):
    def window():
        for _ in range(n):
            run()
        sync()

    return [timeit.timeit(window, setup=sync, number=1) for _ in range(k)]
