#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest, output on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${SIAMESE_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "${SIAMESE_TEST_JOBS:-2}" "$@"
