#!/usr/bin/env bash
# Builds, on a machine with nvcc (no GPU needed), what scripts/gpu_check.sh runs on a GPU
# machine, into one small folder to copy there (docs/backends.md, "CUDA on a GPU machine"):
#
#   scripts/gpu_build.sh [STAGE_DIR]        (default build-gpu/stage)
#
# STAGE_DIR/tests  the CUDA test binaries (tests/cuda), for sm_90 (Hopper) unless
#                  CUDA_ARCHS says otherwise (e.g. CUDA_ARCHS="80;90")
# STAGE_DIR/bench  the CUDA benchmarks (bench/cuda); bench_cuda_flash links the toolkit's
#                  shared cuBLAS (libcublas.so.13, not staged: far over the size limit),
#                  which gpu_check.sh finds in the GPU machine's toolkit
# STAGE_DIR/lib    libbenchmark.so.1debian: Debian ships Google Benchmark only as a shared
#                  library; gpu_check.sh puts this folder on LD_LIBRARY_PATH
# The CUDA runtime is linked statically (nvcc's default), so the binaries need only the
# driver on the GPU machine. Prints the folder's size (the device tool carries 64 MiB).
# GPU_BUILD_JOBS: parallel compile jobs (default: every core).
set -euo pipefail
cd "$(dirname "$0")/.."
stage="${1:-build-gpu/stage}"
build="${GPU_BUILD_DIR:-build-gpu/build}"
nvcc="$(command -v nvcc || true)"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
[[ -n "$nvcc" ]] || { echo "gpu_build: nvcc not found" >&2; exit 2; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPOSENC_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
  -DPOSENC_WARNINGS_AS_ERRORS=ON -DPOSENC_BUILD_TESTS=ON -DPOSENC_BUILD_BENCHMARKS=ON \
  -DPOSENC_BUILD_EXAMPLES=ON -DPOSENC_INSTALL=OFF >/dev/null
# the CUDA targets only: their names start with test_cuda_, bench_cuda_ or example_cuda
targets=$(cmake --build "$build" --target help | sed -n 's/^\(\(test\|bench\|example\)_cuda[A-Za-z0-9_]*\): phony$/\1/p' | tr '\n' ' ')
# shellcheck disable=SC2086
cmake --build "$build" -j "${GPU_BUILD_JOBS:-$(nproc)}" --target $targets
rm -rf "$stage"
mkdir -p "$stage/tests" "$stage/bench" "$stage/lib" "$stage/examples"
find "$build/tests/cuda" -maxdepth 1 -type f -name 'test_cuda_*' -perm -u+x -exec cp {} "$stage/tests/" \;
find "$build/bench/cuda" -maxdepth 1 -type f -name 'bench_cuda_*' -perm -u+x -exec cp {} "$stage/bench/" \; 2>/dev/null || true
find "$build/examples" -maxdepth 2 -type f -name 'example_cuda*' -perm -u+x -exec cp {} "$stage/examples/" \; 2>/dev/null || true
lib=$(ldconfig -p | sed -n 's/.*libbenchmark.so.1debian.*=> \(.*\)$/\1/p' | head -1)
[[ -n "$lib" ]] && cp -L "$lib" "$stage/lib/"
strip --strip-debug "$stage"/tests/* "$stage"/bench/* "$stage"/examples/* 2>/dev/null || true
echo "gpu_build: $(du -sh "$stage" | cut -f1) in $stage:"
ls "$stage"/*
# what the binaries load from the GPU machine rather than from the stage (the driver's
# libcuda is loaded at run time and not listed)
extra=$(for b in "$stage"/tests/* "$stage"/bench/* "$stage"/examples/*; do
  if [[ -f "$b" ]]; then LD_LIBRARY_PATH="$stage/lib" ldd "$b" 2>/dev/null || true; fi
done | awk '$1 ~ /^lib(cublas|cublasLt|cudart)\./ {print $1}' | sort -u | tr '\n' ' ')
[[ -n "$extra" ]] && echo "gpu_build: from the GPU machine's toolkit (gpu_check.sh finds them): $extra"
exit 0
