#!/usr/bin/env bash
# Builds the project with sanitizers in folders of their own and runs the tests that matter
# for each (docs/build.md, "Sanitizers"):
#   asan  build-asan/, -DSIAMESE_SANITIZE="address;undefined": AddressSanitizer, LeakSanitizer
#         and UBSan on the CPU tests of common, config, data and tokenizer (and the CLI they run)
#   tsan  build-tsan/, -DSIAMESE_SANITIZE=thread: ThreadSanitizer on the threaded code: the
#         batch prefetcher, the tokenizer's encode pool, the data-parallel gradient hooks
#         (2 Gloo ranks under torchrun)
# Usage: scripts/sanitize.sh [asan] [tsan]   (both when none is named). Needs what
# scripts/setup.sh installs; LibTorch and the Debian libraries are not instrumented.
#
# Environment: SIAMESE_JOBS (nproc), SIAMESE_TEST_JOBS (2), SIAMESE_ASAN_LABELS and
# SIAMESE_TSAN_TESTS (the ctest selections below, to widen or narrow them).
#
# Every report is written to <build folder>/sanitizer-reports/ (log_path), also those of
# the `siamese` processes tests start and expect to fail, so a report fails the run even when
# the test that caused it passed; the reports are printed at the end.
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
tsan_tests=${SIAMESE_TSAN_TESTS:-^(Prefetcher|TokenizeCorpus|DataParallel)\.}
root=$PWD

# configure FOLDER SANITIZERS: a unity build (each folder's sources compiled together, which
# divides the build's time by about three on 2 cores) with one CUDA architecture (the kernels
# are not instrumented and no sanitizer run uses a GPU).
configure() {
  if [ ! -f "$1/build.ninja" ]; then
    local torch_prefix
    torch_prefix=$("$SIAMESE_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    TORCH_CUDA_ARCH_LIST=8.0 cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DSIAMESE_PYTHON="$SIAMESE_PYTHON" \
      -DSIAMESE_CUDA_ARCHS=8.0 -DCMAKE_UNITY_BUILD=ON -DSIAMESE_SANITIZE="$2" >"$1-configure.log" 2>&1 ||
      { cat "$1-configure.log" >&2; exit 1; }
    mv "$1-configure.log" "$1/configure.log"
  fi
}

# check_reports FOLDER NAME: fails, printing them, when the run left sanitizer reports.
check_reports() {
  local reports=("$1"/sanitizer-reports/*)
  if [ -e "${reports[0]}" ]; then
    echo "sanitize: $2 found problems (${#reports[@]} reports in $1/sanitizer-reports):" >&2
    for r in "${reports[@]}"; do
      echo "=== $r" >&2
      cat "$r" >&2
    done
    return 1
  fi
  echo "sanitize: $2: no reports"
}

# run_step NAME FOLDER SANITIZERS "TARGETS" CTEST_SELECTION...: configure, build only the
# test executables the selection needs (and the siamese binary they run), test, check reports.
status=0
run_step() {
  local name=$1 dir=$2 sanitizers=$3 targets
  read -ra targets <<<"$4"
  shift 4
  local start=$SECONDS ok=0
  configure "$dir" "$sanitizers"
  # Reports of the build's test discovery (it runs the executables) count too.
  rm -rf "$dir/sanitizer-reports"
  mkdir -p "$dir/sanitizer-reports"
  echo "sanitize: $name: building ${targets[*]} in $dir"
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}" || ok=1
  local built=$SECONDS
  if ((ok == 0)); then
    echo "sanitize: $name: ctest $*"
    ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" -LE gpu "$@" || ok=1
  fi
  check_reports "$dir" "$name" || ok=1
  echo "sanitize: $name: build $((built - start)) s, tests $((SECONDS - built)) s"
  ((ok == 0)) || status=1
}

steps=("$@")
((${#steps[@]})) || steps=(asan tsan)
for step in "${steps[@]}"; do
  case $step in
    asan)
      report_dir=$root/build-asan/sanitizer-reports
      # GCC links UBSan as its own runtime: its reports go to stderr whatever log_path says
      # (ASan reads UBSAN_OPTIONS too, hence log_path in both), so a UBSan error aborts the
      # process; a test whose `siamese` is expected to fail sees a signal instead of its code.
      ASAN_OPTIONS=log_path=$report_dir/asan:detect_leaks=1:protect_shadow_gap=0:strict_string_checks=1 \
      UBSAN_OPTIONS=log_path=$report_dir/asan:print_stacktrace=1:halt_on_error=1:abort_on_error=1 \
        run_step asan build-asan "address;undefined" "test_common test_config test_data test_tokenizer" \
        -L "$asan_labels"
      ;;
    tsan)
      report_dir=$root/build-tsan/sanitizer-reports
      # One OpenMP/MKL thread: LibTorch's uninstrumented thread pools would only add noise.
      OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
      TSAN_OPTIONS=log_path=$report_dir/tsan:second_deadlock_stack=1:suppressions=$root/scripts/sanitizers/tsan.supp \
        run_step tsan build-tsan thread "test_data test_tokenizer test_dist" -R "$tsan_tests"
      ;;
    *)
      echo "sanitize: unknown step $step (asan or tsan)" >&2
      exit 2
      ;;
  esac
done
exit "$status"
