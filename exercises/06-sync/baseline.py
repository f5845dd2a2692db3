"""06-sync 基线 / baseline: a readable TinyGPT training loop and greedy decoder, full of hidden syncs.

The grader runs this file next to your exercise.py on the same model, weights and batches: your
train() must log the same losses and leave the same parameters, your generate() must return the
same tokens — with far fewer read-backs. Every line marked SYNC makes the host wait for the device
(on CUDA), because a tensor's value has to reach Python there.
评分器会把这份基线和你的 exercise.py 在同一模型、权重、批次上运行：结果必须一致，同步必须大幅减少。
标有 SYNC 的每一行都会让 CPU 等待 GPU（张量的值必须回到 Python）。
"""
import torch


def train(model, batches, optimizer, *, log_every):
    """One step per (idx, targets) batch; every `log_every` steps the mean loss of those steps."""
    device = next(model.parameters()).device
    model.train()
    logged = []
    running = 0.0
    for step, (idx, targets) in enumerate(batches, 1):
        optimizer.zero_grad(set_to_none=True)
        logits, loss = model(idx, targets)
        if torch.isnan(loss):  # SYNC: `if` needs a Python bool
            raise FloatingPointError(f"loss is NaN at step {step}")
        loss.backward()
        optimizer.step()
        running += loss.item()  # SYNC: every step
        n_tokens = torch.tensor(targets.numel(), device=device)  # a new constant tensor every step
        accuracy = ((logits.argmax(-1) == targets).sum() / n_tokens).item()  # SYNC: every step
        if step % log_every == 0:
            logged.append(running / log_every)
            print(f"step {step:4d}  loss {loss:.4f}  acc {accuracy:.3f}")  # SYNC: formats a tensor
            running = 0.0
    return logged


def generate(model, idx, *, steps):
    """Greedy decoding: `steps` new tokens after the prompt idx ([1, T]), as a list of ints."""
    device = idx.device
    model.eval()
    tokens = idx[0].tolist()  # SYNC: the prompt back to Python
    with torch.no_grad():
        for _ in range(steps):
            x = torch.tensor([tokens], device=device)  # the whole sequence to the device again
            logits, _ = model(x)
            logits = logits.cpu()  # SYNC: ALL the logits to the CPU, for every token
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[-steps:]
