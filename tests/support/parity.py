"""Forward + backward of the course's Python TinyGPT on a workload written by the Rust grader.

usage: python parity.py COURSE_PATH CONFIG_JSON INPUTS.safetensors OUT.safetensors
"""
import json
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, sys.argv[1])
from course import Config, TinyGPT  # noqa: E402

torch.set_num_threads(1)
m = json.loads(sys.argv[2])
cfg = Config(vocab=m["vocab"], seq_len=m["seq_len"], d_model=m["d_model"], n_heads=m["n_heads"], n_blocks=m["n_blocks"])
inputs = load_file(sys.argv[3])
model = TinyGPT(cfg)
model.load_state_dict({k[len("weights/"):]: v for k, v in inputs.items() if k.startswith("weights/")}, strict=True)
logits, loss = model(inputs["batch/idx"], inputs["batch/targets"])
loss.backward()
out = {"python/off/loss": loss.detach(), "python/off/logits": logits.detach().contiguous()}
for name, p in model.named_parameters():
    out[f"python/off/grad/{name}"] = p.grad.contiguous()
save_file(out, sys.argv[4])
