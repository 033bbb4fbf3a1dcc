"""transformers' DeepseekV4HyperConnection and DeepseekV4HyperHead on the weights, streams and
sublayer output that tests/model/mhc_test.cpp wrote into each FOLDER (its case.txt holds
"N ITERS RMS_EPS HC_EPS"); writes back what one mHC sublayer and the head compute from them,
and the gradients of sum(out * g) for the given g.

    mhc_reference.py FOLDER...

The C++ topology applies its own RMSNorm (weight attn_norm, ln_f) to the collapsed input and
to the head's output; the same formula is written out here. In float64 the modules' .float()
casts would round to float32, so for that dtype they are made to keep the tensor as it is.
"""

import contextlib
import sys
from unittest import mock

import numpy as np
import torch
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    DeepseekV4HyperConnection,
    DeepseekV4HyperHead,
)


def main(folder, n, iters, rms_eps, hc_eps):
    def load(name, grad=False):
        return torch.from_numpy(np.load(f"{folder}/{name}.npy")).requires_grad_(grad)

    h = load("h", grad=True)  # [B, T, n, d]
    dtype = h.dtype
    config = DeepseekV4Config(
        hidden_size=h.shape[-1], hc_mult=n, hc_sinkhorn_iters=iters, hc_eps=hc_eps, rms_norm_eps=rms_eps
    )
    hc, head = DeepseekV4HyperConnection(config).to(dtype), DeepseekV4HyperHead(config).to(dtype)
    with torch.no_grad():
        for module, names in ((hc, ("fn", "base", "scale")), (head, ("hc_fn", "hc_base", "hc_scale"))):
            for name in names:
                getattr(module, name).copy_(load(name if module is hc else "head_" + name[3:]))
    f, attn_norm, ln_f = load("f", True), load("attn_norm", True), load("ln_f", True)

    def rms(x, w):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + rms_eps) * w

    keep = (
        mock.patch.object(torch.Tensor, "float", lambda t: t)
        if dtype == torch.float64
        else contextlib.nullcontext()
    )
    with keep:
        post, comb, collapsed = hc(h)
        x = rms(collapsed, attn_norm)
        # DeepseekV4DecoderLayer's update: post * F + comb^T H
        h2 = post.to(dtype).unsqueeze(-1) * f.unsqueeze(-2) + torch.matmul(
            comb.to(dtype).transpose(-1, -2), h
        )
        out = rms(head(h2), ln_f)
    loss = (x * load("gx")).sum() + (h2 * load("gh")).sum() + (out * load("gout")).sum()
    loss.backward()
    results = {"x": x, "h2": h2, "out": out, "grad_h": h.grad, "grad_f": f.grad}
    results.update({"grad_attn_norm": attn_norm.grad, "grad_ln_f": ln_f.grad})
    for name in ("fn", "base", "scale"):
        results["grad_" + name] = getattr(hc, name).grad
    for name in ("hc_fn", "hc_base", "hc_scale"):
        results["grad_head_" + name[3:]] = getattr(head, name).grad
    for name, value in results.items():
        np.save(f"{folder}/ref_{name}.npy", value.detach().numpy())


if __name__ == "__main__":
    for case in sys.argv[1:]:
        with open(f"{case}/case.txt") as file:
            n, iters, rms_eps, hc_eps = file.read().split()
        main(case, int(n), int(iters), float(rms_eps), float(hc_eps))
