#!/usr/bin/env bash
# On a GPU machine, in one command: builds against its torch 2.11 (scripts/setup.sh), runs the
# `gpu` tests, prints the versions, and benchmarks the OLMo-1B shape (bf16, synthetic tokens):
# Pre-Norm against SiameseNorm (hybrid_pre) alternating in one process, then with activation
# checkpointing at a larger micro-batch. Everything lands in OUT (argument 1, else $OUT, else
# gpu_results/). Without apt there, carry .debs/ from scripts/fetch_debs.sh: they are
# unpacked into .deps/ and the build finds its libraries there.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:-${OUT:-gpu_results}}
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1

unpack_deb() {  # deb, prefix
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$OLDPWD/$1" && tar -xf data.tar.* -C "$2")
    rm -rf "$tmp"
  fi
}
if [ -z "${SIAMESE_DEPS_PREFIX:-}" ] && [ ! -f /usr/include/yaml-cpp/yaml.h ]; then
  ls .debs/*.deb >/dev/null 2>&1 || { echo "gpu_check: no yaml-cpp and no .debs/ (run scripts/fetch_debs.sh where apt works)"; exit 1; }
  export SIAMESE_DEPS_PREFIX=$PWD/.deps
  mkdir -p "$SIAMESE_DEPS_PREFIX"
  for deb in .debs/*.deb; do unpack_deb "$deb" "$SIAMESE_DEPS_PREFIX"; done
fi

export SIAMESE_BUILD_DIR=${SIAMESE_BUILD_DIR:-build-gpu}
export SIAMESE_CUDA_ARCHS=${SIAMESE_CUDA_ARCHS:-9.0}
start=$(date +%s)
scripts/setup.sh || { echo "gpu_check: build failed"; exit 1; }
echo "gpu_check: build took $(( $(date +%s) - start )) s"
bin=$SIAMESE_BUILD_DIR/siamese
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
$bin --version | tee "$out/version.txt"

ctest --test-dir "$SIAMESE_BUILD_DIR" -L gpu --output-on-failure --timeout 300 | tee "$out/gpu_tests.txt"

bench=(configs/exps/OLMo-1B-1e-3.yaml --data.paths='[]' --data.synthetic=arithmetic
       --global_train_batch_size=16 --peak_tflops="${PEAK_TFLOPS:-989}" --steps 4 --warmup 2)
$bin bench "${bench[@]}" --device_train_microbatch_size=4 --compare pre,hybrid_pre --rounds 3 \
  | tee "$out/bench_olmo1b_pre_vs_hybrid_pre.txt"
$bin bench "${bench[@]}" --device_train_microbatch_size=16 --activation_checkpointing=whole_layer \
  | tee "$out/bench_olmo1b_checkpointed.txt"
echo "gpu_check: done in $(( $(date +%s) - start )) s; results in $out"
