# Style: timeit.Timer with a callable statement and setup, no timer= (timeit's default timer):
# Timer(window, setup=sync).repeat(k, number=1).
import timeit


def time_windows(run, sync, n, k):
    def window():
        for _ in range(n):
            run()
        sync()

    return timeit.Timer(window, setup=sync).repeat(repeat=k, number=1)
