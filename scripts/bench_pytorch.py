#!/usr/bin/env python3
"""The training step `siamese bench` times, written in plain PyTorch: the yardstick for
"is the C++ trainer faster than PyTorch itself on the same torch?" (docs/results.md).

The model is OLMo's (RoPE, SwiGLU, bias-free linears, a fused QKV projection; RMSNorm or
LayerNorm without bias, with or without weights; tied or untied head) as Pre-Norm (`pre`) or
SiameseNorm with a HybridNorm stream (`hybrid_pre`: per-head Q/K/V norms, the learnable c1,
depth-scaled X update, the output fusion LN_final(LN_f(X) + LN_yf(Y))), parameter for
parameter the model siamese builds: --parity checks that against siamese's own weights and
logits (tests/export/bench_pytorch_test.cpp), and the printed parameter count equals `siamese
bench`'s. One step is what siamese's step is: forward on tokens[:, :-1] of each micro-batch,
float32 cross-entropy against tokens[:, 1:] summed over the step's tokens, backward,
gradient-norm clipping at 1.0, AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on the
matrices), gradients dropped.

Modes: eager runs it as written with the fused AdamW; compile compiles the forward + loss
with torch.compile (inductor), and on the CPU the clipping + optimizer step too; compile-blocks
compiles each block on its own, as OLMo's trainer does. --device cuda times with the device
synchronized and adds peak memory and MFU. Prints one JSON line per mode and micro-batch.
scripts/bench_vs_pytorch.py alternates this with `siamese bench`.
"""

import argparse
import contextlib
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """OLMo's RMSLayerNorm: computed in float32, returned in the input's dtype."""

    def __init__(self, width, affine=True, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width)) if affine else None
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            h = h * self.weight
        return h.to(x.dtype)


class LayerNorm(nn.Module):
    """OLMo's default LayerNorm without bias: F.layer_norm, which CUDA autocast runs in float32."""

    def __init__(self, width, affine=True, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width)) if affine else None
        self.width, self.eps = (width,), eps

    def forward(self, x):
        return F.layer_norm(x, self.width, self.weight, None, self.eps)


def rope_tables(length, head_dim, theta=10000.0):
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], -1)
    return angles.cos(), angles.sin()


def rotate(t, cos, sin):
    first, second = t.chunk(2, -1)
    return (t * cos + torch.cat([-second, first], -1) * sin).to(t.dtype)


