"""05-compile — torch.compile 能优化什么 / What torch.compile can optimise.

Fill in the three TODOs, then run `./grade exercise 05-compile`. The contract is in README.md.
完成三个 TODO，然后运行 `./grade exercise 05-compile`。接口说明见 README.md。
"""
import time

import torch


def time_calls(fn, x, *, sync, calls=50):
    """Time fn(x): the first call alone, then `calls` more calls, each on its own.

    Return {"first_s": float, "steady_s": [float] * calls}. `fn` may return before the device is
    done; `sync()` waits for it.
    """
    # TODO(zh): 首次调用单独计时（包含编译）；之后 calls 次逐次计时；每次读时钟前 sync()。
    # TODO(en): time the first call alone (it compiles); then each of `calls` calls on its own;
    #           sync() before every clock read.
    raise NotImplementedError("TODO: time_calls(fn, x, *, sync, calls=50)")


def break_even(*, eager_step_s, compiled_first_s, compiled_step_s):
    """The smallest n >= 1 with compiled_first_s + (n - 1) * compiled_step_s <= n * eager_step_s,
    or None when there is no such n (compiling never pays)."""
    # TODO(zh): 相等也算回本；编译后每步不更快时返回 None。
    # TODO(en): equality counts as breaking even; None when the compiled step is no faster.
    raise NotImplementedError("TODO: break_even(*, eager_step_s, compiled_first_s, compiled_step_s)")


def compile_for_shapes(model, shapes):
    """A compiled `model` that serves every (batch, seq_len) in `shapes` without recompiling per
    shape, returning what `model(idx)` returns (`(logits, None)`): the logits come out of a
    compiled graph of the model, fed idx and the model's own weights. The grader calls it under
    torch.no_grad()."""
    # TODO(zh): 避免每种形状都重新编译（动态形状）。
    # TODO(en): avoid one compile per shape (dynamic shapes).
    raise NotImplementedError("TODO: compile_for_shapes(model, shapes)")
