"""The PyPI package deep-cross-attention (0.1.1, DCAGPT) on the weights, token ids and output
weights g that tests/model/dca_test.cpp wrote into each FOLDER under the C++ parameter names.
Writes back its logits and the gradients of sum(logits * g), under the same names.

    dca_reference.py FOLDER...

FOLDER/case.txt holds "NUM_TOKENS DIM HEADS DEPTH PAST_LAYERS_K".

Two things stand between the package's weights and ours. Its rotary embedding (the package
rotary-embedding-torch) rotates interleaved channel pairs (2i, 2i + 1) where ours rotates
(i, i + head_dim / 2) at the same frequency: the query and key rows of each head are permuted
so that both rotate the same pairs, which leaves q . k as it is. And its frequency table is
kept in float32 after the model is cast to float64, as our RoPE builds its table: the angles
then agree to the bit and the comparison sees the rest of the arithmetic.
"""

import sys

import numpy as np
import torch
from deep_cross_attention import DCAGPT


def rope_pairs(dim, heads):
    """index[ours] = package row: channel j < hd / 2 of a head is the package's 2j, the rest 2j' + 1."""
    hd = dim // heads
    within = [2 * j for j in range(hd // 2)] + [2 * j + 1 for j in range(hd // 2)]
    return torch.tensor([h * hd + p for h in range(heads) for p in within])


def names(depth):
    """Package parameter -> ours, for every parameter both have."""
    out = {
        "token_emb.weight": "wte.weight",
        "final_grn.to_aggregate.0.weight": "topology.grn_norm_f.weight",
        "final_grn.to_aggregate.1.weight": "topology.grn_weight_f",
        "final_grn.bias": "topology.grn_bias_f",
        "norm.weight": "topology.ln_f.weight",
        "to_logits.weight": "ff_out.weight",
    }
    for l in range(depth):
        p, b, t = f"dca_blocks.{l}.", f"blocks.{l}.", f"topology.blocks.{l}."
        out.update({
            p + "qkv_grn.to_aggregate.0.weight": t + "grn_norm.weight",
            p + "qkv_grn.to_aggregate.1.weight": t + "grn_weight",
            p + "qkv_grn.bias": t + "grn_bias",
            p + "attn.to_out.weight": b + "attn.attn_out.weight",
            p + "pre_ff_norm.weight": t + "ff_norm.weight",
        })
        for x in "qkv":
            out[p + f"attn.to_{x}.0.weight"] = t + f"{x}_input_norm.weight"
        for theirs, ours in (("ff.0", "ff_proj"), ("ff.2", "ff_out")):
            for kind in ("weight", "bias"):
                out[f"{p}{theirs}.{kind}"] = f"{b}mlp.{ours}.{kind}"
    return out


def main(folder, num_tokens, dim, heads, depth, k):
    def load(name):
        return torch.from_numpy(np.load(f"{folder}/{name}.npy"))

    ids, g = load("ids"), load("g")
    model = DCAGPT(num_tokens=num_tokens, dim=dim, depth=depth, past_layers_k=k, dim_head=dim // heads,
                   heads=heads).to(g.dtype)
    for block in model.dca_blocks:
        block.attn.rotary_embed.float()
    pairs = rope_pairs(dim, heads)
    params = dict(model.named_parameters())
    mapped = names(depth)
    with torch.no_grad():
        for theirs, ours in mapped.items():
            params[theirs].copy_(load(ours))
        for l, block in enumerate(model.dca_blocks):
            q, kk, v = load(f"blocks.{l}.attn.att_proj.weight").split(dim)
            block.attn.to_q[1].weight.copy_(q[pairs.argsort()])
            block.attn.to_k[1].weight.copy_(kk[pairs.argsort()])
            block.attn.to_v[1].weight.copy_(v)

    logits = model(ids)
    (logits * g).sum().backward()
    results = {"logits": logits}
    for theirs, ours in mapped.items():
        results["grad_" + ours] = params[theirs].grad
    for l, block in enumerate(model.dca_blocks):
        results[f"grad_blocks.{l}.attn.att_proj.weight"] = torch.cat((
            block.attn.to_q[1].weight.grad[pairs],
            block.attn.to_k[1].weight.grad[pairs],
            block.attn.to_v[1].weight.grad,
        ))
    for name, value in results.items():
        np.save(f"{folder}/ref_{name}.npy", value.detach().numpy())


if __name__ == "__main__":
    for case in sys.argv[1:]:
        with open(f"{case}/case.txt") as file:
            main(case, *map(int, file.read().split()))
