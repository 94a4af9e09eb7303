// 06 (CUDA): RoPE of a Llama 3.1 8B attention layer on the GPU. Queries [L, 32, 128] and
// keys [L, 8, 128] live in device memory; one call rotates both in place with the
// model's scaled frequencies (llama3, factor 8), the same numbers as on the CPU, which this
// program checks. Build with nvcc (POSENC_ENABLE_CUDA=ON); exits 77 without a device.
#include <cstdio>
#include <posenc/cuda.cuh>

int main() {
  using posenc::Index;
  if (posenc::cuda::device_count() == 0) return std::puts("no CUDA device: skipped"), 77;
  const Index L = 1000, Hq = 32, Hk = 8, D = 128;
  posenc::rope_config llama;  // config.json: rope_theta, rope_scaling
  llama.head_dim = D;
  llama.base = 500000.0;
  llama.scaling = posenc::rope_scaling_type::llama3;
  llama.factor = 8.0;
  llama.original_max_positions = 8192;
  const posenc::row_matrix<float> q_host = posenc::row_matrix<float>::Random(L, Hq * D);
  const posenc::row_matrix<float> k_host = posenc::row_matrix<float>::Random(L, Hk * D);
  auto q = posenc::cuda::to_device(q_host), k = posenc::cuda::to_device(k_host);

  posenc::rotary_embedding<float, posenc::backend::cuda> rope(llama, L);
  rope.apply_qk(posenc::view_shd(q.data(), L, Hq, D), posenc::view_shd(k.data(), L, Hk, D), 0);

  // the same rotation on the CPU
  posenc::row_matrix<float> q_cpu = q_host, k_cpu = k_host;
  posenc::rotary_embedding<float> cpu(llama, L);
  cpu.apply_qk(posenc::view_shd(q_cpu.data(), L, Hq, D), posenc::view_shd(k_cpu.data(), L, Hk, D),
               0);
  const double dq = (posenc::cuda::to_host(q, L, Hq * D) - q_cpu).cwiseAbs().maxCoeff();
  const double dk = (posenc::cuda::to_host(k, L, Hk * D) - k_cpu).cwiseAbs().maxCoeff();
  std::printf("RoPE on the GPU vs the CPU: max |difference| q %.3g, k %.3g\n", dq, dk);
  return dq < 1e-6 && dk < 1e-6 ? 0 : 1;
}
