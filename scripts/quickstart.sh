#!/usr/bin/env bash
# Installs and builds (scripts/setup.sh), then trains a small Pre-Norm and a small
# SiameseNorm (hybrid_pre) model on the built-in arithmetic corpus for a few CPU minutes
# each, and prints their losses and held-out exact-match accuracy side by side.
# Needs no data files. Runs go to $SIAMESE_RUNS (default runs/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/python_env.sh
build_dir=${SIAMESE_BUILD_DIR:-build}
siamese="$build_dir/siamese"
export SIAMESE_RUNS=${SIAMESE_RUNS:-runs}
steps=${QUICKSTART_STEPS:-600}

train() {  # topology, extra overrides...
  local topo=$1
  shift
  rm -rf "$SIAMESE_RUNS/quickstart-$topo"
  echo "== training $topo for $steps steps"
  "$siamese" train configs/tiny/quickstart.yaml --model.residual="$topo" --max_duration="$steps" "$@"
}
train pre
train hybrid_pre --model.use_query_norm=true --model.use_key_norm=true --model.use_value_norm=true

echo
printf '%-12s %12s %16s %16s %12s\n' topology train_loss held_out_loss held_out_ppl exact_match
for topo in pre hybrid_pre; do
  "$SIAMESE_PYTHON" - "$SIAMESE_RUNS/quickstart-$topo/metrics.jsonl" "$topo" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "event" not in r and "loss" in r]
ev = [r for r in rows if r.get("event") == "eval"][-1]
print(f"{sys.argv[2]:<12} {train[-1]['loss']:12.4f} {ev['loss']:16.4f} {ev['perplexity']:16.3f} {ev['exact_match']:12.3f}")
PY
done
plot="$SIAMESE_RUNS/quickstart-loss.png"
"$SIAMESE_PYTHON" scripts/plot_loss.py "$SIAMESE_RUNS/quickstart-pre" "$SIAMESE_RUNS/quickstart-hybrid_pre" --out "$plot"
echo
echo "run folders:  $SIAMESE_RUNS/quickstart-pre  $SIAMESE_RUNS/quickstart-hybrid_pre"
echo "metrics:      <run folder>/metrics.jsonl (one JSON object per step, plus eval events)"
echo "checkpoints:  <run folder>/step<N>  (export: $siamese export <run folder>/step$steps --out model.safetensors)"
echo "plot:         $plot"