class Attention(nn.Module):
    def __init__(self, d, heads, qkv_norms, norm):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.att_proj = nn.Linear(d, 3 * d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.qkv_norms = qkv_norms
        if qkv_norms:
            self.q_norm, self.k_norm, self.v_norm = (norm(self.head_dim) for _ in range(3))

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = (
            p.view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in self.att_proj(x).split(d, -1)
        )
        if self.qkv_norms:
            q, k, v = self.q_norm(q), self.k_norm(k), self.v_norm(v)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # Under autocast the norms may hand over float32; attention runs in one dtype.
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else v.dtype
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
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
    def __init__(self, d, heads, mlp_ratio, layer, norm):
        super().__init__()
        self.attn, self.mlp = Attention(d, heads, False, norm), SwiGLU(d, mlp_ratio)
        self.attn_norm, self.ff_norm = norm(d), norm(d)

    def forward(self, x, y, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.ff_norm(x)), y


class HybridPreBlock(nn.Module):
    def __init__(self, d, heads, mlp_ratio, layer, norm):
        super().__init__()
        self.attn, self.mlp = Attention(d, heads, True, norm), SwiGLU(d, mlp_ratio)
        self.c1 = nn.Parameter(torch.ones(d))
        self.ff_norm, self.attn_y_norm, self.ff_y_norm, self.ff_input_norm = (norm(d) for _ in range(4))
        self.inv_depth = 1.0 / math.sqrt(2.0 * (layer + 1))

    def forward(self, x, y, cos, sin):
        a = self.attn(x * self.c1 + self.attn_y_norm(y), cos, sin)
        x, y = x + a * self.inv_depth, y + a
        x = self.ff_norm(x)
        f = self.mlp(self.ff_input_norm(x + self.ff_y_norm(y)))
        return x + f * self.inv_depth, y + f


class Model(nn.Module):
    """Parameter names are siamese's without its `topology.` prefix (see --parity)."""

    def __init__(self, a):
        super().__init__()
        d = a.d_model
        norm_class = {"rms": RMSNorm, "layer": LayerNorm}[a.norm]

        def norm(width):
            return norm_class(width, affine=not a.no_affine)

        block = {"pre": PreBlock, "hybrid_pre": HybridPreBlock}[a.topology]
        self.two_streams = a.topology != "pre"
        self.wte = nn.Embedding(a.vocab, d)
        self.blocks = nn.ModuleList([block(d, a.heads, a.mlp_ratio, layer, norm) for layer in range(a.layers)])
        self.ln_f = norm(d)
        if self.two_streams:
            self.ln_y_f, self.ln_final_f = norm(d), norm(d)
        self.ff_out = None if a.tied else nn.Linear(d, a.vocab, bias=False)
        cos, sin = rope_tables(a.seq, d // a.heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.wte(ids)
        y = x if self.two_streams else None
        for block in self.blocks:
            x, y = block(x, y, cos, sin)
        h = self.ln_final_f(self.ln_f(x) + self.ln_y_f(y)) if self.two_streams else self.ln_f(x)
        return F.linear(h, self.wte.weight if self.ff_out is None else self.ff_out.weight)


def flops_per_token(a):
    """siamese's count (model/accounting.cpp): 6 per weight of every product, with the head,
    plus 12 d per key for attention, every layer seeing the whole sequence."""
    d, hidden = a.d_model, a.mlp_ratio * a.d_model
    per_layer = 4 * d * d + d * hidden + (hidden // 2) * d
    return 6 * (a.layers * per_layer + d * a.vocab) + 12 * d * a.layers * a.seq


def print_profile(train_step, a, label):
    """The ops with the most self time per step: CPU time on the CPU, kernel time on CUDA."""
    cuda = a.device == "cuda"
    activities = [torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(a.steps):
            train_step()
    if cuda:
        torch.cuda.synchronize()

    def self_us(e):
        return e.self_device_time_total if cuda else e.self_cpu_time_total

    ops = sorted((e for e in prof.key_averages() if self_us(e) > 0), key=self_us, reverse=True)
    all_us = sum(self_us(e) for e in ops)
    out = sys.stderr
    where = "GPU kernel" if cuda else "op self"
    print(f"profile {label}: {all_us / 1e3 / a.steps:.1f} ms of {where} time per step over {a.steps} profiled steps",
          file=out)
    print(f"  {'op':<56} {'self ms':>10} {'share':>7} {'calls':>8}", file=out)
    for e in ops[: a.profile]:
        print(f"  {e.key[:56]:<56} {self_us(e) / 1e3 / a.steps:>10.2f} {100 * self_us(e) / all_us:>6.1f}% "
              f"{e.count / a.steps:>8.0f}", file=out)


def parity(cases):
    """For each case folder (written by tests/export/bench_pytorch_test.cpp): model.json holds this
    script's options, weights.safetensors siamese's parameters under its own names, ids.npy and
    logits.npy a batch and siamese's float32 logits for it. The model built from the options must
    hold exactly those tensors, name for name and shape for shape, and compute the same logits."""
    import numpy as np
    from safetensors.torch import load_file

    failed = 0
    for case in cases:
        with open(f"{case}/model.json") as f:
            a = argparse.Namespace(**json.load(f))
        model = Model(a)
        theirs = {k.removeprefix("topology."): v for k, v in load_file(f"{case}/weights.safetensors").items()}
        ours = dict(model.named_parameters())
        problems = [f"only siamese has {k}" for k in sorted(set(theirs) - set(ours))]
        problems += [f"only pytorch has {k}" for k in sorted(set(ours) - set(theirs))]
        problems += [
            f"{k}: siamese {list(theirs[k].shape)}, pytorch {list(v.shape)}"
            for k, v in ours.items()
            if k in theirs and theirs[k].shape != v.shape
        ]
        if not problems:
            model.load_state_dict(theirs, strict=False)
            with torch.no_grad():
                logits = model(torch.from_numpy(np.load(f"{case}/ids.npy")))
            err = (logits - torch.from_numpy(np.load(f"{case}/logits.npy"))).abs().max().item()
            if not err <= 1e-4:
                problems.append(f"max |logits - siamese's| = {err:.3g}")
        print(f"case {case}: " + ("ok" if not problems else "FAILED " + "; ".join(problems)), flush=True)
        failed += bool(problems)
    return 1 if failed else 0


def measure(a, mode, micro_batch):
    """One JSON line for one mode at one micro-batch, on a fresh model from the seed."""
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    model = Model(a).to(device)
    matrices = [p for p in model.parameters() if p.dim() == 2]
    vectors = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}]
    adamw = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8}
    # The fused kernel is PyTorch's fastest eager AdamW on either device. On the CPU the compiled
    # mode traces the for-loop implementation into its graph; on CUDA every mode keeps the fused
    # kernel, as torchtitan does next to a compiled model.
    compile_update = mode == "compile" and not cuda
    optimizer = torch.optim.AdamW(groups, **adamw, **({"foreach": False} if compile_update else {"fused": True}))
    amp = a.precision == "amp_bf16"
    tokens_per_step = a.batch * a.seq

    def loss_of(tokens):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(tokens[:, :-1])
        # Summed, and divided by the step's tokens: each micro-batch weighs its share of the step.
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1), reduction="sum"
        ) / (a.batch * (a.seq - 1))

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    if mode == "compile":
        loss_of = torch.compile(loss_of, dynamic=False)
        if compile_update:
            update = torch.compile(update)
    elif mode == "compile-blocks":
        for block in model.blocks:
            block.compile(dynamic=False)
    sdpa = contextlib.nullcontext()
    if cuda and a.sdpa != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        sdpa = sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[a.sdpa])
    generator = torch.Generator().manual_seed(a.seed)

    def train_step():
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), generator=generator).to(device)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with sdpa:
            for micro in tokens.split(micro_batch):
                loss_of(micro).backward()
        update()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    compile_start = time.perf_counter()
    train_step()  # compilation, where there is one, happens here
    first_s = time.perf_counter() - compile_start
    times = [train_step() for _ in range(max(a.warmup - 1, 0) + a.steps)][max(a.warmup - 1, 0) :]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        train_step()
    step_s = statistics.median(times)
    label = f"pytorch-{mode} {a.topology} micro-batch {micro_batch}"
    if a.profile:
        print_profile(train_step, a, label)
    result = {
        "impl": f"pytorch-{mode}",
        "precision": a.precision,
        "topology": a.topology,
        "norm": a.norm,
        "device": a.device,
        "micro_batch": micro_batch,
        "batch": a.batch,
        "params": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "step_s": step_s,
        "first_step_s": first_s,
        "tokens_per_s": tokens_per_step / step_s,
        "steps": len(times),
        "torch": torch.__version__,
    }
    if cuda:
        result["peak_memory_mib"] = torch.cuda.max_memory_allocated() / 2**20
        result["gpu"] = torch.cuda.get_device_name()
        if a.peak_tflops:
            result["mfu"] = tokens_per_step / step_s * flops_per_token(a) / (a.peak_tflops * 1e12)
    print(json.dumps(result), flush=True)
    torch._dynamo.reset()
    if cuda:
        torch.cuda.empty_cache()


