#!/usr/bin/env bash
# Installs and builds the binary alone (scripts/setup.sh siamese; scripts/test.sh builds the
# tests), then trains one deep, narrow model on the built-in arithmetic corpus three times,
# as Post-Norm, Pre-Norm and SiameseNorm (hybrid_pre), and shows how they differ: a table
# (siamese report), one figure (loss curves, per-layer gradient norms and held-out exact
# match) and answers each model gives to held-out problems.
# Needs no data files. Runs go to $SIAMESE_RUNS (default runs/); a finished run is reused
# (delete runs/quickstart-* to train again). QUICKSTART_TOPOLOGIES picks other topologies;
# QUICKSTART_STEPS=N trains N steps instead of 1000 (a quick look at every piece).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh siamese
# shellcheck source=python_env.sh
source scripts/python_env.sh
siamese="${SIAMESE_BUILD_DIR:-build}/siamese"
export SIAMESE_RUNS=${SIAMESE_RUNS:-runs}
read -r -a topologies <<<"${QUICKSTART_TOPOLOGIES:-post pre hybrid_pre}"

runs=()
for topology in "${topologies[@]}"; do
  echo "== training $topology"
  "$siamese" train configs/tiny/quickstart.yaml --model.residual="$topology" \
    ${QUICKSTART_STEPS:+--max_duration="$QUICKSTART_STEPS"}
  runs+=("$SIAMESE_RUNS/quickstart-$topology")
done

echo
"$siamese" report "${runs[@]}" --out "$SIAMESE_RUNS/quickstart.md"
"$SIAMESE_PYTHON" scripts/plot_runs.py "${runs[@]}" --out "$SIAMESE_RUNS/quickstart" --overview >/dev/null
echo
echo "Answers to held-out problems (greedy decoding, the last evaluation of each run):"
"$SIAMESE_PYTHON" - "${runs[@]}" <<'PY'
import json, os, sys
for run in sys.argv[1:]:
    samples = None
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("event") == "eval" and "samples" in row:
                samples = row["samples"]
    shown = "   ".join(f"{s['prompt']}{s['output'] or '?'} {'right' if s['correct'] else 'wrong'}"
                       for s in (samples or [])[:5])
    print(f"  {os.path.basename(run):<22} {shown}")
PY
echo
echo "table:        $SIAMESE_RUNS/quickstart.md"
echo "figure:       $SIAMESE_RUNS/quickstart_overview.png (also _loss, _grad_norm, _layer_grad_norms)"
echo "metrics:      <run folder>/metrics.jsonl (one JSON object per step, plus eval events)"
echo "one more:     $siamese train configs/tiny/quickstart.yaml --model.residual=deepnorm --optimizer.learning_rate=1e-3 --run_name=deepnorm-lr1e-3"
