#!/usr/bin/env python3
"""Figures of a comparison, from `siamese report ... --json` (or the report.json that
`siamese report SWEEP_FOLDER` writes) and the runs' metrics.jsonl:

    ~/.cache/siamese/venv/bin/python scripts/plot_report.py runs/cmp/report.json --out figures/cmp

writes <out>_curves.png: one row per learning rate, one column per curve (training loss, then
each evaluator's validation perplexity and, where one was logged, exact match), one colour per
model (the report's "Model": the topology and the settings that set runs of it apart). The
line is the mean over the model's seeds at each logged step, the band their minimum to maximum
(--band std: mean ± one standard deviation); training losses are moving averages over --smooth
logged steps. Runs the report marked diverged are left out of the mean and counted in the
legend. <out>_lr.png: final training loss against learning rate, one line per model (the paper's
stability figure; seeds averaged, error bar: standard deviation; diverged runs drawn as crosses
at the top). Models keep the report's order, so colours follow the sweep's.
"""
import argparse
import json
import math
import os
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_runs import smooth
from plot_style import make_out_folder


def run_folder(run, report):
    """A run's folder: as the report names it, else beside the report (a sweep folder's
    report.json read from another working directory)."""
    if os.path.isdir(run):
        return run
    beside = os.path.join(os.path.dirname(os.path.abspath(report)), os.path.basename(os.path.normpath(run)))
    if os.path.isdir(beside):
        return beside
    raise SystemExit(f"{report}: run folder {run} not found (nor {beside}); run plot_report.py from where "
                     "`siamese report` ran")


def read_curves(folder):
    """{"train loss": {step: loss}, "<label> PPL": {...}, "<label> exact %": {...}} of one run."""
    curves = defaultdict(dict)
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                j = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{folder}/metrics.jsonl:{n}: not valid JSON ({e})")
            if j.get("event") == "eval" and "label" in j:
                if j.get("perplexity") is not None:
                    curves[f"{j['label']} PPL"][j["step"]] = j["perplexity"]
                if j.get("exact_match") is not None:
                    curves[f"{j['label']} exact %"][j["step"]] = 100 * j["exact_match"]
            elif "event" not in j and "loss" in j and "lr" in j:
                curves["train loss"][j["step"]] = j["loss"] if j["loss"] is not None else math.nan
    return curves


def seed_band(series, band):
    """Steps, mean, low and high over the seeds' {step: value} dicts, at steps all of them logged."""
    steps = sorted(set.intersection(*(set(s) for s in series)))
    mean, low, high = [], [], []
    for step in steps:
        values = [s[step] for s in series]
        m = statistics.fmean(values)
        mean.append(m)
        if band == "std":
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            low.append(m - sd)
            high.append(m + sd)
        else:
            low.append(min(values))
            high.append(max(values))
    return steps, mean, low, high


def draw_curves(runs, report, out, band, window):
    models = list(dict.fromkeys(r["model"] for r in runs))
    lrs = sorted({r["learning_rate"] for r in runs})
    kept, dropped = defaultdict(list), defaultdict(int)  # (model, lr) -> curves, diverged count
    for r in runs:
        if r["diverged"]:
            dropped[(r["model"], r["learning_rate"])] += 1
        else:
            kept[(r["model"], r["learning_rate"])].append(read_curves(run_folder(r["run"], report)))
    names = list(dict.fromkeys(name for cs in kept.values() for c in cs for name in c))
    columns = ["train loss"] + sorted(n for n in names if n.endswith(" PPL")) + sorted(
        n for n in names if n.endswith(" exact %"))
    fig, axes = plt.subplots(len(lrs), len(columns), figsize=(4.6 * len(columns), 3.4 * len(lrs)), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for row, lr in enumerate(lrs):
        for col, name in enumerate(columns):
            ax = axes[row][col]
            for i, model in enumerate(models):
                series = [c[name] for c in kept[(model, lr)] if c.get(name)]
                if name == "train loss":
                    series = [dict(zip(sorted(s), smooth([s[k] for k in sorted(s)], window))) for s in series]
                if not series:
                    continue
                steps, mean, low, high = seed_band(series, band)
                left_out = dropped[(model, lr)]
                label = f"{model} (n={len(series)}" + (f", {left_out} diverged left out)" if left_out else ")")
                color = cmap(i % cmap.N)
                ax.plot(steps, mean, color=color, lw=1.4, label=label, marker="o" if len(steps) < 8 else None, ms=3)
                ax.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)
            if name.endswith(" PPL"):
                ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel(name + (f" (moving average of {window})" if name == "train loss" else ""))
            ax.set_title(f"{name}, learning rate {lr:g}", fontsize=10)
            ax.grid(alpha=0.3, which="both")
            if ax.lines:
                ax.legend(fontsize=7)
    spread = "min to max" if band == "minmax" else "± one standard deviation"
    fig.suptitle(f"Mean over seeds, band: {spread} over seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(out + "_curves.png", dpi=120)
    print(f"wrote {out}_curves.png")


def draw_final_loss_vs_lr(runs, out):
    ok, diverged = defaultdict(lambda: defaultdict(list)), defaultdict(set)
    for r in runs:
        if r["diverged"] or r["final_loss"] is None:
            diverged[r["model"]].add(r["learning_rate"])
        else:
            ok[r["model"]][r["learning_rate"]].append(r["final_loss"])
    finite = [v for by_lr in ok.values() for vs in by_lr.values() for v in vs]
    top = max(finite) * 1.05 if finite else 1.0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("tab10")
    for i, model in enumerate(dict.fromkeys(r["model"] for r in runs)):
        lrs = sorted(ok[model])
        means = [statistics.mean(ok[model][lr]) for lr in lrs]
        sds = [statistics.stdev(ok[model][lr]) if len(ok[model][lr]) > 1 else 0.0 for lr in lrs]
        color = cmap(i % cmap.N)
        ax.errorbar(lrs, means, yerr=sds, marker="o", capsize=3, color=color, label=model)
        bad = sorted(diverged[model])
        if bad:
            ax.scatter(bad, [top] * len(bad), marker="x", s=60, color=color)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final training loss (x: diverged)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out + "_lr.png", dpi=120)
    print(f"wrote {out}_lr.png")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", help="JSON written by siamese report (--json, or report.json of a sweep folder)")
    p.add_argument("--out", required=True, help="output prefix: <out>_curves.png and <out>_lr.png")
    p.add_argument("--band", choices=["minmax", "std"], default="minmax",
                   help="band around the seed mean: min to max over seeds (default) or ± one standard deviation")
    p.add_argument("--smooth", type=int, default=10, help="moving-average window of training losses, in logged steps")
    a = p.parse_args()
    make_out_folder(p, a.out)
    with open(a.report) as f:
        runs = [r for r in json.load(f) if r["learning_rate"] is not None and r["state"] != "never started"]
    if not runs:
        p.error(f"{a.report}: no run that started with a known learning rate")
    draw_curves(runs, a.report, a.out, a.band, max(1, a.smooth))
    draw_final_loss_vs_lr(runs, a.out)


if __name__ == "__main__":
    main()
