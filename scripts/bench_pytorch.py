#!/usr/bin/env python3
"""The training step `siamese bench` times, written in plain PyTorch: the yardstick for
"is the C++ trainer faster than PyTorch itself on the same torch?" (docs/results.md).

The model is configs/tiny/base.yaml's shape (RMSNorm, RoPE, SwiGLU, bias-free linears, an
OLMo-style fused QKV projection) as Pre-Norm (`pre`) or SiameseNorm with a HybridNorm stream
(`hybrid_pre`: per-head Q/K/V RMSNorms, the learnable c1, depth-scaled X update, the output
fusion LN_final(LN_f(X) + LN_yf(Y))), parameter for parameter the models siamese builds, so
the printed parameter count equals `siamese bench`'s. One step is what siamese's step is:
forward on tokens[:, :-1], float32 cross-entropy against tokens[:, 1:], backward, global
gradient-norm clipping at 1.0, AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on the
matrices), gradients dropped.

--mode eager runs it as written, with PyTorch's fused CPU AdamW; --mode compile compiles the
forward + loss and the clipping + optimizer step with torch.compile (inductor), the fastest
PyTorch offers without hand-written kernels. Prints one JSON line: parameters, the median
step time over the timed steps and tokens/s (batch x sequence length per step, as siamese
counts). scripts/bench_vs_pytorch.py alternates this with `siamese bench`.
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(length, head_dim, theta=10000.0):
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], -1)
    return angles.cos(), angles.sin()


def rotate(t, cos, sin):
    first, second = t.chunk(2, -1)
    return t * cos + torch.cat([-second, first], -1) * sin


class Attention(nn.Module):
    def __init__(self, d, heads, qkv_norms):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.att_proj = nn.Linear(d, 3 * d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.norms = nn.ModuleList([RMSNorm(self.head_dim) for _ in range(3)]) if qkv_norms else None

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = (
            p.view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in self.att_proj(x).split(d, -1)
        )
        if self.norms is not None:
            q, k, v = (norm(p) for norm, p in zip(self.norms, (q, k, v)))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.attn_out(context.transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    def __init__(self, d, mlp_ratio):
        super().__init__()
        self.ff_proj = nn.Linear(d, mlp_ratio * d, bias=False)
        self.ff_out = nn.Linear(mlp_ratio * d // 2, d, bias=False)

    def forward(self, x):
        value, gate = self.ff_proj(x).chunk(2, -1)
        return self.ff_out(F.silu(gate) * value)


class PreBlock(nn.Module):
    def __init__(self, d, heads, mlp_ratio, layer):
        super().__init__()
        self.attn, self.mlp = Attention(d, heads, qkv_norms=False), SwiGLU(d, mlp_ratio)
        self.attn_norm, self.ff_norm = RMSNorm(d), RMSNorm(d)

    def forward(self, streams, cos, sin):
        (x,) = streams
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return (x + self.mlp(self.ff_norm(x)),)


class HybridPreBlock(nn.Module):
    def __init__(self, d, heads, mlp_ratio, layer):
        super().__init__()
        self.attn, self.mlp = Attention(d, heads, qkv_norms=True), SwiGLU(d, mlp_ratio)
        self.c1 = nn.Parameter(torch.ones(d))
        self.ff_norm, self.attn_y_norm, self.ff_y_norm, self.ff_input_norm = (RMSNorm(d) for _ in range(4))
        self.inv_depth = 1.0 / math.sqrt(2.0 * (layer + 1))

    def forward(self, streams, cos, sin):
        x, y = streams
        a = self.attn(x * self.c1 + self.attn_y_norm(y), cos, sin)
        x, y = x + a * self.inv_depth, y + a
        x = self.ff_norm(x)
        f = self.mlp(self.ff_input_norm(x + self.ff_y_norm(y)))
        return x + f * self.inv_depth, y + f


class Model(nn.Module):
    def __init__(self, topology, vocab, d, heads, layers, mlp_ratio, length, tied):
        super().__init__()
        block = {"pre": PreBlock, "hybrid_pre": HybridPreBlock}[topology]
        self.streams = 1 if topology == "pre" else 2
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([block(d, heads, mlp_ratio, layer) for layer in range(layers)])
        self.final_norms = nn.ModuleList([RMSNorm(d) for _ in range(1 if self.streams == 1 else 3)])
        self.lm_head = None if tied else nn.Linear(d, vocab, bias=False)
        cos, sin = rope_tables(length, d // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        streams = (self.wte(ids),) * self.streams
        for block in self.blocks:
            streams = block(streams, cos, sin)
        if self.streams == 1:
            h = self.final_norms[0](streams[0])
        else:
            ln_f, ln_y_f, ln_final_f = self.final_norms
            h = ln_final_f(ln_f(streams[0]) + ln_y_f(streams[1]))
        return F.linear(h, self.wte.weight if self.lm_head is None else self.lm_head.weight)


def print_profile(train_step, a):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(a.steps):
            train_step()
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    all_us = sum(e.self_cpu_time_total for e in ops)
    out = sys.stderr
    print(f"profile pytorch-{a.mode} {a.topology}: {all_us / 1e3 / a.steps:.1f} ms of op self time per step "
          f"over {a.steps} profiled steps", file=out)
    print(f"  {'op':<56} {'self ms':>10} {'share':>7} {'total ms':>10} {'calls':>8}", file=out)
    for e in ops[: a.profile]:
        print(f"  {e.key[:56]:<56} {e.self_cpu_time_total / 1e3 / a.steps:>10.2f} "
              f"{100 * e.self_cpu_time_total / all_us:>6.1f}% {e.cpu_time_total / 1e3 / a.steps:>10.2f} "
              f"{e.count / a.steps:>8.0f}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", choices=["pre", "hybrid_pre"], default="pre")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument(
        "--precision",
        choices=["fp32", "amp_bf16"],
        default="fp32",
        help="amp_bf16: the forward and loss under CPU autocast to bfloat16, as siamese's precision: amp_bf16",
    )
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--mlp-ratio", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50304, help="embedding_size")
    ap.add_argument("--seq", type=int, default=256, help="max_sequence_length")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tied", action="store_true", help="the LM head is the embedding matrix")
    ap.add_argument("--seed", type=int, default=6198)
    ap.add_argument(
        "--profile",
        type=int,
        metavar="N",
        help="after timing, profile --steps more steps and print the N ops with the most self time "
        "per step to stderr (the table `siamese bench --profile N` prints)",
    )
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    model = Model(a.topology, a.vocab, a.d_model, a.heads, a.layers, a.mlp_ratio, a.seq, a.tied)
    matrices = [p for p in model.parameters() if p.dim() == 2]
    vectors = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}]
    adamw = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8}
    # Compiled optimizer steps are traced from the for-loop implementation; eager gets the
    # fused CPU kernel, PyTorch's fastest eager AdamW.
    optimizer = torch.optim.AdamW(
        groups, **adamw, **({"fused": True} if a.mode == "eager" else {"foreach": False})
    )

    def loss_of(tokens):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "amp_bf16"):
            logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    if a.mode == "compile":
        loss_of, update = torch.compile(loss_of), torch.compile(update)
    generator = torch.Generator().manual_seed(a.seed)

    def train_step():
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), generator=generator)
        start = time.perf_counter()
        loss_of(tokens).backward()
        update()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    times = [train_step() for _ in range(a.warmup + a.steps)][a.warmup :]
    step_s = statistics.median(times)
    if a.profile:
        print_profile(train_step, a)
    print(
        json.dumps(
            {
                "impl": f"pytorch-{a.mode}",
                "precision": a.precision,
                "topology": a.topology,
                "params": sum(p.numel() for p in model.parameters()),
                "threads": torch.get_num_threads(),
                "step_s": step_s,
                "tokens_per_s": a.batch * a.seq / step_s,
                "steps": len(times),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
