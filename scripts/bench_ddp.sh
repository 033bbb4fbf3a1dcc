#!/usr/bin/env bash
# Data-parallel scaling on this machine: `siamese bench` launched by torchrun over N CPU
# ranks (Gloo, one thread each). In one launch it alternates rank 0 alone, N ranks with
# the all-reduce overlapped with backward, and N ranks with it after backward, and prints
# tokens/s, scaling efficiency = tok/s(N) / (N x tok/s(1)) and the all-reduce share.
#   scripts/bench_ddp.sh [CONFIG] [extra --key=value overrides]
# Environment: BENCH_NPROC (2), BENCH_MICRO (16 sequences per rank), BENCH_STEPS (10),
# BENCH_WARMUP (3), BENCH_ROUNDS (3), SIAMESE_BIN (build/siamese).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SIAMESE_BIN:-build/siamese}
config=${1:-configs/tiny/quickstart.yaml}
shift || true
nproc=${BENCH_NPROC:-2}
micro=${BENCH_MICRO:-16}
OMP_NUM_THREADS=1 exec scripts/torchrun --no_python --nproc_per_node "$nproc" \
  --master_port $((29600 + RANDOM % 1000)) \
  "$bin" bench "$config" --global_train_batch_size=$((nproc * micro)) \
  --device_train_microbatch_size="$micro" --steps "${BENCH_STEPS:-10}" \
  --warmup "${BENCH_WARMUP:-3}" --rounds "${BENCH_ROUNDS:-3}" "$@"
