#!/usr/bin/env bash
# OpenMP threads on an idle and on a busy machine (docs/results.md, "Threads on a busy
# machine"): three workloads, each under three thread settings, alternating, on an idle
# machine and with a second process keeping every core busy. Prints a Markdown table of
# median wall seconds.
#   before:   libgomp's default wait (workers spin 300,000 times before sleeping), what
#             siamese did until it chose the count itself (GOMP_SPINCOUNT=300000 reproduces it)
#   after:    siamese's default (it restarts itself with GOMP_SPINCOUNT=10000)
#   passive:  OMP_WAIT_POLICY=PASSIVE (workers sleep at once)
#   1 thread: OMP_NUM_THREADS=1
# Usage: scripts/bench_threads.sh [ROUNDS (3)]   (SIAMESE_BUILD_DIR as scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
siamese="${SIAMESE_BUILD_DIR:-build}/siamese"
rounds=${1:-3}
scratch=$(mktemp -d)
busy_pids=()
trap 'kill "${busy_pids[@]}" 2>/dev/null || true; rm -rf "$scratch"' EXIT

# The workloads: a short quickstart training, a configs/tiny/base.yaml benchmark, and
# `eval --text` of 1713 bytes on the quickstart model that training leaves.
"$siamese" train configs/tiny/quickstart.yaml --max_duration=2 --save_folder="$scratch/run" >/dev/null 2>&1
head -c 1713 README.md >"$scratch/text.txt"
workloads=(quickstart base eval)
run_workload() {
  case $1 in
    quickstart) "$siamese" train configs/tiny/quickstart.yaml --max_duration=30 --eval_interval=1000 \
      --save_interval=1000 --save_folder="$scratch/q$RANDOM" ;;
    base) "$siamese" bench configs/tiny/base.yaml --steps 3 --warmup 1 ;;
    eval) "$siamese" eval "$scratch/run" --text "$scratch/text.txt" --no-metrics ;;
  esac
}
export siamese scratch
export -f run_workload
settings=("before:GOMP_SPINCOUNT=300000" "after:" "passive:OMP_WAIT_POLICY=PASSIVE" "1 thread:OMP_NUM_THREADS=1")

busy() {  # one busy loop per core: a second process's worth of load on every core
  for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    busy_pids+=($!)
  done
}

declare -A times
for load in idle busy; do
  [ "$load" = busy ] && busy
  for ((r = 0; r < rounds; r++)); do
    for w in "${workloads[@]}"; do
      for s in "${settings[@]}"; do
        name=${s%%:*} env_set=${s#*:}
        start=$(date +%s.%N)
        # shellcheck disable=SC2086,SC2016  # env_set: one NAME=value word or none; $0 is bash -c's
        env $env_set bash -c 'run_workload "$0"' "$w" >/dev/null 2>&1
        end=$(date +%s.%N)
        times[$load/$w/$name]+="$(awk "BEGIN {print $end - $start}") "
      done
    done
  done
  if [ "$load" = busy ]; then kill "${busy_pids[@]}"; fi
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| workload | load | before (s) | after (s) | passive (s) | 1 thread (s) | before / after |"
echo "|---|---|---:|---:|---:|---:|---:|"
for w in "${workloads[@]}"; do
  for load in idle busy; do
    b=$(echo "${times[$load/$w/before]}" | median)
    a=$(echo "${times[$load/$w/after]}" | median)
    p=$(echo "${times[$load/$w/passive]}" | median)
    o=$(echo "${times[$load/$w/1 thread]}" | median)
    printf '| %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f |\n' "$w" "$load" "$b" "$a" "$p" "$o" \
      "$(awk "BEGIN {print $b / $a}")"
  done
done
