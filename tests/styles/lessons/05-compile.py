"""05-compile, the reference solution with every timing through the style's `time_windows`
(tests/style_matrix.rs pastes a style of tests/styles/ at the marker below)."""
import math

import torch

# {{STYLE}}


def time_calls(fn, x, *, sync, calls=50):
    def call():
        fn(x)

    first_s = time_windows(call, sync, 1, 1)[0]  # the first call (the compile) timed alone
    steady_s = time_windows(call, sync, 1, calls)  # then each call timed on its own
    return {"first_s": first_s, "steady_s": list(steady_s)}


def break_even(*, eager_step_s, compiled_first_s, compiled_step_s):
    e, f, c = eager_step_s, compiled_first_s, compiled_step_s

    def pays(n):
        return f + (n - 1) * c <= n * e

    if pays(1):
        return 1
    if c >= e:
        return None
    n = max(1, math.ceil((f - c) / (e - c)))
    while n > 1 and pays(n - 1):
        n -= 1
    while not pays(n):
        n += 1
    return n


def compile_for_shapes(model, shapes):
    return torch.compile(model, dynamic=True)
