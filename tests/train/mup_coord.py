"""The `mup` package's own coordinate check (mup.coord_check.get_coord_data, Yang et al. 2022)
on a plain Pre-Norm transformer written here with mup's layers, at the widths given, for
tests/train/parametrization_test.cpp to set beside `siamese coord-check`.

Under --parametrization mup: mup.set_base_shapes against the first width, mup.init.normal_ for
the matrices (std 0.02 at the base width), MuSharedReadout (tied, logits / width_mult), attention
q.k scaled 1/head_dim relative to the base, MuAdamW. Under standard: N(0, 0.02) everywhere, a
tied readout and torch's AdamW. Writes {"slopes": {kind: slope}} where a kind's RMS (mup's l2
statistic, the module outputs averaged over layers) at the last step is fitted against width on
log2 axes, as siamese's coord_slopes does."""

import argparse
import json
import math

import mup
import numpy as np
import torch
import torch.nn.functional as F
from mup.coord_check import get_coord_data
from torch import nn


class Attention(nn.Module):
    def __init__(self, d, heads, base_head_dim, scaled):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.scale = 1 / math.sqrt(self.hd) * ((base_head_dim / self.hd) if scaled else 1.0)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = (t.view(B, T, self.heads, self.hd).transpose(1, 2) for t in self.qkv(x).split(d, -1))
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.out(ctx.transpose(1, 2).reshape(B, T, d))


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, d, heads, base_head_dim, scaled):
        super().__init__()
        self.attn_norm, self.ff_norm = nn.RMSNorm(d), nn.RMSNorm(d)
        self.attn, self.mlp = Attention(d, heads, base_head_dim, scaled), Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.ff_norm(x))


class PreNorm(nn.Module):
    def __init__(self, d, heads, layers, vocab, base_head_dim, use_mup):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, base_head_dim, use_mup) for _ in range(layers))
        self.ln_f = nn.RMSNorm(d)
        self.readout = mup.MuSharedReadout(self.wte.weight, bias=False) if use_mup else None

    def forward(self, ids):
        x = self.wte(ids)
        for b in self.blocks:
            x = b(x)
        h = self.ln_f(x)
        return self.readout(h) if self.readout is not None else F.linear(h, self.wte.weight)


def build(width, args, use_mup):
    def make(d):
        return PreNorm(d, args.heads, args.layers, args.vocab, args.widths[0] // args.heads, use_mup)

    def lazy():
        torch.manual_seed(args.seed)
        model = make(width)
        if use_mup:
            mup.set_base_shapes(model, make(args.widths[0]), delta=make(2 * args.widths[0]), rescale_params=False)
        for name, p in model.named_parameters():
            if p.dim() < 2:
                continue
            if use_mup and not name.startswith("wte"):
                mup.init.normal_(p, std=0.02)
            else:
                nn.init.normal_(p, std=0.02)
        return model

    return lazy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parametrization", choices=["standard", "mup"], required=True)
    ap.add_argument("--widths", default="32,64,128")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.widths = [int(w) for w in args.widths.split(",")]
    use_mup = args.parametrization == "mup"
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, args.vocab, (32, 65), generator=g)
    data = [(ids[:, :-1], ids[:, 1:].reshape(-1))]
    models = {w: build(w, args, use_mup) for w in args.widths}
    df = get_coord_data(models, data, optimizer="adamw", lr=args.lr, mup=use_mup, nsteps=args.steps + 1,
                        flatten_output=True, cuda=False, show_progress=False, output_fdict={"l2": "l2"})
    # mup counts steps from 1 at init; siamese from 0. The last forward sits after `steps` updates.
    last = df[df.t == args.steps + 1]
    kinds = {"attn_out": r"^blocks\.\d+\.attn$", "ffn_out": r"^blocks\.\d+\.mlp$", "logits": r"^$"}
    slopes = {}
    for kind, pattern in kinds.items():
        rows = last[last.module.str.match(pattern)]
        rms = rows.groupby("width").l2.mean().reindex(args.widths)
        slopes[kind] = float(np.polyfit(np.log2(args.widths), np.log2(rms.values), 1)[0])
    with open(args.out, "w") as f:
        json.dump({"slopes": slopes}, f)
    print(json.dumps(slopes))


if __name__ == "__main__":
    main()
