#!/usr/bin/env python3
"""Figures from `siamese analyze` JSON files (one per checkpoint / topology).

    ~/.cache/siamese/venv/bin/python scripts/plot_analysis.py A.json B.json ... --out docs/figures/wt2

writes <out>_magnitude.png (hidden-state L2 norm by depth, every stream, log scale; paper
Fig. 2a), <out>_pruning.png (validation perplexity after dropping the last k blocks, log
scale), and, when a model has two streams, <out>_mixing.png (X-stream share of the norm
scales at each fusion site, paper Fig. 6, with the final fusion weights in the legend) and
<out>_logit_lens.png (agreement of each stream's own prediction with the model's).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_style import log_axes, make_out_folder


def name_of(path, doc):
    return f"{doc['topology']} ({os.path.basename(os.path.dirname(doc['checkpoint'])) or path})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    make_out_folder(p, a.out)
    docs = []
    for f in a.files:
        with open(f) as fh:
            docs.append((name_of(f, d := json.load(fh)), d))
    cmap = plt.get_cmap("tab10")

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, d) in enumerate(docs):
        for j, (stream, values) in enumerate(sorted(d["magnitude"]["streams"].items())):
            ax.plot(range(-1, len(values) - 1), values, marker="o", ms=3, color=cmap(i % 10),
                    ls=["-", "--", ":"][j % 3], label=f"{name} stream {stream}")
    log_axes(ax, "layer (-1 = embeddings)", "mean L2 norm of the residual stream", "Hidden-state magnitude by depth")
    fig.tight_layout()
    fig.savefig(a.out + "_magnitude.png", dpi=120)

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, d) in enumerate(docs):
        pts = d["effective_depth"]
        ax.plot([q["dropped"] for q in pts], [q["perplexity"] for q in pts], marker="o", ms=3,
                color=cmap(i % 10), label=name)
    log_axes(ax, "last blocks dropped (k)", "validation perplexity", "Effective depth: perplexity after dropping the last k blocks")
    fig.tight_layout()
    fig.savefig(a.out + "_pruning.png", dpi=120)

    two = [(n, d) for n, d in docs if d["mixing"]["sites"]]
    if two:
        fig, ax = plt.subplots(figsize=(8, 5))
        for i, (name, d) in enumerate(two):
            for site, ls in (("attn", "-"), ("ff", "--")):
                pts = [s for s in d["mixing"]["sites"] if s["site"] == site]
                if not pts:
                    continue
                fin = d["mixing"].get("final")
                extra = f"; final |ln_f| {fin['x']:.2f} vs |ln_y_f| {fin['y']:.2f}" if fin and site == "attn" else ""
                ax.plot([s["layer"] for s in pts], [s["x_share"] for s in pts], ls=ls, marker="o", ms=3,
                        color=cmap(i % 10), label=f"{name} {site}{extra}")
        ax.axhline(0.5, color="grey", lw=0.8)
        ax.set_ylim(0, 1)
        ax.set_xlabel("layer")
        ax.set_ylabel("X-stream share  x / (x + y) of mean |norm weight|")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title("Stream mixing from learned norm scales")
        fig.tight_layout()
        fig.savefig(a.out + "_mixing.png", dpi=120)

        fig, ax = plt.subplots(figsize=(8, 4.5))
        labels, overall, disagree = [], [], []
        for name, d in two:
            for stream, v in sorted(d["logit_lens"]["agreement"].items()):
                labels.append(f"{name}\nstream {stream}")
                overall.append(100 * v)
                disagree.append(100 * d["logit_lens"]["agreement_where_disagree"][stream])
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], overall, width=0.4, label="all positions")
        ax.bar([x + 0.2 for x in xs], disagree, width=0.4, label="where the streams disagree")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("% matching the model's prediction")
        ax.legend(fontsize=8)
        ax.set_title("Logit lens per stream")
        fig.tight_layout()
        fig.savefig(a.out + "_logit_lens.png", dpi=120)


if __name__ == "__main__":
    main()
