"""The speedrun residual recipe in plain PyTorch, written from nanochat's GPT (karpathy/nanochat,
nanochat/gpt.py: GPT.init_weights and GPT.forward) with its attention and MLP replaced by the
fixed maps F_s(h) = tanh(h W_s) that tests/model/speedrun_test.cpp wrote into each FOLDER, and
its functional norms by F.rms_norm with the topology's norm weights. Writes back nanochat's
initial scalars for the folder's depth, the head's input and the gradients of sum(out * g).

    speedrun_reference.py FOLDER...

FOLDER/case.txt holds "EPS N_LAYERS".
"""

import sys

import numpy as np
import torch
import torch.nn.functional as F


def nanochat_init(n_layer):
    """GPT.init_weights' per-layer scalars: stronger residual and x0 blend at early layers."""
    resid = [1.15 - (0.10 * i / max(n_layer - 1, 1)) for i in range(n_layer)]
    x0 = [0.20 - (0.15 * i / max(n_layer - 1, 1)) for i in range(n_layer)]
    return (
        torch.tensor(resid, dtype=torch.float64),
        torch.tensor(x0, dtype=torch.float64),
        torch.tensor([0.2], dtype=torch.float64),
    )


def main(folder, eps, n_layer):
    def load(name, grad=False):
        return torch.from_numpy(np.load(f"{folder}/{name}.npy")).requires_grad_(grad)

    emb = load("emb", grad=True)
    w = load("w")  # [2 * n_layer, d, d]
    attn_norm, ff_norm, ln_f = load("attn_norm", True), load("ff_norm", True), load("ln_f", True)
    resid_lambdas, x0_lambdas = load("resid_lambdas", True), load("x0_lambdas", True)
    backout_lambda = load("backout_lambda", True)

    def norm(x, weight=None):
        return F.rms_norm(x, (x.size(-1),), weight, eps)

    # GPT.forward's trunk, block by block.
    x = norm(emb)
    x0 = x
    backout_layer = n_layer // 2
    x_backout = None
    for i in range(n_layer):
        x = resid_lambdas[i] * x + x0_lambdas[i] * x0
        x = x + torch.tanh(norm(x, attn_norm[i]) @ w[2 * i])
        x = x + torch.tanh(norm(x, ff_norm[i]) @ w[2 * i + 1])
        if i == backout_layer:
            x_backout = x
    if x_backout is not None:
        x = x - backout_lambda * x_backout
    out = norm(x, ln_f)

    (out * load("g")).sum().backward()
    init_resid, init_x0, init_backout = nanochat_init(n_layer)
    results = {
        "out": out,
        "grad_emb": emb.grad,
        "grad_attn_norm": attn_norm.grad,
        "grad_ff_norm": ff_norm.grad,
        "grad_ln_f": ln_f.grad,
        "grad_resid_lambdas": resid_lambdas.grad,
        "grad_x0_lambdas": x0_lambdas.grad,
        "grad_backout_lambda": backout_lambda.grad,
        "init_resid_lambdas": init_resid,
        "init_x0_lambdas": init_x0,
        "init_backout_lambda": init_backout,
    }
    for name, value in results.items():
        np.save(f"{folder}/ref_{name}.npy", value.detach().numpy())


if __name__ == "__main__":
    for case in sys.argv[1:]:
        with open(f"{case}/case.txt") as file:
            eps, n_layer = file.read().split()
        main(case, float(eps), int(n_layer))
