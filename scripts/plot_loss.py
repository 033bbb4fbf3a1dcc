#!/usr/bin/env python3
"""Plot training loss (and eval loss) from one or more run folders' metrics.jsonl.

Usage: scripts/plot_loss.py RUN_DIR [RUN_DIR ...] --out loss.png
Reads only metrics.jsonl (the trainer computes every number once; this script never
re-derives them). Needs matplotlib: the project's Python (scripts/python_env.sh) has it.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(run_dir):
    steps, losses, evals = [], [], {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("event") == "eval":
                evals.setdefault(row["label"], []).append((row["step"], row["loss"]))
            elif "event" not in row and row.get("loss") is not None:
                steps.append(row["step"])
                losses.append(row["loss"])
    return steps, losses, evals


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", default="loss.png")
    args = p.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in args.runs:
        name = os.path.basename(os.path.normpath(run))
        steps, losses, evals = read(run)
        line, = ax.plot(steps, losses, label=f"{name} train", linewidth=1)
        for label, points in evals.items():
            ax.plot([s for s, _ in points], [l for _, l in points], "o--",
                    color=line.get_color(), label=f"{name} {label}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
