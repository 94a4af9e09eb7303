// 07 (CUDA): one attention layer of Llama 3.1 8B serving a request on the GPU: the prompt's
// prefill, then token-by-token decode against a KV cache. 32 query heads share 8 KV heads
// (GQA), head dim 128, RoPE with the model's llama3-scaled frequencies; activations and
// cache in bfloat16. The cache holds keys before RoPE: cuda::flash_multi_head_attention
// rotates q and k as it loads its tiles (cuda::rotary_policy), so no separate pass rotates.
// Prefill is one causal call over the prompt; each decode step appends its token's k and v
// to the cache and attends its one query (q_offset = its position) to every cached row,
// with the keys split over the SMs. Every output is checked against the CPU's attention in
// double on the same bfloat16 values. Build with nvcc (POSENC_ENABLE_CUDA=ON); exits 77
// without a device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <posenc/attention.hpp>
#include <posenc/attention/flash.hpp>
#include <posenc/cuda.cuh>
#include <random>
#include <vector>

using posenc::Index;
using bf16 = Eigen::bfloat16;  // storage; the kernel computes in float

namespace {

constexpr Index prompt = 500, steps = 4;   // the request: prompt tokens, then decoded ones
constexpr Index max_len = prompt + steps;  // the cache's rows
constexpr Index Hq = 32, Hkv = 8, D = 128, row = Hkv * D;
constexpr double bound = 1e-2;  // x max |out|: the output rounded once to bfloat16 (8 bits)

std::mt19937 gen(2024);

/// n values in [-1, 1) standing for a projection's output, rounded to bfloat16.
std::vector<bf16> activations(Index n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16> x(static_cast<std::size_t>(n));
  for (bf16& e : x) e = bf16(u(gen));
  return x;
}

std::vector<double> widen(const bf16* x, Index n) {
  std::vector<double> d(static_cast<std::size_t>(n));
  for (Index e = 0; e < n; ++e) d[std::size_t(e)] = static_cast<double>(static_cast<float>(x[e]));
  return d;
}

}  // namespace

int main() {
  if (posenc::cuda::device_count() == 0) return std::puts("no CUDA device: skipped"), 77;
  posenc::rope_config llama;  // config.json: head_dim, rope_theta, rope_scaling
  llama.head_dim = D;
  llama.base = 500000.0;
  llama.scaling = posenc::rope_scaling_type::llama3;
  llama.factor = 8.0;
  llama.original_max_positions = 8192;
  // RoPE's storage type must be the attention's; the CPU check rotates in double
  posenc::rotary_embedding<bf16, posenc::backend::cuda> rope(llama, max_len);
  const posenc::cuda::rotary_policy<bf16> gpu_rope(rope);
  const posenc::rotary_policy cpu_rope(posenc::rotary_embedding<double>(llama, max_len));

  // the KV cache [1, max_len, 8, 128] on the device, and a host copy for the check
  posenc::cuda::device_buffer<bf16> k_cache(max_len * row), v_cache(max_len * row);
  std::vector<bf16> k_host(std::size_t(max_len * row)), v_host(std::size_t(max_len * row));
  std::printf(
      "Llama 3.1 8B attention layer: %d query heads, %d KV heads, head dim %d, RoPE "
      "base 500000 (llama3, x8);\nbfloat16 activations and KV cache [1, %d, %d, %d]\n",
      int(Hq), int(Hkv), int(D), int(max_len), int(Hkv), int(D));

  // n new tokens at positions [pos, pos + n): their k and v go into the cache, their queries
  // attend to cache rows [0, pos + n) on the GPU and on the CPU; true when they agree
  auto layer_step = [&](const char* stage, Index pos, Index n,
                        const posenc::cuda::flash_options& options) {
    const std::vector<bf16> q = activations(n * Hq * D), k = activations(n * row),
                            v = activations(n * row);
    std::copy(k.begin(), k.end(), k_host.begin() + pos * row);
    std::copy(v.begin(), v.end(), v_host.begin() + pos * row);
    posenc::cuda::copy_to_device(k_cache.data() + pos * row, k.data(), n * row);
    posenc::cuda::copy_to_device(v_cache.data() + pos * row, v.data(), n * row);
    posenc::cuda::device_buffer<bf16> q_dev(n * Hq * D), out(n * Hq * D);
    posenc::cuda::copy_to_device(q_dev.data(), q.data(), n * Hq * D);

    posenc::attention_config config;
    config.q_offset = pos;  // query i sits at position pos + i
    config.mask.causal = true;
    const Index len_k = pos + n;
    posenc::cuda::flash_multi_head_attention(
        posenc::view_shd<const bf16>(q_dev.data(), n, Hq, D),
        posenc::view_shd<const bf16>(k_cache.data(), len_k, Hkv, D),
        posenc::view_shd<const bf16>(v_cache.data(), len_k, Hkv, D),
        posenc::view_shd(out.data(), n, Hq, D), config, gpu_rope, options);
    const posenc::row_matrix<bf16> got = posenc::cuda::to_host(out, n, Hq * D);  // waits

    // the CPU on the same values, in double
    const std::vector<double> qd = widen(q.data(), n * Hq * D),
                              kd = widen(k_host.data(), len_k * row),
                              vd = widen(v_host.data(), len_k * row);
    std::vector<double> want(std::size_t(n * Hq * D));
    posenc::flash_options threads;
    threads.threads = 0;  // every core
    posenc::flash_multi_head_attention(
        posenc::view_shd(qd.data(), n, Hq, D), posenc::view_shd(kd.data(), len_k, Hkv, D),
        posenc::view_shd(vd.data(), len_k, Hkv, D), posenc::view_shd(want.data(), n, Hq, D), config,
        cpu_rope, threads);

    double err = 0, scale = 0;
    for (Index e = 0; e < got.size(); ++e) {
      const double w = want[std::size_t(e)], g = static_cast<float>(got.data()[e]);
      scale = std::max(scale, std::abs(w));
      err = std::isfinite(g) ? std::max(err, std::abs(g - w)) : HUGE_VAL;  // NaN fails
    }
    std::printf("%-7s %4d quer%s at %4d, keys [0, %4d): max |GPU - CPU| %.2e, max |out| %.3f\n",
                stage, int(n), n == 1 ? "y " : "ies", int(pos), int(len_k), err, scale);
    return err <= bound * scale;
  };

  // prefill: the prompt's k and v fill the cache's first rows; one causal call over them
  bool ok = layer_step("prefill", 0, prompt, {});
  // decode: one query row per head leaves most SMs idle, so the keys are split and the
  // partial results merged (the default, 0, chooses from the SM count and splits from 512
  // keys on: ask for 4 here)
  posenc::cuda::flash_options split;
  split.splits = 4;
  for (Index t = 0; t < steps; ++t) ok = layer_step("decode", prompt + t, 1, split) && ok;
  std::printf("%s: every output within %.0e x max |out| of the CPU (float64, same inputs)\n",
              ok ? "passed" : "FAILED", bound);
  return ok ? 0 : 1;
}
