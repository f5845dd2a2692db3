# Style: torch.utils.benchmark.Timer with text statements, one timeit(number=1) per window (each
# Measurement's raw time; torch's Timer runs the statement twice untimed first, every call), at the
# thread count in use (its default, 1, would time another configuration).
import torch
from torch.utils import benchmark


def time_windows(run, sync, n, k):
    timer = benchmark.Timer(
        stmt="for _ in range(n): run()\nsync()",
        setup="sync()",
        globals={"run": run, "sync": sync, "n": n},
        num_threads=torch.get_num_threads(),
    )
    out = []
    for _ in range(k):
        m = timer.timeit(number=1)
        out.extend(t / m.number_per_run for t in m.raw_times)
    return out
