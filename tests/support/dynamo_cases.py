"""The driver's torch._dynamo stand-in (instruments._dynamo_on_demand), one case per process:

    python dynamo_cases.py CASE      prints one JSON line of what it found

eager      torch's eager uses of dynamo (an optimizer step, zero_grad, a non-reentrant checkpoint,
           a meta-device model) leave the stand-in in place and give the same numbers;
submodule  `import torch._dynamo.eval_frame` while the stand-in serves loads the real package;
compile    torch.compile after the stand-in served: the same frames and graph breaks as without
           it (run with `plain` for the figures without it), the cached disable() the real one.
"""
import json
import sys

import torch

case, plain = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "plain"
sys.path.insert(0, sys.argv[3] if len(sys.argv) > 3 else "src/driver")
import attribution as grade_attribution  # noqa: E402  (instruments imports these by these names)

sys.modules["grade_attribution"] = grade_attribution
import recorder as grade_recorder  # noqa: E402

sys.modules["grade_recorder"] = grade_recorder
import instruments  # noqa: E402

if not plain:
    instruments._dynamo_on_demand(torch)
from torch.utils.checkpoint import checkpoint  # noqa: E402

torch.manual_seed(0)
lin = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(2, 4, requires_grad=True)


def train_step():
    opt.zero_grad()
    checkpoint(lin, x, use_reentrant=False).square().sum().backward()
    opt.step()


out = {}
if case == "eager":
    for _ in range(3):
        train_step()
    with torch.device("meta"):
        out["meta"] = list(torch.nn.Linear(3, 5).weight.shape)
    out["weights"] = lin.weight.sum().item()
elif case == "submodule":
    train_step()
    import torch._dynamo.eval_frame as frame  # noqa: E402

    out["submodule"] = frame.__name__
elif case == "compile":
    train_step()
    compiled = torch.compile(train_step, backend="eager")
    compiled()
    compiled()
    import torch._dynamo.utils as utils  # noqa: E402

    out["frames"] = dict(utils.counters["frames"])
    out["graph_breaks"] = sorted(k.split("\n")[0] for k in utils.counters["graph_break"])
    out["weights"] = lin.weight.sum().item()
    cached = getattr(torch.optim.Optimizer.zero_grad.__wrapped__, "__dynamo_disable", None)
    out["cached_disable"] = getattr(cached, "__code__", None) and cached.__code__.co_filename.rsplit("/", 2)[-2:]
dynamo = sys.modules["torch._dynamo"]
out["stand_in"] = type(dynamo).__name__ == "_StandIn"
out["one_module"] = torch._dynamo is dynamo
print(json.dumps(out, sort_keys=True))
