"""04-checkpoint, the reference solution with every timing through the style's `time_windows`
(tests/style_matrix.rs pastes a style of tests/styles/ at the marker below)."""
import statistics

import torch
from torch.utils.checkpoint import checkpoint

# {{STYLE}}


def forward(blocks, x, *, checkpointing):
    use_ckpt = checkpointing and torch.is_grad_enabled()
    for block in blocks:
        if use_ckpt:
            x = checkpoint(block, x, use_reentrant=False)
        else:
            x = block(x)
    return x


def activation_bytes(model, run_forward):
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
        samples = time_windows(step, sync, 1, repeats)  # each step timed on its own

        model.zero_grad(set_to_none=True)
        nbytes = activation_bytes(model, lambda: model(idx, targets, blocks_fn=blocks_fn))
        results[name] = {"step_s": statistics.median(samples), "activation_bytes": nbytes}
    return results
