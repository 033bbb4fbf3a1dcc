#!/usr/bin/env bash
# Data-parallel scaling on this machine: the same per-rank work (micro-batch, sequence
# length, model) run by 1 process and by 2 torchrun ranks (Gloo), with the gradient
# all-reduce overlapped with backward and not. Rounds alternate the three setups so
# machine noise hits them alike; figures come from each run's metrics.jsonl.
#   scripts/bench_ddp.sh [CONFIG] [extra --key=value overrides]
# Prints tokens/s per setup, scaling efficiency = tok/s(2 ranks) / (2 x tok/s(1 rank)) and
# the share of step time spent blocked on the all-reduce.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SIAMESE_BIN:-build/siamese}
config=${1:-configs/tiny/quickstart.yaml}
shift || true
steps=${BENCH_STEPS:-30}
rounds=${BENCH_ROUNDS:-2}
micro=${BENCH_MICRO:-16}
out=$(mktemp -d /tmp/siamese_bench_ddp.XXXXXX)
common=(--max_duration=$steps --save_interval=100000 --eval_interval=100000
        --console_log_interval=100000 --device_train_microbatch_size=$micro "$@")

port=$((29600 + RANDOM % 1000))
for r in $(seq 1 "$rounds"); do
  OMP_NUM_THREADS=1 "$bin" train "$config" "${common[@]}" --global_train_batch_size=$micro \
    --save_folder="$out/one_$r" > "$out/one_$r.log" 2>&1
  for overlap in true false; do
    port=$((port + 1))
    OMP_NUM_THREADS=1 scripts/torchrun --no_python --nproc_per_node 2 --master_port $port \
      "$bin" train "$config" "${common[@]}" --global_train_batch_size=$((2 * micro)) \
      --distributed.overlap=$overlap --save_folder="$out/two_${overlap}_$r" \
      > "$out/two_${overlap}_$r.log" 2>&1
  done
done

/usr/bin/python3 - "$out" "$rounds" "$steps" <<'PY'
import json, statistics, sys
out, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def run(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if '"tokens_per_sec"' in l]
    rows = [r for r in rows if r["step"] > min(5, steps // 3)]  # skip warm-up steps
    return statistics.median(r["tokens_per_sec"] for r in rows), statistics.median(r["comm_share"] for r in rows)
setups = {"1 rank": "one", "2 ranks, overlap": "two_true", "2 ranks, no overlap": "two_false"}
res = {k: [run(f"{v}_{r}") for r in range(1, rounds + 1)] for k, v in setups.items()}
base = statistics.median(t for t, _ in res["1 rank"])
print(f"{'setup':22s} {'tokens/s':>10s} {'scaling eff.':>13s} {'comm share':>11s}")
for k, v in res.items():
    tps = statistics.median(t for t, _ in v)
    comm = statistics.median(c for _, c in v)
    eff = tps / (2 * base) if k != "1 rank" else 1.0
    print(f"{k:22s} {tps:10.0f} {eff:13.2f} {100 * comm:10.1f}%")
print(f"(median of {rounds} alternating rounds x {steps} steps; runs in {out})")
PY
