"""06-sync, the reference solution with each log window of train() timed through the style's
`time_windows` (tests/style_matrix.rs pastes a style of tests/styles/ at the marker below). The
lesson judges read-backs, not the student's clock; the windows only log how long each took, which
must change no verdict."""
import torch
from torch.profiler import ProfilerActivity, profile

# {{STYLE}}

WINDOW_LOG = []  # seconds of every log window, for the student's own eyes


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def train(model, batches, optimizer, *, log_every):
    device = next(model.parameters()).device
    model.train()
    batches = list(batches)
    logged = []
    loss_sum = torch.zeros((), device=device)
    it = iter(enumerate(batches, 1))

    def one_step():
        step, (idx, targets) = next(it)
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        loss_sum.add_(loss.detach())
        if step % log_every == 0:
            logged.append((loss_sum / log_every).item())  # one read-back per log
            loss_sum.zero_()

    WINDOW_LOG.extend(time_windows(one_step, _sync, log_every, len(batches) // log_every))
    for _ in range(len(batches) % log_every):  # a last, partial window: not logged
        one_step()
    return logged


def generate(model, idx, *, steps):
    model.eval()
    out = idx
    with torch.no_grad():
        for _ in range(steps):
            logits, _ = model(out)
            next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            out = torch.cat([out, next_token], dim=1)
    return out[0, idx.shape[1]:].tolist()


SYNC_EVENTS = ("aten::_local_scalar_dense",)


def count_syncs(fn):
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name in SYNC_EVENTS)
