"""Streams a run's metrics.jsonl to Weights & Biases while it trains.

The trainer starts this on rank 0 when wandb.project is set (train/wandb_stream.h), with its
stdin a pipe the trainer holds: rows are read from the file as they land, and the end of
stdin (the trainer finished, failed or was killed) means: log what is left, finish, exit.
Run by hand with stdin at its end, it uploads a finished run's rows:

    python scripts/wandb_stream.py --run runs/NAME --project P < /dev/null

Tags follow the TensorBoard writer's (train/tensorboard.h): a step row's values are
train/<key>, an event's <event>/[<label>/]<key>, a list's items <tag>/<i>. W&B's own
settings (WANDB_MODE=offline, WANDB_API_KEY, ...) come from the environment. A resumed run
goes on in the same W&B run: its id is kept in <run>/wandb_run_id.
"""

import argparse
import json
import math
import sys
import threading
from pathlib import Path


def tags_of(row):
    prefix = "train/"
    if isinstance(row.get("event"), str):
        label = row.get("label")
        prefix = row["event"] + "/" + (label + "/" if isinstance(label, str) else "")
    out = {}

    def put(tag, v):
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            if math.isfinite(v):
                out[tag] = v
        elif isinstance(v, list):
            for i, item in enumerate(v):
                put(f"{tag}/{i}", item)

    for key, v in row.items():
        if key in ("step", "event", "label"):
            continue
        put(key if "/" in key else prefix + key, v)
    return out


def read_config(path):
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        print(f"wandb_stream: the run config {path} was not read ({e}); the W&B run has none", file=sys.stderr)
        return {}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="the run folder (holds metrics.jsonl)")
    p.add_argument("--config", help="the run's resolved config (default <run>/config.yaml)")
    p.add_argument("--project", required=True)
    p.add_argument("--entity")
    p.add_argument("--group")
    p.add_argument("--name", help="default: the run folder's name")
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--log-interval", type=int, default=1, help="log step rows whose step is a multiple")
    p.add_argument("--from-byte", type=int, default=0, help="start at this offset of metrics.jsonl")
    args = p.parse_args()

    import wandb

    run_dir = Path(args.run)
    ended = threading.Event()

    def watch_stdin():
        while sys.stdin.buffer.read(65536):
            pass
        ended.set()

    threading.Thread(target=watch_stdin, daemon=True).start()

    id_file = run_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else None
    run = wandb.init(
        project=args.project,
        entity=args.entity,
        group=args.group,
        name=args.name or run_dir.resolve().name,
        tags=args.tag or None,
        config=read_config(args.config or run_dir / "config.yaml"),
        dir=str(run_dir),
        id=run_id,
        resume="allow",
    )
    id_file.write_text(run.id + "\n")

    metrics = run_dir / "metrics.jsonl"
    offset, partial, logged = args.from_byte, b"", 0

    def drain():
        nonlocal offset, partial, logged
        if not metrics.exists():
            return
        with open(metrics, "rb") as f:
            f.seek(offset)
            data = f.read()
        offset += len(data)
        lines = (partial + data).split(b"\n")
        partial = lines.pop()  # a row still being written
        for line in lines:
            if not line.strip():
                continue
            row = json.loads(line)
            step = row.get("step")
            if not isinstance(step, int):
                continue
            if "event" not in row and step % args.log_interval:
                continue
            values = tags_of(row)
            if values:
                run.log(values, step=step)
                logged += 1

    while not ended.is_set():
        drain()
        ended.wait(0.5)
    drain()
    run.finish()
    print(f"wandb_stream: logged {logged} rows of {metrics}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
