"""The PyPI package attn-res (0.1.0, an unofficial plain-PyTorch Attention Residuals) on the
sources, pseudo-query and sublayer norm weight that tests/model/attnres_test.cpp wrote into each
FOLDER (its case.txt holds "EPS"): its AttnResOperator mixes the sources [N, B, T, d] with
softmax(w . RMSNorm(v_i)) over depth, then the sublayer's pre-norm (the package's RMSNorm with
that weight) gives F's input. Writes it back with the gradients of sum(x * g).

    attnres_reference.py FOLDER...

The package casts to float32 inside its norms (.float()); in float64 that cast is made to keep
the tensor as it is, so the comparison sees the formula rather than float32 rounding.
"""

import contextlib
import sys
from unittest import mock

import numpy as np
import torch
from attn_res import AttnResOperator, RMSNorm


def main(folder, eps):
    def load(name, grad=False):
        return torch.from_numpy(np.load(f"{folder}/{name}.npy")).requires_grad_(grad)

    sources = load("sources", grad=True)
    dtype, d = sources.dtype, sources.shape[-1]
    op, norm = AttnResOperator(d, eps=eps).to(dtype), RMSNorm(d, eps=eps).to(dtype)
    with torch.no_grad():
        op.pseudo_query.copy_(load("query"))
        norm.weight.copy_(load("attn_norm"))
    keep = (
        mock.patch.object(torch.Tensor, "float", lambda t: t)
        if dtype == torch.float64
        else contextlib.nullcontext()
    )
    with keep:
        x = norm(op(sources))
    (x * load("g")).sum().backward()
    results = {
        "x": x,
        "grad_sources": sources.grad,
        "grad_query": op.pseudo_query.grad,
        "grad_attn_norm": norm.weight.grad,
    }
    for name, value in results.items():
        np.save(f"{folder}/ref_{name}.npy", value.detach().numpy())


if __name__ == "__main__":
    for case in sys.argv[1:]:
        with open(f"{case}/case.txt") as file:
            main(case, float(file.read().split()[0]))
