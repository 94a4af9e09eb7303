#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build everything, run the whole test
# suite through CTest. CXX picks the compiler (default g++); BUILD_DIR the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
build="${BUILD_DIR:-build/test}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_CXX_COMPILER="${CXX:-g++}" -DPOSENC_WARNINGS_AS_ERRORS=ON ${CMAKE_EXTRA_ARGS:-}
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
