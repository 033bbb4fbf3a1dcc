#!/usr/bin/env python3
"""Final training loss against learning rate, one line per model (the topology and the settings
that set runs of it apart: the report's "Model"; the paper's stability figure), from
`siamese report RUNS... --json runs.json`. Seeds of one model and learning
rate are averaged (error bar: standard deviation); diverged runs are drawn as crosses at the
top of the plot. Loss curves of the same runs: scripts/plot_runs.py.

    ~/.cache/siamese/venv/bin/python scripts/plot_report.py runs.json --out figures/sweep_lr.png
"""
import argparse
import json
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_style import make_out_folder


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", help="JSON written by siamese report --json")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    make_out_folder(p, a.out)
    with open(a.report) as f:
        runs = json.load(f)
    ok, diverged = defaultdict(lambda: defaultdict(list)), defaultdict(set)
    for r in runs:
        if r["learning_rate"] is None or r["state"] == "never started":
            continue
        if r["diverged"] or r["final_loss"] is None:
            diverged[r["model"]].add(r["learning_rate"])
        else:
            ok[r["model"]][r["learning_rate"]].append(r["final_loss"])
    finite = [v for by_lr in ok.values() for vs in by_lr.values() for v in vs]
    top = max(finite) * 1.05 if finite else 1.0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("tab10")
    for i, topology in enumerate(sorted(set(ok) | set(diverged))):
        lrs = sorted(ok[topology])
        means = [statistics.mean(ok[topology][lr]) for lr in lrs]
        sds = [statistics.stdev(ok[topology][lr]) if len(ok[topology][lr]) > 1 else 0.0 for lr in lrs]
        color = cmap(i % cmap.N)
        ax.errorbar(lrs, means, yerr=sds, marker="o", capsize=3, color=color, label=topology)
        bad = sorted(diverged[topology])
        if bad:
            ax.scatter(bad, [top] * len(bad), marker="x", s=60, color=color)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final training loss (x: diverged)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
