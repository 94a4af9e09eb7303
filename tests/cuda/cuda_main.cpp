// The main of the CUDA tests: a machine without a CUDA device (CI, a laptop) reports the
// test as skipped (exit 77, CTest's SKIP_RETURN_CODE) with the reason, never as passed.
#include <cuda_runtime_api.h>

#include <cstdio>

#if POSENC_CATCH_V3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char* argv[]) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("CUDA device 0: %s, sm_%d%d\n", prop.name, prop.major, prop.minor);
  return Catch::Session().run(argc, argv);
}
