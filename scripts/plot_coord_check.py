#!/usr/bin/env python3
"""The coordinate-check figure from `siamese coord-check --out` CSV files (one per
parametrization), in the layout of the μP paper's coordinate checks (Yang et al. 2022,
arXiv 2203.03466, Fig. 5): one row per file, one panel per activation kind, the RMS against
the width or depth on log-log axes, one line per training step. Flat lines transfer; lines
that climb with the size do not.

    ~/.cache/siamese/venv/bin/python scripts/plot_coord_check.py standard.csv mup.csv \\
        --labels standard,mup --axis width --out docs/figures/coord_check_width

writes <out>.png (and --formats pdf,svg besides). Kinds, as the command's own table: the
embedding, attn_out and ffn_out averaged over layers, the last layer's residual stream, the
logits.
"""
import argparse
import csv
import re
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_style import make_out_folder

KINDS = ["attn_out", "ffn_out", "stream", "logits"]
FORMATS = {"png", "pdf", "svg"}
COLUMNS = ["axis", "size", "step", "site", "rms"]


def read(parser, path, axis):
    """kind -> step -> size -> mean RMS, for the rows of `axis`. A file without the command's
    columns, or without a row of the axis, is a usage error naming it."""
    sums = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: [0.0, 0])))
    last_layer = defaultdict(int)  # size -> the deepest layer whose stream was seen
    streams = defaultdict(dict)  # (size, step) -> layer -> RMS
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        parser.error(f"{path}: cannot read it ({e.strerror}); pass a CSV that siamese coord-check --out wrote")
    if not rows or any(c not in rows[0] for c in COLUMNS):
        parser.error(f"{path}: not a siamese coord-check CSV (needs the columns {','.join(COLUMNS)})")
    for line, r in enumerate(rows, start=2):
        if r["axis"] != axis:
            continue
        try:
            size, step, rms = int(r["size"]), int(r["step"]), float(r["rms"])
        except ValueError:
            parser.error(f"{path}:{line}: size, step and rms must be numbers")
        m = re.fullmatch(r"layer(\d+)\.(\w+)", r["site"])
        if m and m.group(2) in ("attn_out", "ffn_out"):
            cell = sums[m.group(2)][step][size]
            cell[0] += rms
            cell[1] += 1
        elif m:
            layer = int(m.group(1))
            last_layer[size] = max(last_layer[size], layer)
            streams[(size, step)][layer] = rms
        elif r["site"] in ("embedding", "logits"):
            sums[r["site"]][step][size] = [rms, 1]
    for (size, step), layers in streams.items():
        sums["stream"][step][size] = [layers[last_layer[size]], 1]
    if not sums:
        parser.error(f"{path}: no rows for --axis {axis}; the file was written with --{axis}s none")
    return {k: {s: {n: v[0] / v[1] for n, v in by.items()} for s, by in steps.items()} for k, steps in sums.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--labels", help="one per file, comma-separated (default: the file names)")
    p.add_argument("--axis", choices=["width", "depth"], default="width")
    p.add_argument("--out", required=True)
    p.add_argument("--formats", default="png", help="comma-separated: png, pdf, svg")
    a = p.parse_args()
    formats = [f for f in a.formats.split(",") if f]
    if not formats or any(f not in FORMATS for f in formats):
        p.error(f"--formats {a.formats}: choose from {', '.join(sorted(FORMATS))}")
    labels = a.labels.split(",") if a.labels else a.files
    if len(labels) != len(a.files):
        p.error(f"--labels names {len(labels)} files and {len(a.files)} were given; give one label per file")
    make_out_folder(p, a.out)
    data = [read(p, f, a.axis) for f in a.files]

    xlabel = "d_model" if a.axis == "width" else "n_layers"
    fig, axes = plt.subplots(len(data), len(KINDS), figsize=(3.2 * len(KINDS), 2.8 * len(data)), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for row, (label, kinds) in enumerate(zip(labels, data)):
        for col, kind in enumerate(KINDS):
            ax = axes[row][col]
            steps = kinds.get(kind, {})
            last = max(steps) if steps else 0
            for step in sorted(steps):
                sizes = sorted(steps[step])
                ax.plot(sizes, [steps[step][s] for s in sizes], marker="o", markersize=3,
                        color=cmap(step / max(1, last)), label=f"step {step}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
            ax.set_title(f"{label}: {kind}", fontsize=9)
            if row == len(data) - 1:
                ax.set_xlabel(xlabel)
            if col == 0:
                ax.set_ylabel("RMS")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    for f in formats:
        fig.savefig(f"{a.out}.{f}", dpi=120)
        print(f"wrote {a.out}.{f}")


if __name__ == "__main__":
    main()
