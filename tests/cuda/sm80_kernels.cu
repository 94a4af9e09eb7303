// The kernels with sm_80-only code paths (cp.async and ldmatrix in the tensor-core flash
// kernel, 16-byte pieces in RoPE), instantiated and compiled for sm_80: the CUDA tests are
// built for one architecture only (scripts/test.sh), so this keeps Ampere's device code
// compiling in every CI run at a fraction of the tests' cost.
#include <posenc/backend/cuda/flash.cuh>
#include <posenc/backend/cuda/rotary.cuh>

namespace posenc {
namespace kernels {

template void flash_forward<Eigen::bfloat16, float>(backend::cuda const&,
                                                    const flash_args<Eigen::bfloat16, float>&,
                                                    cudaStream_t);
template void flash_forward<Eigen::half, float>(backend::cuda const&,
                                                const flash_args<Eigen::half, float>&,
                                                cudaStream_t);
template void flash_forward<float, float>(backend::cuda const&, const flash_args<float, float>&,
                                          cudaStream_t);
template void rope_rotate<float, float>(backend::cuda const&, const rope_device_args<float, float>&,
                                        cudaStream_t);
template void rope_rotate<Eigen::bfloat16, float>(backend::cuda const&,
                                                  const rope_device_args<Eigen::bfloat16, float>&,
                                                  cudaStream_t);
template void rope_rotate<Eigen::half, float>(backend::cuda const&,
                                              const rope_device_args<Eigen::half, float>&,
                                              cudaStream_t);
template void rope_rotate<double, double>(backend::cuda const&,
                                          const rope_device_args<double, double>&, cudaStream_t);

}  // namespace kernels
}  // namespace posenc
