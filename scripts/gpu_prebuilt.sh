#!/usr/bin/env bash
# Here, before a call to the GPU machine: copies `siamese` and the test executables that hold
# `gpu` suites (Gpu*) from BUILD (argument 1, default build/) into DIR (argument 2, default
# .prebuilt/, git-ignored), stripped, and prints the sizes of DIR and .debs/. There,
# `SIAMESE_PREBUILT=.prebuilt scripts/gpu_check.sh "$OUT"` runs them (docs/build.md). The
# device tool carries at most 64 MiB of ignored paths, so only what the check runs goes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dir=${2:-.prebuilt}
[ -x "$build/siamese" ] || { echo "gpu_prebuilt: no $build/siamese (build it first)"; exit 1; }
rm -rf "$dir"
mkdir -p "$dir"
cp "$build/siamese" "$dir/"
for test in "$build"/tests/test_*; do
  if [ ! -f "$test" ] || [ ! -x "$test" ]; then continue; fi
  if "$test" --gtest_list_tests 2>/dev/null | grep -q '^Gpu'; then cp "$test" "$dir/"; fi
done
strip "$dir"/*
ls "$dir"
du -sh "$dir" .debs 2>/dev/null || true
