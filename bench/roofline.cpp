// The machine's own limits, measured in the same way as the kernels they bound:
// memory bandwidth (plain read, copy, in-place read-modify-write) over buffers far larger
// than the caches, with one and two threads; and the fused multiply-add peak per thread
// (GFLOP/s, 2 flops per lane per FMA) with the widest packet the compiler flags allow.
// Build with the flags you benchmark with (e.g. the `native` CMake preset).
//
//   bench_roofline --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <posenc/backend/simd/avx2.hpp>
#include <posenc/backend/simd/avx512.hpp>
#include <posenc/backend/simd/neon.hpp>
#include <posenc/core/backend.hpp>
#include <posenc/core/view.hpp>
#include <type_traits>
#include <vector>

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

// FMA peak: 12 independent accumulator chains hide the FMA latency (4 cycles) on two
// FMA pipes; nothing touches memory inside the loop. Arch names the packet
// (backend/simd); scalar runs plain float code, whatever the compiler makes of it.
template <class Arch>
void fma_peak(benchmark::State& state) {
  constexpr int kChains = 12;
  constexpr Index kSteps = 1 << 16;
  int lanes = 1;
  for (auto _ : state) {
    if constexpr (std::is_same_v<Arch, posenc::backend::scalar>) {
      float acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = static_cast<float>(c) * 1e-3f;
      for (Index s = 0; s < kSteps; ++s)
        for (int c = 0; c < kChains; ++c) acc[c] = std::fma(acc[c], 0.999999f, 1e-7f);
      benchmark::DoNotOptimize(acc);
    } else {
      using P = posenc::simd::packet<float, Arch>;
      lanes = P::size;
      P acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = P::broadcast(static_cast<float>(c) * 1e-3f);
      const P m = P::broadcast(0.999999f), a = P::broadcast(1e-7f);
      for (Index s = 0; s < kSteps; ++s)
        for (int c = 0; c < kChains; ++c) acc[c] = fmadd(acc[c], m, a);
      float out[P::size];
      P sum = acc[0];
      for (int c = 1; c < kChains; ++c) sum = sum + acc[c];
      sum.store(out);
      benchmark::DoNotOptimize(out);
    }
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kSteps * kChains * lanes * 2,
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
