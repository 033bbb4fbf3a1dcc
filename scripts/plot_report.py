#!/usr/bin/env python3
"""Figures of a comparison, from `siamese report ... --json` (or the report.json that
`siamese report SWEEP_FOLDER` writes) and the runs' metrics.jsonl:

    ~/.cache/siamese/venv/bin/python scripts/plot_report.py runs/cmp/report.json --out figures/cmp

writes <out>_curves.png: one row per learning rate, one column per curve (training loss, then
each evaluator's validation perplexity and, where one was logged, exact match), one colour per
model (the report's "Model": the topology and the settings that set runs of it apart). The
line is the mean over the model's seeds at each logged step, the band their minimum to maximum
(--band std: mean ± one standard deviation); training losses are moving averages over --smooth
logged steps. The x axis is --x: steps (default), tokens, wall-clock seconds (the runs'
`elapsed`, seeds averaged) or training FLOPs (tokens x flops_per_token, which charges a
topology's extra work per token). Runs the report marked diverged are left out of the mean and
counted in the legend. <out>_lr.png: final training loss, and each evaluator's final validation
perplexity, against learning rate, one line per model (the paper's stability figure; seeds
averaged, error bar: standard deviation; diverged runs drawn as crosses at the top).
--formats png,pdf,svg writes each figure in each format (PDF and SVG are vector, for a paper). <out>_speedup.png, when `siamese report --baseline` wrote <report>_speedup.json
beside the report: the baseline's loss against compute with the fitted power law and each
model's loss at its compute (an arrow to the compute the baseline needs for it), and each
model's effective speedup with the range of its seeds. Models keep the report's order, so
colours follow the sweep's.
"""
import argparse
import json
import math
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_runs import smooth
from plot_style import make_out_folder

# The keys of each run the figures read: a report.json of an older `siamese report` lacks some.
RUN_KEYS = ("run", "model", "learning_rate", "state", "diverged", "final_loss")


def rewrite_hint(path, option=""):
    return (f"fix: write it again with this build's `siamese report RUNS... --json {path}"
            f"{' ' + option if option else ''}` (or `siamese report SWEEP_FOLDER`)")


def read_json(parser, path, option=""):
    """A JSON file the report wrote; an empty or cut one is a usage error naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        parser.error(f"{path}: cannot read it ({e.strerror})")
    if not text.strip():
        parser.error(f"{path}: the file is empty; {rewrite_hint(path, option)}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        parser.error(f"{path}: not whole JSON (cut short? {e}); {rewrite_hint(path, option)}")


def read_report(parser, path):
    """The runs of a report's JSON, each with the keys the figures read."""
    runs = read_json(parser, path)
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        parser.error(f"{path}: not a report of runs (`siamese report --json` writes a list of objects); "
                     f"{rewrite_hint(path)}")
    for i, r in enumerate(runs, 1):
        missing = [k for k in RUN_KEYS if k not in r]
        if missing:
            parser.error(f"{path}: run {i} ({r.get('run', 'unnamed')}) has no {', '.join(missing)}, "
                         f"which an older `siamese report` did not write; {rewrite_hint(path)}")
    return runs


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


def number_or_none(value):
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


# What each --x reads off a run's training rows, and its axis label.
X_AXES = {"step": "step", "tokens": "tokens", "time": "wall-clock seconds (elapsed)", "flops": "training FLOPs"}


