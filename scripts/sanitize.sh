#!/usr/bin/env bash
# Builds the project with sanitizers in folders of their own and runs what matters for each
# (docs/build.md, "Sanitizers"):
#   asan  build-asan/, -DSIAMESE_SANITIZE="address;undefined": AddressSanitizer (with leak
#         checking) and UBSan on every CPU test of common, config, data and tokenizer, on the
#         FULL_SHARD tests of dist (Sharded.FullShard*: 2 Gloo ranks under torchrun; the
#         hand-written freeing and re-gathering of block storage), and on the `siamese`
#         processes those tests start
#   tsan  build-tsan/, -DSIAMESE_SANITIZE=thread: ThreadSanitizer on the threaded code: the
#         batch prefetcher (Prefetcher.*), the tokenizer's encode pool (TokenizeCorpus.*), the
#         data-parallel gradient hooks (DataParallel.*: 2 Gloo ranks under torchrun), FULL_SHARD's
#         prefetching gathers and backward hooks (Sharded.FullShard*), and one
#         short `siamese train` with data.num_workers=3 (the trainer's loader threads)
# Usage: scripts/sanitize.sh [asan] [tsan]   (both when none is named). Needs what
# scripts/setup.sh installs. LibTorch and the Debian libraries are not instrumented.
#
# Environment: SIAMESE_JOBS (nproc), SIAMESE_TEST_JOBS (2), SIAMESE_ASAN_LABELS,
# SIAMESE_ASAN_DIST_TESTS and SIAMESE_TSAN_TESTS (the ctest selections below, to narrow them).
#
# ASan and TSan write their reports into <build folder>/sanitizer-reports/ (log_path), those
# of `siamese` processes that tests start and expect to fail included: a report fails the
# step even when its test passed, and the reports are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=python_env.sh
source scripts/python_env.sh
if ! siamese_has_torch "$SIAMESE_PYTHON"; then
  echo "sanitize: $SIAMESE_PYTHON has no torch $siamese_torch_pin; run scripts/setup.sh first" >&2
  exit 1
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

jobs=${SIAMESE_JOBS:-$(nproc)}
test_jobs=${SIAMESE_TEST_JOBS:-2}
asan_labels=${SIAMESE_ASAN_LABELS:-^(common|config|data|tokenizer)$}
asan_dist_tests=${SIAMESE_ASAN_DIST_TESTS:-^Sharded\.FullShard}
tsan_tests=${SIAMESE_TSAN_TESTS:-^(Prefetcher|TokenizeCorpus|DataParallel)\.|^Sharded\.FullShard}
root=$PWD

# build FOLDER SANITIZERS TARGET...: configures the folder once, then builds the targets
# (test executables; those that run the CLI bring the siamese binary). A unity build (each
# component's sources compiled together) takes about a third of the time of one file at a
# time on 2 cores; one CUDA architecture, as the kernels are neither instrumented nor run.
build() {
  local dir=$1 sanitizers=$2
  shift 2
  if [ ! -f "$dir/build.ninja" ]; then
    local torch_prefix
    torch_prefix=$("$SIAMESE_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    mkdir -p "$dir"
    TORCH_CUDA_ARCH_LIST=8.0 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DSIAMESE_PYTHON="$SIAMESE_PYTHON" \
      -DSIAMESE_CUDA_ARCHS=8.0 -DCMAKE_UNITY_BUILD=ON -DSIAMESE_SANITIZE="$sanitizers" \
      >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; return 1; }
  fi
  echo "sanitize: building $* in $dir"
  cmake --build "$dir" -j "$jobs" --target "$@"
}

# reports_dir FOLDER: an empty folder for the reports of this run.
reports_dir() {
  rm -rf "$1/sanitizer-reports"
  mkdir -p "$1/sanitizer-reports"
}

# check_reports FOLDER NAME: fails, printing them, when the run left sanitizer reports.
check_reports() {
  local found=("$1"/sanitizer-reports/*)
  if [ -e "${found[0]}" ]; then
    echo "sanitize: $2 found problems (${#found[@]} reports in $1/sanitizer-reports):" >&2
    for r in "${found[@]}"; do
      echo "=== $r" >&2
      cat "$r" >&2
    done
    return 1
  fi
  echo "sanitize: $2: no reports"
}

run_asan() {
  local dir=build-asan ok=0 start=$SECONDS built
  local reports=$root/$dir/sanitizer-reports
  reports_dir "$dir"  # the build's test discovery runs the executables: its reports count
  # GCC links UBSan as a runtime of its own, which prints to stderr whatever log_path says,
  # so a UBSan error aborts the process (a test whose `siamese` should fail then sees a
  # signal, not its exit code). ASan reads UBSAN_OPTIONS too, hence log_path in both.
  export ASAN_OPTIONS=log_path=$reports/asan:detect_leaks=1:protect_shadow_gap=0:strict_string_checks=1
  export UBSAN_OPTIONS=log_path=$reports/asan:print_stacktrace=1:halt_on_error=1:abort_on_error=1
  build "$dir" "address;undefined" test_common test_config test_data test_tokenizer test_dist || ok=1
  built=$SECONDS
  if ((ok == 0)); then
    ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" -LE gpu -L "$asan_labels" || ok=1
    ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" -LE gpu -R "$asan_dist_tests" || ok=1
  fi
  check_reports "$dir" asan || ok=1
  unset ASAN_OPTIONS UBSAN_OPTIONS
  echo "sanitize: asan: build $((built - start)) s, tests $((SECONDS - built)) s"
  return "$ok"
}

run_tsan() {
  local dir=build-tsan ok=0 start=$SECONDS built
  local reports=$root/$dir/sanitizer-reports
  reports_dir "$dir"
  export TSAN_OPTIONS=log_path=$reports/tsan:second_deadlock_stack=1:suppressions=$root/scripts/sanitizers/tsan.supp
  # One OpenMP/MKL thread: LibTorch's uninstrumented pools would only add noise.
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
  build "$dir" thread test_data test_tokenizer test_dist || ok=1
  built=$SECONDS
  if ((ok == 0)); then
    ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" -LE gpu -R "$tsan_tests" || ok=1
    # The trainer's loader threads (data.num_workers) feeding real training steps.
    local run=$dir/sanitizer-train
    rm -rf "$run"
    echo "sanitize: tsan: siamese train configs/tiny/quickstart.yaml --data.num_workers=3"
    if ! "$dir/siamese" train configs/tiny/quickstart.yaml --data.num_workers=3 --max_duration=12 \
      --save_interval=1000 --eval_interval=1000 --save_folder="$run" >"$run.log" 2>&1; then
      cat "$run.log" >&2
      ok=1
    fi
  fi
  check_reports "$dir" tsan || ok=1
  unset TSAN_OPTIONS OMP_NUM_THREADS MKL_NUM_THREADS
  echo "sanitize: tsan: build $((built - start)) s, tests $((SECONDS - built)) s"
  return "$ok"
}

steps=("$@")
((${#steps[@]})) || steps=(asan tsan)
status=0
for step in "${steps[@]}"; do
  case $step in
    asan) run_asan || status=1 ;;
    tsan) run_tsan || status=1 ;;
    *)
      echo "sanitize: unknown step $step (asan or tsan)" >&2
      exit 2
      ;;
  esac
done
exit "$status"
