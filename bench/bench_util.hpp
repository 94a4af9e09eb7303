#pragma once
// Helpers shared by the benchmarks: deterministic inputs, the Eigen GEMM baseline that
// the attention benchmarks measure next to their kernels in the same run, and the FMA
// peak's loop.

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <posenc/backend/simd/packets.hpp>
#include <posenc/core/view.hpp>

namespace posenc_bench {

using fmat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Uniform [-1, 1) float entries from a 64-bit LCG: the same inputs on every platform and run.
inline fmat random_input(posenc::Index rows, posenc::Index cols, std::uint64_t seed) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  fmat m(rows, cols);
  for (posenc::Index i = 0; i < m.size(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    m.data()[i] = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return m;
}

/// The attention baseline's timed loop: the two Eigen float products of one head
/// (S = Q·Kᵀ [n, n], O = S·V [n, d]), the work any attention does, without softmax or
/// positions. Counters and label are the caller's.
inline void run_eigen_gemms(benchmark::State& state, posenc::Index n, posenc::Index d) {
  const fmat q = random_input(n, d, 1), k = random_input(n, d, 2), v = random_input(n, d, 3);
  fmat s(n, n), o(n, d);
  for (auto _ : state) {
    s.noalias() = q * k.transpose();
    o.noalias() = s * v;
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
}

/// Independent accumulator chains in fma_loop: they hide an FMA's latency (4 cycles) on
/// two FMA pipes.
inline constexpr int fma_chains = 12;

/// The FMA peak's loop: `steps` rounds of fma_chains fused multiply-adds on registers, with
/// packets of Tag's architecture (backend/simd; plain float code where Tag has none, whatever
/// the compiler makes of it); nothing touches memory inside the loop. Sets `lanes` to the
/// floats one FMA takes and returns a sum of the chains (to keep them).
template <class Tag>
float fma_loop(posenc::Index steps, int& lanes) {
  if constexpr (posenc::simd::has_packet_arch_v<Tag>) {
    using P = posenc::simd::packet<float, posenc::simd::packet_arch_t<Tag>>;
    lanes = P::size;
    P acc[fma_chains];
    for (int c = 0; c < fma_chains; ++c) acc[c] = P::broadcast(static_cast<float>(c) * 1e-3f);
    const P m = P::broadcast(0.999999f), a = P::broadcast(1e-7f);
    for (posenc::Index s = 0; s < steps; ++s)
      for (int c = 0; c < fma_chains; ++c) acc[c] = fmadd(acc[c], m, a);
    P sum = acc[0];
    for (int c = 1; c < fma_chains; ++c) sum = sum + acc[c];
    return reduce_add(sum);
  } else {
    lanes = 1;
    float acc[fma_chains];
    for (int c = 0; c < fma_chains; ++c) acc[c] = static_cast<float>(c) * 1e-3f;
    for (posenc::Index s = 0; s < steps; ++s)
      for (int c = 0; c < fma_chains; ++c) acc[c] = std::fma(acc[c], 0.999999f, 1e-7f);
    float sum = 0.0f;
    for (int c = 0; c < fma_chains; ++c) sum += acc[c];
    return sum;
  }
}

}  // namespace posenc_bench