def read_curves(folder):
    """{"train loss": {step: loss}, "<label> PPL": {...}, "<label> exact %": {...}} of one run,
    and under "x" each training step's {"tokens", "time", "flops"}.
    Rows whose values have the wrong type are skipped, counted and named, as `siamese report`
    skips them; a last line cut short (by a kill) is skipped too."""
    curves = defaultdict(dict)
    path = os.path.join(folder, "metrics.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    damaged = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            j = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines):
                print(f"warning: {path}:{n}: skipped the last line, cut short (by a kill?)", file=sys.stderr)
                continue
            raise SystemExit(f"{path}:{n}: not valid JSON ({e}); repair or remove this line")
        if not isinstance(j, dict):
            raise SystemExit(f"{path}:{n}: not a JSON object; repair or remove this line")
        wrong = [k for k in ("loss", "lr", "perplexity", "exact_match") if k in j and not number_or_none(j[k])]
        if not isinstance(j.get("step", 0), int) or isinstance(j.get("step"), bool):
            wrong.insert(0, "step")
        if wrong:
            damaged.append(f"{path}:{n} ({wrong[0]} is {json.dumps(j[wrong[0]])[:40]})")
            continue
        if j.get("event") == "eval" and "label" in j:
            if j.get("perplexity") is not None:
                curves[f"{j['label']} PPL"][j["step"]] = j["perplexity"]
            if j.get("exact_match") is not None:
                curves[f"{j['label']} exact %"][j["step"]] = 100 * j["exact_match"]
        elif "event" not in j and "loss" in j and "lr" in j:
            curves["train loss"][j["step"]] = j["loss"] if j["loss"] is not None else math.nan
            tokens = j.get("tokens")
            flops = j.get("flops_per_token")
            curves["x"][j["step"]] = {
                "tokens": tokens, "time": j.get("elapsed"),
                "flops": tokens * flops if number_or_none(tokens) and number_or_none(flops) and tokens and flops
                else None}
    if damaged:
        more = f", {len(damaged) - 5} more" if len(damaged) > 5 else ""
        print(f"warning: skipped {len(damaged)} damaged row(s) (a value of the wrong type): "
              f"{', '.join(damaged[:5])}{more}", file=sys.stderr)
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


def x_values(steps, runs_x, axis):
    """The x of each step: itself, or the seeds' mean of what --x reads at it (an evaluation at
    step s is after training step s)."""
    if axis == "step":
        return steps
    xs = []
    for step in steps:
        values = [x[step][axis] for x in runs_x if step in x and x[step].get(axis) is not None]
        xs.append(statistics.fmean(values) if values else math.nan)
    return xs


def save(fig, out, suffix, formats):
    for fmt in formats:
        fig.savefig(f"{out}{suffix}.{fmt}", dpi=120)
        print(f"wrote {out}{suffix}.{fmt}")


def draw_curves(runs, report, out, band, window, axis, formats):
    models = list(dict.fromkeys(r["model"] for r in runs))
    lrs = sorted({r["learning_rate"] for r in runs})
    kept, dropped = defaultdict(list), defaultdict(int)  # (model, lr) -> curves, diverged count
    for r in runs:
        if r["diverged"]:
            dropped[(r["model"], r["learning_rate"])] += 1
        else:
            kept[(r["model"], r["learning_rate"])].append(read_curves(run_folder(r["run"], report)))
    names = list(dict.fromkeys(name for cs in kept.values() for c in cs for name in c if name != "x"))
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
                steps = x_values(steps, [c["x"] for c in kept[(model, lr)]], axis)
                left_out = dropped[(model, lr)]
                label = f"{model} (n={len(series)}" + (f", {left_out} diverged left out)" if left_out else ")")
                color = cmap(i % cmap.N)
                ax.plot(steps, mean, color=color, lw=1.4, label=label, marker="o" if len(steps) < 8 else None, ms=3)
                ax.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)
            if name.endswith(" PPL"):
                ax.set_yscale("log")
            ax.set_xlabel(X_AXES[axis])
            if axis == "flops":
                ax.set_xscale("log")
            ax.set_ylabel(name + (f" (moving average of {window})" if name == "train loss" else ""))
            ax.set_title(f"{name}, learning rate {lr:g}", fontsize=10)
            ax.grid(alpha=0.3, which="both")
            if ax.lines:
                ax.legend(fontsize=7)
    spread = "min to max" if band == "minmax" else "± one standard deviation"
    fig.suptitle(f"Mean over seeds, band: {spread} over seeds", fontsize=10)
    fig.tight_layout()
    save(fig, out, "_curves", formats)


def final_value(run, metric):
    """The run's final training loss, or its last perplexity of an evaluator ("<label> PPL")."""
    if metric == "train loss":
        return run["final_loss"]
    value = (run.get("perplexity") or {}).get(metric[:-len(" PPL")])
    return value if number_or_none(value) else None


