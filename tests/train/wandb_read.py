"""Reads a run's offline W&B run back with the wandb client's own record type and checks that
it holds every number of metrics.jsonl under its tag and step, the run's config and the
names and tags the config gave.

usage: wandb_read.py RUN_FOLDER PROJECT LEGS TAG...
LEGS is the number of trainings (a first one, then resumes) the run folder holds.
The .wandb file is a LevelDB log (32 KiB blocks, 7-byte chunk headers) of protobuf Records,
after a 7-byte ":W&B" header; wandb itself reads it in its Go core only, so the framing is
read here and each record parsed by wandb.proto.wandb_internal_pb2.Record.
Exits non-zero on a mismatch.
"""
import json
import math
import struct
import sys
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768


def chunks(data):
    if data[:4] != b":W&B":
        sys.exit(f"not a W&B transaction log (header {data[:7]!r})")
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        body = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield body
        elif kind == 2:
            pending = body
        elif kind == 3:
            pending += body
        elif kind == 4:
            yield pending + body
            pending = b""


run = Path(sys.argv[1])
project, legs, tags = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
# A resumed run appends an offline folder of the same id (wandb sync merges them), in time order.
logs = sorted(run.glob("wandb/offline-run-*/run-*.wandb"))
ids = {p.stem for p in logs}
if len(ids) != 1:
    sys.exit(f"expected the offline folders of one W&B run under {run}/wandb, found {[str(p) for p in logs]}")
history, config, info = {}, {}, None
for body in (b for log in logs for b in chunks(log.read_bytes())):
    record = wandb_internal_pb2.Record()
    record.ParseFromString(body)
    kind = record.WhichOneof("record_type")
    if kind == "history":
        step = record.history.step.num
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            history.setdefault(step, {})[key] = json.loads(item.value_json)
    elif kind == "config":
        for item in record.config.update:
            config[item.key] = json.loads(item.value_json)
    elif kind == "run":
        info = record.run
        for item in record.run.config.update:
            config[item.key] = json.loads(item.value_json)

failures = [] if len(logs) == legs else [f"{len(logs)} offline folders for {legs} trainings"]
if info is None:
    failures.append("no run record")
else:
    if info.project != project:
        failures.append(f"project {info.project!r}, expected {project!r}")
    if list(info.tags) != tags:
        failures.append(f"tags {list(info.tags)}, expected {tags}")
    if info.display_name != run.resolve().name:
        failures.append(f"name {info.display_name!r}, expected the run folder's {run.resolve().name!r}")

# The run's config, a W&B key per top-level key.
model = config.get("model") or {}
if not isinstance(model, dict) or model.get("residual") is None or config.get("max_duration") is None:
    failures.append(f"the config lacks model.residual or max_duration: keys {sorted(config)}")

checked = 0
text = (run / "metrics.jsonl").read_text()
for line in text[: text.rfind("\n") + 1].splitlines():  # not a line a kill cut short
    row = json.loads(line)
    prefix = "train/"
    if isinstance(row.get("event"), str):
        prefix = row["event"] + "/" + (row["label"] + "/" if isinstance(row.get("label"), str) else "")
    for key, v in row.items():
        if key == "step" or isinstance(v, bool):
            continue
        tag = key if "/" in key else prefix + key
        values = [(tag, v)] if isinstance(v, (int, float)) else []
        if isinstance(v, list):  # per-layer values: <tag>/<layer>
            values = [(f"{tag}/{i}", x) for i, x in enumerate(v) if isinstance(x, (int, float))]
        for name, x in values:
            if not math.isfinite(x):
                continue
            got = history.get(row["step"], {}).get(name)
            if got is None or not math.isclose(got, x, rel_tol=1e-12, abs_tol=0):
                failures.append(f"step {row['step']} {name}: {got} in W&B, {x} in metrics.jsonl")
            checked += 1
if checked == 0:
    failures.append("metrics.jsonl has no numbers")
if failures:
    print("\n".join(failures[:20]))
    sys.exit(1)
print(f"W&B holds all {checked} numbers of metrics.jsonl at their steps, and the run's config")
