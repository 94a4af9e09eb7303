// Compiled by the host C++ compiler, which must refuse it: the CUDA backend's classes exist
// only in translation units compiled by nvcc that include <posenc/cuda.cuh>
// (CTest cuda_tag_in_host_code expects the static_assert's message).
#include <posenc/posenc.hpp>

int main() {
  posenc::rotary_embedding<float, posenc::backend::cuda> rope(64);
  return static_cast<int>(rope.head_dim());
}
