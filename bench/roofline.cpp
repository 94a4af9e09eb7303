// The machine's own limits, measured in the same way as the kernels they bound:
// memory bandwidth (plain read, copy, in-place read-modify-write) over buffers far larger
// than the caches, with one and two threads; and the fused multiply-add peak per thread
// (GFLOP/s, 2 flops per lane per FMA) with the widest packet the compiler flags allow.
// Build with the flags you benchmark with (e.g. the `native` CMake preset).
//
//   bench_roofline --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstring>
#include <posenc/backend/simd/avx2.hpp>
#include <posenc/backend/simd/avx512.hpp>
#include <posenc/backend/simd/neon.hpp>
#include <posenc/core/backend.hpp>
#include <posenc/core/view.hpp>
#include <vector>

#include "bench_util.hpp"

namespace {

using posenc::Index;

// 256 MiB per buffer: well past any last-level cache.
constexpr Index kFloats = Index{64} << 20;

std::vector<float>& buffer(int which) {
  static std::vector<float> a(static_cast<std::size_t>(kFloats), 1.0f);
  static std::vector<float> b(static_cast<std::size_t>(kFloats), 2.0f);
  return which == 0 ? a : b;
}

// The slice [begin, end) of thread t out of n.
std::pair<Index, Index> slice(Index total, int t, int n) {
  return {total * t / n, total * (t + 1) / n};
}

void BM_read(benchmark::State& state) {
  auto [b, e] = slice(kFloats, state.thread_index(), state.threads());
  const float* x = buffer(0).data();
  for (auto _ : state) {
    const float s = Eigen::Map<const Eigen::ArrayXf>(x + b, e - b).sum();
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * (e - b) * Index(sizeof(float)));
}

void BM_copy(benchmark::State& state) {
  auto [b, e] = slice(kFloats, state.thread_index(), state.threads());
  const float* x = buffer(0).data();
  float* y = buffer(1).data();
  for (auto _ : state) {
    std::memcpy(y + b, x + b, static_cast<std::size_t>(e - b) * sizeof(float));
    benchmark::ClobberMemory();
  }
  // bytes moved: read + write
  state.SetBytesProcessed(state.iterations() * 2 * (e - b) * Index(sizeof(float)));
}

void BM_rmw_inplace(benchmark::State& state) {
  auto [b, e] = slice(kFloats, state.thread_index(), state.threads());
  float* x = buffer(1).data();
  for (auto _ : state) {
    Eigen::Map<Eigen::ArrayXf> v(x + b, e - b);
    v = v * 0.999f + 0.001f;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * (e - b) * Index(sizeof(float)));
}

// FMA peak (posenc_bench::fma_loop). Arch names the packet (backend/simd); scalar runs
// plain float code.
template <class Arch>
void fma_peak(benchmark::State& state) {
  constexpr Index kSteps = 1 << 16;
  int lanes = 1;
  for (auto _ : state) benchmark::DoNotOptimize(posenc_bench::fma_loop<Arch>(kSteps, lanes));
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kSteps * posenc_bench::fma_chains * lanes * 2,
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(Arch::name());
}

}  // namespace

BENCHMARK(BM_read)->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_copy)->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_rmw_inplace)->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_TEMPLATE(fma_peak, posenc::backend::scalar);
#if POSENC_ARCH_AVX2
BENCHMARK_TEMPLATE(fma_peak, posenc::backend::avx2);
#endif
#if POSENC_ARCH_AVX512
BENCHMARK_TEMPLATE(fma_peak, posenc::backend::avx512);
#endif
#if POSENC_ARCH_NEON
BENCHMARK_TEMPLATE(fma_peak, posenc::backend::neon);
#endif

BENCHMARK_MAIN();
