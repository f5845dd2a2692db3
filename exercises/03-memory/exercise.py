"""03-memory — 显存到底花在哪里 / Where does the memory go?

Fill in the TODOs, then run `./grade exercise 03-memory`. The contract is in README.md.
完成 TODO，然后运行 `./grade exercise 03-memory`。接口说明见 README.md。
"""
import torch


def memory_ledger(model, optimizer, batch, *, device):
    """Run ONE training step (zero_grad, forward, loss.backward(), optimizer.step()) and return
    {"params", "grads", "optimizer_state", "activations", "peak"} in bytes (peak: None on CPU).
    """
    # TODO(zh): 激活 = 前向中为反向保存的张量（每个存储只算一次，不含参数）；其余各项在这一步之后读取；
    #           CUDA 上 peak 为 reset_peak_memory_stats() 之后、整个训练步的 max_memory_allocated()。
    # TODO(en): activations = tensors saved for backward during the forward (each storage once,
    #           parameters excluded); read the other entries after the step; on CUDA, peak is
    #           max_memory_allocated() over the whole step after reset_peak_memory_stats().
    raise NotImplementedError("TODO: memory_ledger(model, optimizer, batch, *, device)")


def sweep(make_case, *, batches, seq_lens):
    """One ledger per (batch, seq_len): [{"batch": b, "seq_len": t, **memory_ledger(**make_case(b, t))}, ...]."""
    # TODO(zh): 分别改变 batch 和 sequence length，每个组合记录一份账本。
    # TODO(en): vary batch and sequence length; one ledger per combination.
    raise NotImplementedError("TODO: sweep(make_case, *, batches, seq_lens)")


# TODO(zh): 用扫描结果解释激活显存的增长规律："constant"、"linear" 或 "quadratic"。
# TODO(en): explain how activation memory grows: "constant", "linear" or "quadratic".
GROWTH = {"batch": None, "seq_len": None}
