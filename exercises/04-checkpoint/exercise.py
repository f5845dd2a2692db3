"""04-checkpoint — 激活检查点：用计算换显存 / Activation checkpointing: trading compute for memory.

Fill in the two TODOs, then run `./grade exercise 04-checkpoint`. The contract is in README.md.
完成两个 TODO，然后运行 `./grade exercise 04-checkpoint`。接口说明见 README.md。
"""
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint


def forward(blocks, x, *, checkpointing):
    """Run `blocks` in order on x.

    checkpointing=True and autograd recording: wrap each whole block in
    checkpoint(block, x, use_reentrant=False). Autograd off (inference): never checkpoint.
    """
    # TODO(zh): 开启时按 block 做检查点；推理（无梯度）时不要做检查点。
    # TODO(en): checkpoint each whole block when training; never when autograd is off.
    raise NotImplementedError("TODO: forward(blocks, x, *, checkpointing)")


def compare(model, batch, *, sync, warmup, repeats):
    """Measure off/on the same way; return
    {"off": {"step_s": float, "activation_bytes": int}, "on": {...}}.
    """
    # TODO(zh): 同一批输入、预热、同步、取中位数；用 saved_tensors_hooks 统计激活字节。
    # TODO(en): same batch, warm-up, sync, median; count activation bytes with saved_tensors_hooks.
    raise NotImplementedError("TODO: compare(model, batch, *, sync, warmup, repeats)")
