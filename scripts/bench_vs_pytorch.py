#!/usr/bin/env python3
"""siamese against PyTorch on the same training step and the same torch, measured side by side.

Alternates, round by round and each measurement in a process of its own: `siamese bench` on
configs/tiny/base.yaml's shape (untied head, batch 8 x 256, fp32, AdamW) for pre and
hybrid_pre, and scripts/bench_pytorch.py's plain-PyTorch version of that step, eager (with
siamese's allocator settings given to glibc, and with glibc's defaults) and under
torch.compile. Every process gets the same threads (OMP_NUM_THREADS, default 2) and the same
OpenMP spin (GOMP_SPINCOUNT=10000, what siamese sets for itself). Prints every measurement as
it comes, then per topology the median tokens/s of each implementation and siamese's ratio to
each; the parameter counts must agree or it stops. docs/results.md has the figures.

    ~/.cache/siamese/venv/bin/python scripts/bench_vs_pytorch.py [--rounds 4] [--steps 10]

With --device cuda (scripts/gpu_check.sh runs it) the shape is OLMo-1B's as configs/exps gives
it (LayerNorm without weights, or RMSNorm with --norm rms; tied embeddings, seq 2048, bf16
autocast, flash attention, global batch 16): per round and topology, `siamese bench` at each
micro-batch, then for each PyTorch mode (eager, compile-blocks, compile) and topology one
process that runs it at each micro-batch. Prints tokens/s, MFU and peak memory of each, and siamese's step
ratio to each PyTorch mode.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What siamese's configure_cpu_runtime does with mallopt, as glibc tunables for Python.
# mallopt(M_TRIM_THRESHOLD, -1) is SIZE_MAX: never trim.
SIAMESE_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615"


def run(cmd, env):
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def siamese_bench(config, topology, overrides, a, env):
    """One `siamese bench` of one topology: tokens/s, parameters, MFU and peak memory."""
    cmd = [a.binary, "bench", config, f"--model.residual={topology}", *overrides, *a.siamese_override,
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--rounds", "1"]
    line = next(t for t in run(cmd, env).splitlines() if t.startswith(topology + " "))
    peak = re.search(r"peak memory (\d+) MiB", line)
    return {
        "impl": "siamese",
        "tokens_per_s": float(re.search(r"tokens/s (\d+)", line).group(1)),
        "params": int(re.search(r"\((\d+) params", line).group(1)),
        "mfu": float(re.search(r"MFU ([\d.]+)%", line).group(1)) / 100,
        "peak_memory_mib": float(peak.group(1)) if peak else None,
    }


def siamese(topology, a, env):
    overrides = ["--model.weight_tying=false", "--global_train_batch_size=8", "--device_train_microbatch_size=8",
                 f"--precision={a.precision}"]
    return siamese_bench("configs/tiny/base.yaml", topology, overrides, a, env)


def pytorch(mode, topology, a, env):
    out = run(
        [
            sys.executable,
            str(ROOT / "scripts/bench_pytorch.py"),
            "--topology",
            topology,
            "--mode",
            mode,
            "--precision",
            a.precision,
            "--steps",
            str(a.steps),
            "--warmup",
            str(a.warmup),
        ],
        env,
    )
    return json.loads(out.strip().splitlines()[-1])


OLMO_1B = ["--d-model", "2048", "--heads", "16", "--layers", "16", "--mlp-ratio", "8", "--vocab", "50304",
           "--seq", "2048", "--tied", "--no-affine", "--precision", "amp_bf16", "--device", "cuda",
           "--sdpa", "flash"]


def siamese_cuda(topology, micro_batch, a, env):
    overrides = ["--data.paths=[]", "--data.synthetic=arithmetic", f"--global_train_batch_size={a.batch}",
                 f"--device_train_microbatch_size={micro_batch}", f"--peak_tflops={a.peak_tflops}"]
    if a.norm == "rms":
        overrides.append("--model.layer_norm_type=rms")
    return dict(siamese_bench("configs/exps/OLMo-1B-1e-3.yaml", topology, overrides, a, env), micro_batch=micro_batch)


def pytorch_cuda(topology, mode, a, env):
    cmd = [sys.executable, str(ROOT / "scripts/bench_pytorch.py"), "--topology", topology, "--norm", a.norm,
           *OLMO_1B, "--batch", str(a.batch), "--micro-batch", a.micro_batches, "--mode", mode,
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--peak-tflops", str(a.peak_tflops)]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    lines = [json.loads(t) for t in done.stdout.splitlines() if t.startswith("{")]
    for m in lines:
        if "error" in m:
            print(f"{topology}: {m['impl']} at micro-batch {m['micro_batch']} failed: {m['error']}", flush=True)
    if not lines:
        print(f"{topology}: pytorch-{mode} failed ({done.returncode}): {done.stderr[-2000:]}", flush=True)
    return [m for m in lines if "error" not in m]


def main_cuda(a):
    """Cheapest first, so that a run cut short by the device's time limit keeps the most: per
    round, siamese and PyTorch eager for every topology, then each compiled mode. Every
    measurement is printed, and written to --json, as it comes."""
    env = dict(os.environ)
    topologies = a.topologies.split(",")
    results = []

    def record(measured, r, topology):
        for m in measured:
            m.update(round=r + 1, topology=topology)
            results.append(m)
            mem = m.get("peak_memory_mib")
            print(
                f"round {r + 1} {topology:<10} {m['impl']:<24} micro-batch {m['micro_batch']:>2} "
                f"{m['tokens_per_s']:8.0f} tokens/s  MFU {100 * m.get('mfu', float('nan')):.1f}%  "
                f"peak {mem or 0:.0f} MiB  ({m['params']} params)",
                flush=True,
            )
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1))

    for r in range(a.rounds):
        for topology in topologies:
            record([siamese_cuda(topology, int(m), a, env) for m in a.micro_batches.split(",")], r, topology)
        for mode in a.modes.split(","):
            for topology in topologies:
                record(pytorch_cuda(topology, mode, a, env), r, topology)
    impls = list(dict.fromkeys(m["impl"] for m in results))
    print(f"\nmedian tokens/s over {a.rounds} round(s), OLMo-1B, {a.norm} norms, global batch {a.batch}:")
    print("| model | micro-batch | " + " | ".join(impls) + " | " + " | ".join(f"siamese / {n}" for n in impls[1:]) + " |")
    print("|---" * (2 + 2 * len(impls) - 1) + "|")
    for topology in topologies:
        mine = [m for m in results if m["topology"] == topology]
        if len({m["params"] for m in mine}) != 1:
            sys.exit(f"{topology}: the implementations build different models: {sorted({m['params'] for m in mine})}")
        for mb in sorted({m["micro_batch"] for m in mine}):
            med = {}
            for n in impls:
                got = [m["tokens_per_s"] for m in mine if m["impl"] == n and m["micro_batch"] == mb]
                med[n] = statistics.median(got) if got else float("nan")
            print(f"| {topology} | {mb} | " + " | ".join(f"{med[n]:.0f}" for n in impls) + " | "
                  + " | ".join(f"{med['siamese'] / med[n]:.3f}x" for n in impls[1:]) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--binary", default=str(ROOT / "build/siamese"))
    ap.add_argument("--siamese-override", action="append", default=[], metavar="--KEY=VALUE",
                    help="one more override of every `siamese bench` (gpu_check.sh: a failing kernel family off)")
    ap.add_argument("--topologies", default="pre,hybrid_pre")
    ap.add_argument("--precision", choices=["fp32", "amp_bf16"], default="fp32", help="for every implementation")
    ap.add_argument("--json", help="write every measurement here too")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: OLMo-1B on the GPU (see above)")
    ap.add_argument("--batch", type=int, default=16, help="cuda: rows per optimizer step")
    ap.add_argument("--micro-batches", default="4,8", help="cuda: comma-separated")
    ap.add_argument("--modes", default="eager,compile-blocks,compile", help="cuda: PyTorch's, comma-separated")
    ap.add_argument("--norm", choices=["layer", "rms"], default="layer", help="cuda: LayerNorm (the paper's) or RMSNorm")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="cuda: the peak for MFU")
    a = ap.parse_args()
    if a.device == "cuda":
        if a.json:
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        return main_cuda(a)
    if a.json:  # before the minutes of measuring, so a fresh folder does not lose them at the end
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)

    base = dict(os.environ)
    base.setdefault("OMP_NUM_THREADS", "2")
    base["GOMP_SPINCOUNT"] = "10000"
    base.pop("GLIBC_TUNABLES", None)
    tuned = dict(base, GLIBC_TUNABLES=SIAMESE_MALLOC)
    implementations = {
        "siamese": lambda t: siamese(t, a, base),
        "pytorch eager (siamese's malloc settings)": lambda t: pytorch("eager", t, a, tuned),
        "pytorch eager (default malloc)": lambda t: pytorch("eager", t, a, base),
        "pytorch compile (siamese's malloc settings)": lambda t: pytorch("compile", t, a, tuned),
    }
    topologies = a.topologies.split(",")
    results = []
    for r in range(a.rounds):
        for topology in topologies:
            for name, measure in implementations.items():
                m = measure(topology)
                m.update(round=r + 1, topology=topology, impl=name)
                results.append(m)
                print(
                    f"round {r + 1} {topology:<10} {name:<44} {m['tokens_per_s']:8.0f} tokens/s "
                    f"({m['params']} params)",
                    flush=True,
                )
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))

    print(
        f"\nmedian tokens/s over {a.rounds} alternating rounds, {a.precision}, "
        f"OMP_NUM_THREADS={base['OMP_NUM_THREADS']}:"
    )
    print(
        "| model | "
        + " | ".join(implementations)
        + " | "
        + " | ".join(f"siamese / {n}" for n in list(implementations)[1:])
        + " |"
    )
    print("|---" * (2 * len(implementations)) + "|")
    for topology in topologies:
        mine = [m for m in results if m["topology"] == topology]
        if len({m["params"] for m in mine}) != 1:
            sys.exit(
                f"{topology}: the implementations build different models: {sorted({m['params'] for m in mine})}"
            )
        med = {
            n: statistics.median(m["tokens_per_s"] for m in mine if m["impl"] == n) for n in implementations
        }
        ratios = [med["siamese"] / med[n] for n in list(implementations)[1:]]
        print(
            f"| {topology} | "
            + " | ".join(f"{med[n]:.0f}" for n in implementations)
            + " | "
            + " | ".join(f"{x:.2f}x" for x in ratios)
            + " |"
        )


if __name__ == "__main__":
    main()
