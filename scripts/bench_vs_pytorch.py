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


def siamese(binary, topology, a, env):
    out = run(
        [
            binary,
            "bench",
            "configs/tiny/base.yaml",
            f"--model.residual={topology}",
            "--model.weight_tying=false",
            "--global_train_batch_size=8",
            "--device_train_microbatch_size=8",
            f"--precision={a.precision}",
            "--steps",
            str(a.steps),
            "--warmup",
            str(a.warmup),
            "--rounds",
            "1",
        ],
        env,
    )
    line = next(t for t in out.splitlines() if t.startswith(topology + " "))
    return {
        "tokens_per_s": float(re.search(r"tokens/s (\d+)", line).group(1)),
        "params": int(re.search(r"\((\d+) params", line).group(1)),
    }


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--binary", default=str(ROOT / "build/siamese"))
    ap.add_argument("--topologies", default="pre,hybrid_pre")
    ap.add_argument("--precision", choices=["fp32", "amp_bf16"], default="fp32", help="for every implementation")
    ap.add_argument("--json", help="write every measurement here too")
    a = ap.parse_args()
    if a.json:  # before the minutes of measuring, so a fresh folder does not lose them at the end
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)

    base = dict(os.environ)
    base.setdefault("OMP_NUM_THREADS", "2")
    base["GOMP_SPINCOUNT"] = "10000"
    base.pop("GLIBC_TUNABLES", None)
    tuned = dict(base, GLIBC_TUNABLES=SIAMESE_MALLOC)
    implementations = {
        "siamese": lambda t: siamese(a.binary, t, a, base),
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
