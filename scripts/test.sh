#!/usr/bin/env bash
# Installs what is missing, builds, runs the mechanical checks (clang-format, shellcheck,
# ruff), then every test (ctest, output on failure). Arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check_format.sh
scripts/lint.sh
build_dir=${SIAMESE_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "${SIAMESE_TEST_JOBS:-2}" "$@"
