"""03-memory — reference solution (参考答案).

memory_ledger(): one full training step (zero_grad, forward, backward, optimizer.step()); the
activations are the distinct storages saved for backward during that forward (parameters
excluded), every other entry is read after the step, so the gradients and Adam's lazily created
state exist. On CUDA the peak is max_memory_allocated() over the whole step, after a reset.
"""
import torch


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def memory_ledger(model, optimizer, batch, *, device):
    device = torch.device(device)
    cuda = device.type == "cuda"
    params = list(model.parameters())
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    saved = {}  # storage address -> bytes: a view and its base share one storage, counted once

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in param_storages:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    model.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(batch["idx"], batch["targets"])
    loss.backward()
    optimizer.step()
    peak = None
    if cuda:
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)  # allocated, not reserved
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return {
        "params": _nbytes(params),
        "grads": _nbytes(p.grad for p in params if p.grad is not None),
        "optimizer_state": _nbytes(state),
        "activations": sum(saved.values()),
        "peak": peak,
    }


def sweep(make_case, *, batches, seq_lens):
    rows = []
    for b in batches:
        for t in seq_lens:
            case = make_case(b, t)
            rows.append({"batch": b, "seq_len": t, **memory_ledger(**case)})
            del case  # free this case before the next one is built
    return rows


# activations = batch · (a·T + b·T²) + (bytes that do not depend on the batch): for a fixed T
# they grow linearly with the batch; the T×T attention scores make them quadratic in seq_len.
GROWTH = {"batch": "linear", "seq_len": "quadratic"}
