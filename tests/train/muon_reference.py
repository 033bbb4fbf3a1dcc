"""Replays an optimizer run with torch.optim.Muon and torch.optim.AdamW (torch 2.11), the
reference for siamese's C++ Muon (tests/train/muon_test.cpp).

usage: muon_reference.py FOLDER
FOLDER holds spec.json (the parameter groups with their options, the number of steps and
each step's learning rate per group), init/<name>.npy (the starting parameters) and
<step>/<name>.npy (each step's gradients). Writes out/<name>.npy, the parameters after
the last step. A 3-D Muon parameter (MoE experts [E, A, B]) is given to torch.optim.Muon as
E matrices of its own, and written back stacked.
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


params = {}  # name -> the tensors torch optimizes for it (one, or one per expert)
stacked = set()  # the names split into their experts
optimizers = []
for group in spec["groups"]:
    tensors = []
    for name in group["names"]:
        init = load(folder / "init" / f"{name}.npy")
        if group["kind"] == "muon" and init.dim() == 3:
            stacked.add(name)
        parts = list(init) if name in stacked else [init]
        params[name] = [t.clone().requires_grad_() for t in parts]
        tensors += params[name]
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
    for name, parts in params.items():
        grad = load(folder / str(step) / f"{name}.npy")
        for p, g in zip(parts, list(grad) if name in stacked else [grad], strict=True):
            p.grad = g.clone()
    for opt, lrs in optimizers:
        for g in opt.param_groups:
            g["lr"] = lrs[step]
        opt.step()

(folder / "out").mkdir(exist_ok=True)
for name, parts in params.items():
    value = torch.stack(parts) if name in stacked else parts[0]
    np.save(folder / "out" / f"{name}.npy", value.detach().numpy())
print(f"{len(params)} parameters, {spec['steps']} steps, {len(optimizers)} optimizers")
