#!/usr/bin/env bash
# Downloads the Debian packages the build needs into .debs/ (git-ignored), for a machine
# without apt or network (the GPU machine): carry .debs/ there and scripts/gpu_check.sh
# unpacks them with `dpkg -x`. Run here, where apt reaches Debian's mirrors.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libcli11-dev libgtest-dev libgmock-dev nlohmann-json3-dev libicu-dev libicu72
  libgloo-dev zlib1g-dev libssl-dev libssl3
)
mkdir -p .debs
cd .debs
apt-get download "${packages[@]}" >/dev/null
ls -1 -- *.deb
