#pragma once
// Helpers shared by the benchmarks: deterministic inputs and the Eigen GEMM baseline that
// the attention benchmarks measure next to their kernels in the same run.

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdint>
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

}  // namespace posenc_bench
