"""06-sync — 减少同步、拷贝与 Python 开销 / Fewer syncs, copies and Python overhead.

This starts as a copy of baseline.py: it trains and decodes correctly, but it is full of hidden
syncs. Find them, remove them (results must stay the same), fill in count_syncs(), then run
`./grade exercise 06-sync`. The contract is in README.md.
这里起初是 baseline.py 的副本：结果正确，但到处是隐式同步。找出并去掉它们（结果必须不变），
完成 count_syncs()，然后运行 `./grade exercise 06-sync`。接口说明见 README.md。
"""
import torch


def train(model, batches, optimizer, *, log_every):
    """One step per (idx, targets) batch; every `log_every` steps the mean loss of those steps."""
    # TODO(zh): 把 loss 在设备上累加，每个记录窗口只 .item() 一次；去掉每步的同步和常量。
    # TODO(en): sum the loss on the device and read it back once per log; no per-step syncs or constants.
    device = next(model.parameters()).device
    model.train()
    logged = []
    running = 0.0
    for step, (idx, targets) in enumerate(batches, 1):
        optimizer.zero_grad(set_to_none=True)
        logits, loss = model(idx, targets)
        if torch.isnan(loss):
            raise FloatingPointError(f"loss is NaN at step {step}")
        loss.backward()
        optimizer.step()
        running += loss.item()
        n_tokens = torch.tensor(targets.numel(), device=device)
        accuracy = ((logits.argmax(-1) == targets).sum() / n_tokens).item()
        if step % log_every == 0:
            logged.append(running / log_every)
            print(f"step {step:4d}  loss {loss:.4f}  acc {accuracy:.3f}")
            running = 0.0
    return logged


def generate(model, idx, *, steps):
    """Greedy decoding: `steps` new tokens after the prompt idx ([1, T]), as a list of ints."""
    # TODO(zh): token 留在设备上（argmax + torch.cat），最后只取回一次。
    # TODO(en): keep the tokens on the device (argmax + torch.cat) and read back once at the end.
    device = idx.device
    model.eval()
    tokens = idx[0].tolist()
    with torch.no_grad():
        for _ in range(steps):
            x = torch.tensor([tokens], device=device)
            logits, _ = model(x)
            logits = logits.cpu()
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[-steps:]


def count_syncs(fn):
    """Call fn() once under torch.profiler; return how many `aten::_local_scalar_dense` events it recorded."""
    # TODO(zh): 用 torch.profiler.profile 包住一次 fn()，数 aten::_local_scalar_dense 事件。
    # TODO(en): wrap one call of fn() in torch.profiler.profile and count aten::_local_scalar_dense events.
    raise NotImplementedError("TODO: count_syncs(fn)")