def draw_final_loss_vs_lr(runs, out, formats):
    labels = sorted({k for r in runs for k in (r.get("perplexity") or {})})
    metrics = ["train loss"] + [f"{k} PPL" for k in labels]
    fig, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 4.5), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, metric in zip(axes[0], metrics):
        ok, diverged = defaultdict(lambda: defaultdict(list)), defaultdict(set)
        for r in runs:
            value = final_value(r, metric)
            if r["diverged"] or value is None:
                diverged[r["model"]].add(r["learning_rate"])
            else:
                ok[r["model"]][r["learning_rate"]].append(value)
        finite = [v for by_lr in ok.values() for vs in by_lr.values() for v in vs]
        top = max(finite) * 1.05 if finite else 1.0
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
        if metric != "train loss":
            ax.set_yscale("log")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel(("final training loss" if metric == "train loss" else f"final validation {metric}")
                      + " (x: diverged)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, out, "_lr", formats)


def draw_speedup(parser, path, out, formats):
    t = read_json(parser, path, "--baseline")
    keys = {"baseline": t, "loss": t, "fit": t, "rows": t, "ladder": t} if isinstance(t, dict) else {}
    if isinstance(t, dict) and isinstance(t.get("fit"), dict):
        keys.update({k: t["fit"] for k in ("E", "A", "alpha", "C0", "compute_min", "compute_max")})
    missing = [k for k, holder in keys.items() if k not in holder]
    if not keys or missing:
        parser.error(f"{path}: not a whole speedup table (no {', '.join(missing) or 'JSON object'}); "
                     f"{rewrite_hint(path, '--baseline')}")
    fit, rows = t["fit"], t["rows"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    cmap = plt.get_cmap("tab10")

    def law(c):
        return fit["E"] + fit["A"] * (c / fit["C0"]) ** -fit["alpha"]

    ladder = t["ladder"]
    left.scatter([p["compute"] for p in ladder], [p["loss"] for p in ladder], color="black", zorder=3,
                 label=f"{t['baseline']} budgets (seed means)")
    lo, hi = fit["compute_min"], fit["compute_max"]
    inside = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    left.plot(inside, [law(c) for c in inside], color="black", lw=1.2,
              label=f"fit: alpha {fit['alpha']:.3f}" + (f", E {fit['E']:.3f}" if fit["E"] else ""))
    ends = [c for r in rows for c in (r["compute"], r["compute_equivalent"]) if c]
    if ends and max(ends) > hi:
        beyond = [hi * (max(ends) / hi) ** (i / 30) for i in range(31)]
        left.plot(beyond, [law(c) for c in beyond], color="black", lw=1.2, ls="--", label="fit, extrapolated")
    if ends and min(ends) < lo:
        below = [min(ends) * (lo / min(ends)) ** (i / 30) for i in range(31)]
        left.plot(below, [law(c) for c in below], color="black", lw=1.2, ls="--")
    for i, r in enumerate(rows):
        if r["loss"] is None:
            continue
        color = cmap(i % cmap.N)
        left.scatter([r["compute"]], [r["loss"]], color=color, marker="s", zorder=4, label=r["model"])
        if r["compute_equivalent"]:
            left.annotate("", xy=(r["compute_equivalent"], r["loss"]), xytext=(r["compute"], r["loss"]),
                          arrowprops={"arrowstyle": "->", "color": color, "lw": 1})
    left.set_xscale("log")
    left.set_xlabel("training compute C (FLOPs)")
    left.set_ylabel("final training loss" if t["loss"] == "train" else f"{t['loss']} loss")
    left.set_title("loss gain as compute: arrow to the baseline's compute-equivalent", fontsize=10)
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=7)

    names = [r["model"] + ("" if r["fit_range"] == "inside" else " *") for r in rows]
    ys = list(range(len(rows)))[::-1]
    for y, (i, r) in zip(ys, enumerate(rows)):
        color = cmap(i % cmap.N)
        if r["speedup"] is not None:
            right.barh(y, r["speedup"], color=color, alpha=0.8)
            if r["seed_low"] is not None:
                right.plot([r["seed_low"], r["seed_high"]], [y, y], color="black", lw=1.5)
        else:
            why = r["throughput_note"] or ("loss below the fit's floor" if r["fit_range"] == "below_asymptote"
                                           else "no number")
            right.text(0.02, y, f"n/a: {why}", va="center", fontsize=7, transform=right.get_yaxis_transform())
        if r["multiplier"] is not None:
            right.scatter([r["multiplier"]], [y], facecolors="none", edgecolors="black", zorder=3)
    right.axvline(1.0, color="gray", lw=1)
    right.set_yticks(ys, names, fontsize=8)
    right.set_ylim(-0.6, len(rows) - 0.4)
    right.set_xlabel(f"effective speedup over {t['baseline']} (bar; line: seeds' range; circle: multiplier alone)"
                     + ("\n*: compute-equivalent outside the fitted budgets" if any("*" in n for n in names) else ""))
    right.set_title("effective speedup = compute multiplier x tokens/s ratio", fontsize=10)
    right.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    save(fig, out, "_speedup", formats)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", help="JSON written by siamese report (--json, or report.json of a sweep folder)")
    p.add_argument("--out", required=True,
                   help="output prefix: <out>_curves.png, <out>_lr.png (and <out>_speedup.png), each in --formats")
    p.add_argument("--band", choices=["minmax", "std"], default="minmax",
                   help="band around the seed mean: min to max over seeds (default) or ± one standard deviation")
    p.add_argument("--smooth", type=int, default=10, help="moving-average window of training losses, in logged steps")
    p.add_argument("--x", choices=list(X_AXES), default="step",
                   help="x axis of the curves: step (default), tokens, time (wall-clock seconds) or flops")
    p.add_argument("--formats", default="png",
                   help="comma-separated figure formats, any of png, pdf, svg (default png)")
    a = p.parse_args()
    formats = [f.strip() for f in a.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in ("png", "pdf", "svg")]
    if unknown or not formats:
        p.error(f"--formats {a.formats}: use png, pdf and svg, comma-separated")
    make_out_folder(p, a.out)
    runs = [r for r in read_report(p, a.report) if r["learning_rate"] is not None and r["state"] != "never started"]
    if not runs:
        p.error(f"{a.report}: no run that started with a known learning rate")
    draw_curves(runs, a.report, a.out, a.band, max(1, a.smooth), a.x, formats)
    draw_final_loss_vs_lr(runs, a.out, formats)
    speedup = os.path.splitext(a.report)[0] + "_speedup.json"
    if os.path.exists(speedup):
        draw_speedup(p, speedup, a.out, formats)


if __name__ == "__main__":
    main()
