"""Reads a run's TensorBoard events with tensorboard's own EventAccumulator and checks that
every number of metrics.jsonl is there under its tag and step (float32 precision).

usage: tensorboard_read.py RUN_FOLDER
Exits non-zero on a mismatch and when tensorboard is missing (scripts/test.sh installs it).
"""
import json
import math
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run = Path(sys.argv[1])
acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
scalars = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags}
checked, missing = 0, []
for line in (run / "metrics.jsonl").read_text().splitlines():
    row = json.loads(line)
    prefix = "train/"
    if isinstance(row.get("event"), str):
        prefix = row["event"] + "/" + (row["label"] + "/" if isinstance(row.get("label"), str) else "")
    for key, v in row.items():
        if key == "step" or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        tag = key if "/" in key else prefix + key
        got = scalars.get(tag, {}).get(row["step"])
        if got is None or not math.isclose(got, v, rel_tol=1e-6, abs_tol=1e-30):
            missing.append((tag, row["step"], v, got))
        checked += 1
print(f"{len(tags)} tags, {checked} values checked, {len(missing)} wrong or missing")
for m in missing[:10]:
    print("  ", m)
# The run trains with softmax_auxiliary_loss: its z-loss is a metric of its own.
need = {"train/loss", "train/z_loss", "train/lr", "train/grad_norm", "train/tokens_per_sec",
        "train/peak_memory_mib"}
print("tags:", sorted(tags)[:40])
sys.exit(0 if not missing and need <= tags and checked > 0 and any(t.startswith("eval/") for t in tags) else 1)
