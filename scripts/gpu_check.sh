#!/usr/bin/env bash
# On a GPU machine, in one command: builds against its torch 2.11 (scripts/setup.sh), checks
# the custom kernels against ATen (`siamese kernels --check`, switching off any family that
# fails for the rest of the call), runs the `gpu` tests, prints the versions, and benchmarks the OLMo-1B shape (bf16, synthetic tokens):
# Pre-Norm against SiameseNorm (hybrid_pre) alternating in one process with a kernel-time
# profile of each, the same with RMSNorm, then with activation checkpointing at a larger
# micro-batch, eager against CUDA graphs, and last the same steps in plain PyTorch, eager and
# compiled, beside siamese's.
# Everything lands in OUT (argument 1, else $OUT, else gpu_results/). The machine
# has no apt: carry .debs/ from scripts/fetch_debs.sh; they are unpacked into .deps/ and the
# build finds its libraries there. SIAMESE_PREBUILT=DIR skips the build (minutes of device
# time): DIR holds `siamese` and test executables built on a development machine against the
# same torch 2.11 + CUDA 13.0 and carried along; they find the machine's torch, NCCL and cudart
# through LD_LIBRARY_PATH. docs/results.md ("On one GPU") has what it printed.
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
# The machine's image has some of the headers (yaml-cpp) but not all, and apt cannot reach a
# mirror there: the carried packages are always the ones built against.
if [ -z "${SIAMESE_DEPS_PREFIX:-}" ]; then
  ls .debs/*.deb >/dev/null 2>&1 || { echo "gpu_check: no .debs/ (run scripts/fetch_debs.sh where apt works, carry .debs)"; exit 1; }
  export SIAMESE_DEPS_PREFIX=$PWD/.deps
  mkdir -p "$SIAMESE_DEPS_PREFIX"
  for deb in .debs/*.deb; do unpack_deb "$deb" "$SIAMESE_DEPS_PREFIX"; done
fi
# What the unpacked libraries load in turn (ICU's data library) is found by path, not by the
# executables' RUNPATH, which covers their direct dependencies only.
export LD_LIBRARY_PATH=$SIAMESE_DEPS_PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}

start=$(date +%s)
if [ -n "${SIAMESE_PREBUILT:-}" ]; then
  site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  cuda_libs=$(find "$site/nvidia" /usr/local/cuda/ \( -name 'libnccl.so.2' -o -name 'libcudart.so.13' \) \
    -printf '%h:' 2>/dev/null)
  export LD_LIBRARY_PATH=$site/torch/lib:$cuda_libs$LD_LIBRARY_PATH
  bin=$SIAMESE_PREBUILT/siamese
  # Tests that start the binary or torchrun find them here, not where they were built.
  SIAMESE_TEST_BINARY=$(realpath "$bin")
  export SIAMESE_TEST_BINARY SIAMESE_TEST_SOURCE_DIR=$PWD
else
  export SIAMESE_BUILD_DIR=${SIAMESE_BUILD_DIR:-build-gpu}
  export SIAMESE_CUDA_ARCHS=${SIAMESE_CUDA_ARCHS:-9.0}
  export SIAMESE_CMAKE_ARGS="${SIAMESE_CMAKE_ARGS:-} -DSIAMESE_WERROR=OFF"
  scripts/setup.sh || { echo "gpu_check: build failed"; exit 1; }
  echo "gpu_check: build took $(( $(date +%s) - start )) s"
  bin=$SIAMESE_BUILD_DIR/siamese
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
$bin --version | tee "$out/version.txt"

# The kernels first: every op x dtype row against ATen on this card. A family with a failing
# row is switched off (model.kernels.<family>: aten) for everything below, so the benchmarks
# still run, and the table says which.
# A check that died before its last line (a crash, not a failing row) switches every family off.
$bin kernels --check --device cuda 2>&1 | tee "$out/kernels_check.txt" || true
kernels_off=()
if grep -q '^failing families: ' "$out/kernels_check.txt"; then
  read -ra failing <<<"$(sed -n 's/^failing families: //p' "$out/kernels_check.txt")"
  for family in "${failing[@]}"; do
    [ "$family" = none ] || kernels_off+=("--model.kernels.$family=aten")
  done
else
  kernels_off=("--model.kernels.all=aten")
fi
[ ${#kernels_off[@]} -eq 0 ] || echo "gpu_check: kernels switched off for the benchmarks: ${kernels_off[*]}"

# The CUDA graph tests run in a process of their own, last: a capture gone wrong cannot take
# the other tests' device state with it. Where they fail, the graphed benches below are left out.
graphs_ok=1
if [ -n "${SIAMESE_PREBUILT:-}" ]; then
  for test in "$SIAMESE_PREBUILT"/test_*; do "$test" --gtest_filter='Gpu*:-*CudaGraph*'; done | tee "$out/gpu_tests.txt"
  "$SIAMESE_PREBUILT"/test_train --gtest_filter='*CudaGraph*' 2>&1 | tee "$out/gpu_tests_cuda_graphs.txt" || graphs_ok=0
else
  ctest --test-dir "$SIAMESE_BUILD_DIR" -L gpu -E CudaGraph --output-on-failure --timeout 300 | tee "$out/gpu_tests.txt"
  ctest --test-dir "$SIAMESE_BUILD_DIR" -L gpu -R CudaGraph --output-on-failure --timeout 300 \
    | tee "$out/gpu_tests_cuda_graphs.txt" || graphs_ok=0
fi

# The paper's model as its configs give it (LayerNorm without affine parameters), Pre-Norm
# against SiameseNorm alternating, with each one's GPU kernel time per step; then both with
# RMSNorm (HybridNorm's reference config), profiled too, where SiameseNorm's stream updates are the fused
# kernels; then Pre-Norm with every block recomputed at a 4x larger micro-batch.
bench=(configs/exps/OLMo-1B-1e-3.yaml --data.paths='[]' --data.synthetic=arithmetic
       --global_train_batch_size=16 --peak_tflops="${PEAK_TFLOPS:-989}" --steps 3 --warmup 2 "${kernels_off[@]}")
$bin bench "${bench[@]}" --device_train_microbatch_size=4 --compare pre,hybrid_pre --rounds 3 --profile 40 \
  | tee "$out/bench_olmo1b_pre_vs_hybrid_pre.txt"
$bin bench "${bench[@]}" --device_train_microbatch_size=4 --rounds 2 --profile 40 \
  --compare pre:model.layer_norm_type=rms,hybrid_pre:model.layer_norm_type=rms | tee "$out/bench_olmo1b_rms.txt"
$bin bench "${bench[@]}" --device_train_microbatch_size=16 --activation_checkpointing=whole_layer \
  | tee "$out/bench_olmo1b_checkpointed.txt"
# CUDA graphs (cuda_graphs, train/micro_batch_graph.h): eager against replayed micro-batches,
# alternating, at the OLMo-1B shape (Pre-Norm: two OLMo-1B trainees fill most of an 80 GB card)
# and at the quickstart's, where kernel launches bound the step. GpuTrainStep.CudaGraph* above
# says whether the replays train as the eager step.
if [ "$graphs_ok" = 1 ]; then
  $bin bench "${bench[@]}" --device_train_microbatch_size=4 --rounds 2 --compare pre,pre:cuda_graphs=true \
    | tee "$out/bench_olmo1b_cuda_graphs.txt"
  $bin bench configs/tiny/quickstart.yaml --device=cuda --data.paths='[]' --data.synthetic=arithmetic --steps 20 \
    --warmup 5 --rounds 2 --compare pre,pre:cuda_graphs=true,hybrid_pre,hybrid_pre:cuda_graphs=true \
    "${kernels_off[@]}" | tee "$out/bench_quickstart_cuda_graphs.txt"
else
  echo "gpu_check: the CUDA graph tests failed ($out/gpu_tests_cuda_graphs.txt): no graphed benches"
fi
echo "gpu_check: siamese's benchmarks done at $(( $(date +%s) - start )) s"

# Last, so that a run cut short keeps everything above: the same model in plain PyTorch on the
# same card (scripts/bench_pytorch.py, checked parameter for parameter against siamese's by
# tests/export/bench_pytorch_test.cpp), eager, each block compiled and the whole forward
# compiled, beside `siamese bench` at the same micro-batches (scripts/bench_vs_pytorch.py).
# SIAMESE_GPU_CHECK_PYTORCH=0 skips it; PYTORCH_MODES and PYTORCH_MICRO_BATCHES narrow it.
if [ "${SIAMESE_GPU_CHECK_PYTORCH:-1}" = 1 ]; then
  python3 scripts/bench_vs_pytorch.py --device cuda --binary "$bin" --rounds 1 --steps 3 --warmup 2 \
    --peak-tflops "${PEAK_TFLOPS:-989}" --micro-batches "${PYTORCH_MICRO_BATCHES:-4,8}" \
    --modes "${PYTORCH_MODES:-eager,compile-blocks,compile}" --json "$out/vs_pytorch.json" \
    "${kernels_off[@]/#/--siamese-override=}" \
    | tee "$out/vs_pytorch.txt"
fi
echo "gpu_check: done in $(( $(date +%s) - start )) s; results in $out"
