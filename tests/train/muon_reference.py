"""Replays an optimizer run with torch.optim.Muon and torch.optim.AdamW (torch 2.11), the
reference for siamese's C++ Muon (tests/train/muon_test.cpp).

usage: muon_reference.py FOLDER
FOLDER holds spec.json (the parameter groups with their options, the number of steps and
each step's learning rate per group), init/<name>.npy (the starting parameters) and
<step>/<name>.npy (each step's gradients). Writes out/<name>.npy, the parameters after
the last step.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

folder = Path(sys.argv[1])
spec = json.loads((folder / "spec.json").read_text())
torch.set_num_threads(1)


def load(path):
    return torch.from_numpy(np.load(path))


params = {}
optimizers = []
for group in spec["groups"]:
    tensors = []
    for name in group["names"]:
        params[name] = load(folder / "init" / f"{name}.npy").requires_grad_()
        tensors.append(params[name])
    if group["kind"] == "muon":
        opt = torch.optim.Muon(
            tensors,
            lr=group["lrs"][0],
            weight_decay=group["weight_decay"],
            momentum=group["momentum"],
            nesterov=group["nesterov"],
            ns_steps=group["ns_steps"],
            adjust_lr_fn=group["adjust_lr_fn"],
        )
    else:
        opt = torch.optim.AdamW(
            tensors,
            lr=group["lrs"][0],
            betas=tuple(group["betas"]),
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            fused=True,
        )
    optimizers.append((opt, group["lrs"]))

for step in range(spec["steps"]):
    for name, p in params.items():
        p.grad = load(folder / str(step) / f"{name}.npy")
    for opt, lrs in optimizers:
        for g in opt.param_groups:
            g["lr"] = lrs[step]
        opt.step()

(folder / "out").mkdir(exist_ok=True)
for name, p in params.items():
    np.save(folder / "out" / f"{name}.npy", p.detach().numpy())
print(f"{len(params)} parameters, {spec['steps']} steps, {len(optimizers)} optimizers")
