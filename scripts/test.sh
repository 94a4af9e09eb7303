#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build everything, run the whole test
# suite through CTest. CXX picks the compiler (default g++); BUILD_DIR the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
build="${BUILD_DIR:-build/test}"
# The CUDA backend's tests, benchmarks and examples are compiled wherever nvcc is; they run
# only where a GPU is (elsewhere CTest reports them skipped). POSENC_CUDA=0 leaves them out.
# Architectures: the visible GPU's (native) where there is one; elsewhere sm_90 alone, a
# compile check (two architectures cost nvcc 30% more: test_cuda_rotary.cu 61 s of CPU
# against 47 s; the kernels with sm_80-specific code are compiled for sm_80 as well, by
# tests/cuda's posenc_cuda_sm80_kernels, 77 s of CPU). CUDA_ARCHITECTURES="80 90" overrides.
# Without a GPU nothing can run them: all but the sm_80 kernels are compiled to PTX alone
# (POSENC_CUDA_PTX_ONLY, cmake/posencCuda.cmake: no ptxas, ~400 s of CPU less), and nvcc
# optimises neither side (-O0, cicc -O0: test_cuda_flash.cu 108 -> 57 s, the sm_80 kernels,
# still assembled, 140 -> 25 s), as the programs cannot run here.
cuda=()
cuda_flags="-O2"
nvcc="$(command -v nvcc || true)"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [[ "${POSENC_CUDA:-1}" == 0 ]]; then
  echo "test.sh: POSENC_CUDA=0: the CUDA backend is not built"
elif [[ -n "$nvcc" ]]; then
  gpu=0
  if nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
  archs="${CUDA_ARCHITECTURES:-}"
  if [[ -z "$archs" ]]; then
    if ((gpu)); then archs=native; else archs=90; fi
  fi
  ptx_only=OFF
  if ((!gpu)) && [[ "$archs" != *native* && "$archs" != all* ]]; then
    ptx_only=ON
    cuda_flags="-O0 -Xcicc -O0"
  fi
  echo "test.sh: nvcc found ($nvcc): building the CUDA tests too, for $archs (run only where a GPU is;" \
    "PTX only: $ptx_only)"
  cuda=(-DPOSENC_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" "-DCMAKE_CUDA_ARCHITECTURES=${archs// /;}"
        "-DPOSENC_CUDA_PTX_ONLY=$ptx_only")
else
  echo "test.sh: nvcc not found: the CUDA backend is not built (needs the CUDA toolkit)"
fi
# The default build type, Check: optimised (-O2) with assertions on (posenc's and Eigen's)
# and no debug info, which the tests do not need and which made this build ~1.5x slower
# (test_merge.cpp: 43 s without -g, 65 s with, g++ 12). BUILD_TYPE=RelWithDebInfo or Debug
# gives a build to debug in.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Check}" \
  -DCMAKE_CXX_FLAGS_CHECK="-O2" -DCMAKE_CUDA_FLAGS_CHECK="$cuda_flags" \
  -DCMAKE_CXX_COMPILER="${CXX:-g++}" -DPOSENC_WARNINGS_AS_ERRORS=ON "${cuda[@]}" ${CMAKE_EXTRA_ARGS:-}
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
