#!/usr/bin/env bash
# Installs what is missing, builds, runs the mechanical checks (clang-format, shellcheck,
# ruff), every test (ctest, output on failure; arguments go to ctest), then the sanitizer
# runs of scripts/sanitize.sh in their own build folders (docs/build.md, "Checks").
#
# Environment: SIAMESE_SANITIZERS, the sanitizer steps to run after ctest ("asan tsan" by
# default; empty to skip them), SIAMESE_TEST_JOBS (2), and what scripts/setup.sh reads.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check_format.sh
scripts/lint.sh
build_dir=${SIAMESE_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "${SIAMESE_TEST_JOBS:-2}" "$@"
read -ra sanitizers <<<"${SIAMESE_SANITIZERS-asan tsan}"
if ((${#sanitizers[@]})); then
  scripts/sanitize.sh "${sanitizers[@]}"
fi
