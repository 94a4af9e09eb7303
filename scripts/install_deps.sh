#!/usr/bin/env bash
# Installs what posenc's build, tests, demo and benchmarks need, from Debian packages,
# only when something is missing. Needs root or sudo for apt-get.
set -euo pipefail

packages=(cmake ninja-build g++ libeigen3-dev catch2 libbenchmark-dev libstb-dev python3-numpy
          libopenmpi-dev openmpi-bin)
if [[ "${POSENC_WITH_TORCH:-1}" == 1 ]]; then packages+=(python3-torch); fi
if [[ -n "${POSENC_EXTRA_PACKAGES:-}" ]]; then read -r -a extra <<<"$POSENC_EXTRA_PACKAGES"; packages+=("${extra[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
