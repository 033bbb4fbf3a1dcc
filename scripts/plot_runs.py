#!/usr/bin/env python3
"""Training curves of several runs from their metrics.jsonl (matplotlib: the project Python, scripts/python_env.sh).

    ~/.cache/siamese/venv/bin/python scripts/plot_runs.py RUN_DIR... --out docs/figures/wt2

writes <out>_loss.png (training loss overlaid, smoothed), <out>_grad_norm.png (global
gradient norm before clipping, log scale) and, when the runs logged per-layer gradient
norms, <out>_layer_grad_norms.png (paper Fig. 5: per-layer norm by depth, averaged over
the logged steps); with --overview also <out>_overview.png, the loss and the per-layer
norms side by side, and, when the runs' evaluations scored held-out answers (the arithmetic
corpus), their exact match over steps beside them (the quickstart's figure). When the runs
logged residual-stream statistics (stream_stats_interval), <out>_streams.png: each stream's
RMS by depth and each sublayer's output RMS by depth at the last logged step, and the
largest attention logit over steps. Values are read as the trainer logged them; nothing is re-derived
except a moving average for readability.
"""
import argparse
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_style import log_axes, make_out_folder


def read_run(run):
    steps, loss, gnorm, layer, exact, streams = [], [], [], [], [], []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{run}/metrics.jsonl:{n}: not valid JSON ({e})")
            if j.get("event") == "stream_stats":
                streams.append(j)
            elif j.get("event") == "eval" and j.get("exact_match") is not None:
                exact.append((j["step"], j["exact_match"]))
            elif "layer_grad_norms" in j:
                layer.append(j["layer_grad_norms"])
            elif "event" not in j and "loss" in j and "lr" in j:
                steps.append(j["step"])
                loss.append(j["loss"] if j["loss"] is not None else math.nan)
                gnorm.append(j["grad_norm"] if j.get("grad_norm") is not None else math.nan)
    return steps, loss, gnorm, layer, exact, streams


def label_of(run):
    return os.path.basename(os.path.normpath(run))


def smooth(values, window):
    out, acc, q = [], 0.0, []
    for v in values:
        q.append(v)
        acc += v
        if len(q) > window:
            acc -= q.pop(0)
        out.append(acc / len(q))
    return out


def draw_loss(ax, data, cmap, window, ymax):
    for i, (r, (s, l, *_)) in enumerate(data.items()):
        ax.plot(s, smooth(l, window), label=label_of(r), color=cmap(i % cmap.N), lw=1.3)
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss (moving average of {window})")
    if ymax:
        ax.set_ylim(top=ymax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("Training loss")


def draw_layer_grad_norms(ax, layered, cmap):
    for i, (r, rows) in enumerate(layered.items()):
        n = len(rows[0])
        mean = [sum(row[k] for row in rows if row[k] is not None) / len(rows) for k in range(n)]
        ax.plot(range(n), mean, marker="o", ms=3, label=label_of(r), color=cmap(i % cmap.N))
    log_axes(ax, "layer", "gradient norm (mean over logged steps)", "Per-layer gradient norm", legend_columns=2)


def draw_exact_match(ax, scored, cmap, names):
    # What separates Pre-Norm from SiameseNorm on the quickstart is held-out accuracy, which
    # the loss curves alone do not show.
    for r, points in scored.items():
        steps, values = zip(*points)
        ax.plot(steps, [100 * v for v in values], marker="o", ms=3, label=label_of(r),
                color=cmap(names.index(r) % cmap.N))
    ax.set_xlabel("step")
    ax.set_ylabel("exact match on held-out problems (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("Held-out exact match")


def draw_streams(streamed, cmap, names, out):
    # What the normalization papers argue from, as the run trained: a Post-Norm-like stream
    # stays bounded over depth, a Pre-Norm-like one grows.
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.8))
    for r, rows in streamed.items():
        color = cmap(names.index(r) % cmap.N)
        last = rows[-1]
        for k, key in enumerate(sorted(key for key in last if key.startswith("rms."))):
            axes[0].plot(range(len(last[key])), last[key], marker="o", ms=3, ls=["-", "--", ":", "-."][k % 4],
                         color=color, label=f"{label_of(r)} {key[4:]}")
        for key, style in (("sublayer_rms.attn", "-"), ("sublayer_rms.ffn", "--")):
            if key in last:
                axes[1].plot(range(len(last[key])), last[key], marker="o", ms=3, ls=style, color=color,
                             label=f"{label_of(r)} {key.split('.')[1]}")
        axes[2].plot([row["step"] for row in rows], [max(row["max_attn_logit"]) for row in rows], marker="o",
                     ms=3, color=color, label=label_of(r))
    step = max(rows[-1]["step"] for rows in streamed.values())
    log_axes(axes[0], "depth (0: embeddings, i: after block i)", "stream RMS",
             f"Residual streams by depth (step {step})", legend_columns=2)
    log_axes(axes[1], "layer", "sublayer output RMS", f"Sublayer outputs by depth (step {step})", legend_columns=2)
    axes[2].set_xlabel("step")
    axes[2].set_ylabel("largest attention logit (over layers)")
    axes[2].grid(alpha=0.3)
    axes[2].legend(fontsize=7, ncol=2)
    axes[2].set_title("Attention logit growth")
    fig.tight_layout()
    fig.savefig(out + "_streams.png", dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", required=True, help="output prefix")
    p.add_argument("--smooth", type=int, default=10, help="moving-average window in steps")
    p.add_argument("--ymax", type=float, default=None, help="upper loss limit")
    p.add_argument("--overview", action="store_true",
                   help="also write <out>_overview.png: loss and per-layer gradient norms side by side")
    a = p.parse_args()
    make_out_folder(p, a.out)
    data = {r: read_run(r) for r in a.runs}
    cmap = plt.get_cmap("tab20" if len(a.runs) > 10 else "tab10")
    layered = {r: d[3] for r, d in data.items() if d[3]}

    fig, ax = plt.subplots(figsize=(9, 5.5))
    draw_loss(ax, data, cmap, a.smooth, a.ymax)
    fig.tight_layout()
    fig.savefig(a.out + "_loss.png", dpi=120)

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, (r, (s, _, g, *_)) in enumerate(data.items()):
        ax.plot(s, g, label=label_of(r), color=cmap(i % cmap.N), lw=0.9)
    log_axes(ax, "step", "global gradient norm (before clipping)", "Gradient norm", legend_columns=2)
    fig.tight_layout()
    fig.savefig(a.out + "_grad_norm.png", dpi=120)

    if layered:
        fig, ax = plt.subplots(figsize=(8, 5))
        draw_layer_grad_norms(ax, layered, cmap)
        fig.tight_layout()
        fig.savefig(a.out + "_layer_grad_norms.png", dpi=120)

    streamed = {r: d[5] for r, d in data.items() if d[5]}
    if streamed:
        draw_streams(streamed, cmap, list(data), a.out)

    if a.overview:
        scored = {r: d[4] for r, d in data.items() if d[4]}
        panels = 3 if scored else 2
        fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.8))
        draw_loss(axes[0], data, cmap, a.smooth, a.ymax)
        if layered:
            draw_layer_grad_norms(axes[1], layered, cmap)
        else:
            axes[1].set_axis_off()
        if scored:
            draw_exact_match(axes[2], scored, cmap, list(data))
        fig.tight_layout()
        fig.savefig(a.out + "_overview.png", dpi=120)


if __name__ == "__main__":
    main()
