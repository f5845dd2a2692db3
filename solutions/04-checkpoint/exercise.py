"""04-checkpoint — reference solution (参考答案).

forward(): one non-reentrant checkpoint per whole block, only while autograd records.
compare(): same batch for both variants, warm-up, sync around every timer read, median of the
timed steps; activation bytes = distinct storages saved for backward, parameters excluded.
"""
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint


def forward(blocks, x, *, checkpointing):
    use_ckpt = checkpointing and torch.is_grad_enabled()
    for block in blocks:
        if use_ckpt:
            # preserve_rng_state=True (the default) replays the same dropout masks on recompute
            x = checkpoint(block, x, use_reentrant=False)
        else:
            x = block(x)
    return x


def activation_bytes(model, run_forward):
    """Bytes of the distinct storages saved for backward while run_forward() runs."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run_forward()
    return sum(seen.values())


def compare(model, batch, *, sync, warmup, repeats):
    idx, targets = batch["idx"], batch["targets"]
    results = {}
    for name, flag in (("off", False), ("on", True)):
        blocks_fn = lambda blocks, x, flag=flag: forward(blocks, x, checkpointing=flag)

        def step():
            model.zero_grad(set_to_none=True)
            _, loss = model(idx, targets, blocks_fn=blocks_fn)
            loss.backward()

        for _ in range(warmup):
            step()
        samples = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            samples.append(time.perf_counter() - t0)

        model.zero_grad(set_to_none=True)
        nbytes = activation_bytes(model, lambda: model(idx, targets, blocks_fn=blocks_fn))
        results[name] = {"step_s": statistics.median(samples), "activation_bytes": nbytes}
    return results
