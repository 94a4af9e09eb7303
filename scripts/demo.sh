#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and run the tour demo.
set -euo pipefail
cd "$(dirname "$0")/.."
POSENC_WITH_TORCH=0 bash scripts/install_deps.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_BENCHMARKS=OFF
cmake --build build/release --target tour posenc_cli
./build/release/examples/tour "${1:-build/tour}"
