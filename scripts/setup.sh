#!/usr/bin/env bash
# Installs every Debian package the project needs (only those missing), then configures
# and builds Release into build/. Safe to re-run: a ready machine finishes in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libopenblas0-pthread libgloo-dev python3-torch
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev libgtest-dev zlib1g-dev
  libicu-dev nlohmann-json3-dev
  python3-numpy python3-matplotlib
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# Debian's LibTorch uses whatever libblas.so.3 the alternatives point at; the reference BLAS
# is ~30x slower than OpenBLAS (docs/results.md), so insist on OpenBLAS.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup: warning: libblas.so.3 -> ${blas:-none}, expected OpenBLAS (update-alternatives --config libblas.so.3-x86_64-linux-gnu)" ;;
esac

build_dir=${SIAMESE_BUILD_DIR:-build}
jobs=${SIAMESE_JOBS:-$(nproc)}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SIAMESE_CMAKE_ARGS:-}
fi
cmake --build "$build_dir" -j "$jobs"