MODES = ["eager", "compile", "compile-blocks"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", choices=["pre", "hybrid_pre"], default="pre")
    ap.add_argument(
        "--mode",
        default="eager",
        help="eager, compile or compile-blocks, or several comma-separated: each runs in turn in this "
        "process on a fresh model and prints its own line",
    )
    ap.add_argument(
        "--precision",
        choices=["fp32", "amp_bf16"],
        default="fp32",
        help="amp_bf16: the forward and loss under autocast to bfloat16, as siamese's precision: amp_bf16",
    )
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--mlp-ratio", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50304, help="embedding_size")
    ap.add_argument("--seq", type=int, default=256, help="max_sequence_length")
    ap.add_argument("--batch", type=int, default=8, help="rows per optimizer step (global_train_batch_size)")
    ap.add_argument(
        "--micro-batch",
        default=None,
        help="rows per forward and backward (device_train_microbatch_size; default --batch), or several "
        "comma-separated, each measured in turn",
    )
    ap.add_argument("--norm", choices=["rms", "layer"], default="rms", help="model.layer_norm_type rms or default")
    ap.add_argument(
        "--no-affine",
        action="store_true",
        help="norms without weights (OLMo-1B's layer_norm_with_affine and attention_layer_norm_with_affine: false)",
    )
    ap.add_argument("--tied", action="store_true", help="the LM head is the embedding matrix")
    ap.add_argument(
        "--sdpa",
        choices=["default", "flash", "cudnn"],
        default="flash",
        help="on CUDA, the attention kernel (flash: OLMo's flash_attention: true, which siamese's config forces)",
    )
    ap.add_argument("--peak-tflops", type=float, help="on CUDA, the peak for MFU (989: H100 and H200 dense bf16)")
    ap.add_argument("--seed", type=int, default=6198)
    ap.add_argument(
        "--profile",
        type=int,
        metavar="N",
        help="after timing, profile --steps more steps and print the N ops with the most self time "
        "per step to stderr (the table `siamese bench --profile N` prints)",
    )
    ap.add_argument(
        "--parity",
        nargs="+",
        metavar="CASE_DIR",
        help="check instead of timing: this model against siamese's weights and logits (see parity())",
    )
    a = ap.parse_args()
    if a.parity:
        sys.exit(parity(a.parity))
    modes = a.mode.split(",")
    for mode in modes:
        if mode not in MODES:
            ap.error(f"--mode {mode}: choose from {', '.join(MODES)}")
    micro_batches = [int(m) for m in (a.micro_batch or str(a.batch)).split(",")]
    for m in micro_batches:
        if m < 1 or a.batch % m:
            ap.error(f"--micro-batch {m} does not divide --batch {a.batch}")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_pytorch: --device cuda, but torch sees no CUDA device")
    failed = False
    for micro_batch in micro_batches:
        for mode in modes:
            try:
                measure(a, mode, micro_batch)
            # A mode that fails (a compiler error, out of memory) leaves the others' lines; torch's
            # compiler and memory errors are RuntimeErrors, and some of its checks assert.
            except (RuntimeError, AssertionError, OSError) as e:
                failed = True
                print(json.dumps({"impl": f"pytorch-{mode}", "micro_batch": micro_batch, "error": repr(e)[:2000]}),
                      flush=True)
                torch._dynamo.reset()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
