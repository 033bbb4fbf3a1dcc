#!/usr/bin/env bash
# Installs what is missing (Debian packages, the pinned PyPI packages into a virtual
# environment outside the clone), then configures and builds Release into build/ against
# LibTorch 2.11 with CUDA. Safe to re-run: a ready machine finishes in seconds.
# Arguments name the CMake targets to build (scripts/quickstart.sh builds only `siamese`,
# the binary and its libraries); none builds every target, the tests included.
#
# Environment: SIAMESE_BUILD_DIR (build), SIAMESE_JOBS (nproc), SIAMESE_CMAKE_ARGS,
# SIAMESE_VENV (~/.cache/siamese/venv), SIAMESE_PYTHON (a python with torch 2.11 to use
# as it is), SIAMESE_DEPS_PREFIX (a folder where the Debian packages were unpacked with
# `dpkg -x`, for machines without apt such as the GPU machine: scripts/gpu_check.sh),
# SIAMESE_CUDA_ARCHS (8.0;9.0), SIAMESE_UNITY (ON: a unity build, each component's sources
# compiled as a few translation units, which takes a cold build on 2 cores from about 27 to
# about 8 minutes; OFF rebuilds less after an edit to one file).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libgloo-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev libgtest-dev zlib1g-dev
  libicu-dev nlohmann-json3-dev libssl-dev
  clang-format shellcheck  # scripts/check_format.sh and scripts/lint.sh (run by scripts/test.sh)
)
if [ -z "${SIAMESE_DEPS_PREFIX:-}" ]; then
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
fi

# shellcheck source=python_env.sh
SIAMESE_INSTALL=1 source scripts/python_env.sh
if ! siamese_has_torch "$SIAMESE_PYTHON"; then
  echo "setup: $SIAMESE_PYTHON has no torch $siamese_torch_pin; remove $SIAMESE_VENV and re-run" >&2
  exit 1
fi

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || {
  echo "setup: nvcc not found: install the CUDA 13.0 toolkit (docs/build.md)" >&2
  exit 1
}

build_dir=${SIAMESE_BUILD_DIR:-build}
# A build folder copied or moved from elsewhere (another clone, a renamed one) still builds
# the sources it was configured for, into the folder it was configured in: CMake only prints
# "CMake Error: The current CMakeCache.txt directory ... is different" and goes on. Stop
# before that instead. A symlink to the folder itself is fine (-ef compares the files).
cache="$build_dir/CMakeCache.txt"
if [ -f "$cache" ]; then
  configured_in=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$cache")
  if [ ! "$cache" -ef "$configured_in/CMakeCache.txt" ]; then
    echo "setup: $build_dir was configured as $configured_in and copied or moved here, so it would" \
      "build the sources it was configured for, not these; remove it (rm -rf $build_dir) and" \
      "re-run, or set SIAMESE_BUILD_DIR to a new folder" >&2
    exit 1
  fi
fi
# SIAMESE_CMAKE_ARGS holds several arguments separated by spaces.
read -ra extra_cmake_args <<<"${SIAMESE_CMAKE_ARGS:-}"
jobs=${SIAMESE_JOBS:-$(nproc)}
if [ ! -f "$build_dir/build.ninja" ]; then
  torch_prefix=$("$SIAMESE_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  prefix="$torch_prefix"
  [ -n "${SIAMESE_DEPS_PREFIX:-}" ] && prefix="$prefix;$SIAMESE_DEPS_PREFIX/usr;$SIAMESE_DEPS_PREFIX/usr/lib/x86_64-linux-gnu/cmake"
  # TORCH_CUDA_ARCH_LIST: without a GPU, torch's CMake would otherwise guess architectures.
  TORCH_CUDA_ARCH_LIST=${SIAMESE_CUDA_ARCHS:-8.0;9.0} \
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DSIAMESE_PYTHON="$SIAMESE_PYTHON" \
    -DSIAMESE_CUDA_ARCHS="${SIAMESE_CUDA_ARCHS:-8.0;9.0}" -DCMAKE_UNITY_BUILD="${SIAMESE_UNITY:-ON}" \
    "${extra_cmake_args[@]}"
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
