"""05-compile — reference solution (参考答案).

time_calls(): the first call timed alone (it includes the compile), then `calls` calls each timed on
its own, with sync() before every clock read. break_even(): the definition, read as a closed form
and checked against the inequality itself. compile_for_shapes(): one dynamic-shape graph.
"""
import math
import time

import torch


def time_calls(fn, x, *, sync, calls=50):
    sync()
    t0 = time.perf_counter()
    fn(x)  # the first call: compiles (and runs once)
    sync()
    first_s = time.perf_counter() - t0
    steady_s = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        fn(x)
        sync()
        steady_s.append(time.perf_counter() - t0)
    return {"first_s": first_s, "steady_s": steady_s}


def break_even(*, eager_step_s, compiled_first_s, compiled_step_s):
    e, f, c = eager_step_s, compiled_first_s, compiled_step_s

    def pays(n):
        return f + (n - 1) * c <= n * e

    if pays(1):
        return 1  # the first compiled call is already no dearer than an eager one
    if c >= e:
        return None  # each compiled step saves nothing: the compile cost is never paid back
    n = max(1, math.ceil((f - c) / (e - c)))
    while n > 1 and pays(n - 1):  # guard the closed form against float rounding
        n -= 1
    while not pays(n):
        n += 1
    return n


def compile_for_shapes(model, shapes):
    # dynamic=True: one graph with a symbolic sequence length serves every shape; without it
    # dynamo compiles a static graph first and recompiles when a dimension changes.
    return torch.compile(model, dynamic=True)
