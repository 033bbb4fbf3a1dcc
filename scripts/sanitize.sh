#!/usr/bin/env bash
# Builds the project with sanitizers in folders of their own and runs what matters for each
# (docs/build.md, "Sanitizers"):
#   asan  build-asan/, -DSIAMESE_SANITIZE="address;undefined": AddressSanitizer (with leak
#         checking) and UBSan on the in-process tests of common, config, data and tokenizer:
#         the code that reads what users and files hand it (YAML, token files and their
#         sidecars, .npy, JSON, tokenizer files, text); only the libraries they link are built.
#         SIAMESE_ASAN_ALL=1 builds the whole project instrumented (about twice the time) and
#         adds those components' CLI tests, the FULL_SHARD tests of dist (Sharded.FullShard*:
#         2 Gloo ranks under torchrun; the hand-written freeing and re-gathering of block
#         storage) and the `siamese` processes all of these start
#   tsan  build-tsan/, -DSIAMESE_SANITIZE=thread: ThreadSanitizer on the project's own
#         threads: the batch prefetcher (Prefetcher.*), the trainer's loader threads over token
#         files, batch order and instance filter (RankBatches.*), and the tokenizer's encode pool
#         (TokenizeCorpus.*); only the libraries those tests link are built
# Usage: scripts/sanitize.sh [asan] [tsan]   (both when none is named). Needs what
# scripts/setup.sh installs. LibTorch and the Debian libraries are not instrumented.
#
# Environment: SIAMESE_JOBS (nproc), SIAMESE_TEST_JOBS (2), SIAMESE_ASAN_ALL (above);
# SIAMESE_ASAN_LABELS, SIAMESE_ASAN_CLI_SUITES (the suites that run the binary),
# SIAMESE_ASAN_DIST_TESTS (a --gtest_filter of test_dist) and SIAMESE_TSAN_TESTS (a ctest -R of
# suites), the selections below, to narrow them.
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
asan_cli_suites=${SIAMESE_ASAN_CLI_SUITES:-^(BuildInfo|ConfigCommand|Cli)$}
asan_dist_tests=${SIAMESE_ASAN_DIST_TESTS:-Sharded.FullShard*}
tsan_tests=${SIAMESE_TSAN_TESTS:-^(Prefetcher|RankBatches|TokenizeCorpus)$}
root=$PWD

# build FOLDER SANITIZERS ON|OFF TARGET...: configures the folder once, then builds the
# targets (test executables). With ON, those whose tests run the CLI bring the siamese binary,
# so the whole project is built; with OFF, only the libraries the targets link (their CLI
# tests are then not run). A unity build (each component's sources compiled together) takes
# about a third of the time of one file at a time on 2 cores; one CUDA architecture, as the
# kernels are neither instrumented nor run.
build() {
  local dir=$1 sanitizers=$2 binary=$3
  shift 3
  if [ ! -f "$dir/build.ninja" ]; then
    local torch_prefix
    torch_prefix=$("$SIAMESE_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    mkdir -p "$dir"
    TORCH_CUDA_ARCH_LIST=8.0 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DSIAMESE_PYTHON="$SIAMESE_PYTHON" \
      -DSIAMESE_CUDA_ARCHS=8.0 -DCMAKE_UNITY_BUILD=ON -DSIAMESE_SANITIZE="$sanitizers" \
      >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; return 1; }
  fi
  cmake -B "$dir" -DSIAMESE_TESTS_BUILD_BINARY="$binary" >>"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log" >&2; return 1; }
  echo "sanitize: building $* in $dir"
  cmake --build "$dir" -j "$jobs" --target "$@"
}

# gtest_shards EXECUTABLE FILTER: the tests of EXECUTABLE that FILTER selects, from the
# repository root as ctest runs them, split over test_jobs processes side by side (ctest's
# tests are whole suites, and these are a few tests of a long one).
gtest_shards() {
  local pids=() shard status=0
  for ((shard = 0; shard < test_jobs; shard++)); do
    GTEST_TOTAL_SHARDS=$test_jobs GTEST_SHARD_INDEX=$shard "$1" --gtest_filter="$2" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || status=1
  done
  return "$status"
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
  local targets=(test_common test_config test_data test_tokenizer)
  if [ "${SIAMESE_ASAN_ALL:-0}" = 1 ]; then
    build "$dir" "address;undefined" ON "${targets[@]}" test_dist || ok=1
  else
    build "$dir" "address;undefined" OFF "${targets[@]}" || ok=1
  fi
  built=$SECONDS
  if ((ok == 0)); then
    if [ "${SIAMESE_ASAN_ALL:-0}" = 1 ]; then
      ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" -LE gpu -L "$asan_labels" || ok=1
      gtest_shards "$dir/tests/test_dist" "$asan_dist_tests" || ok=1
    else
      ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" -LE gpu -L "$asan_labels" \
        -E "$asan_cli_suites" || ok=1
    fi
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
  build "$dir" thread OFF test_data test_tokenizer || ok=1
  built=$SECONDS
  if ((ok == 0)); then
    ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" -LE gpu -R "$tsan_tests" || ok=1
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
