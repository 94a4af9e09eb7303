// The SIMD backends next to their baselines, measured in the same run (issue 5 targets):
//
//   sinusoidal table, L = 32768, d = 512, float:  posenc (default backend, angle addition)
//     vs a plain scalar loop of std::sin/std::cos in double, and vs posenc's scalar backend
//   RoPE in place on Q [4096, 32, 128] float (64 MiB), cached cos/sin, one and two threads
//     vs a plain in-place read-modify-write pass over the same buffer (the memory roofline)
//   RoPE in place on Q [512, 32, 128] (8 MiB: the L3 cache here) and [32, 32, 128] (512 KiB:
//     L2): default vs scalar backend, next to the read-modify-write pass on the same buffer
//
// Build with the flags you benchmark with (e.g. the `native` CMake preset); the label of
// each posenc benchmark is the backend that ran.
//
//   bench_simd --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <posenc/encoding/rotary/rotary.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <vector>

namespace {

using posenc::Index;
namespace be = posenc::backend;

constexpr Index kTableLen = 32768, kTableDim = 512;

using table_t = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

table_t& table_buffer() {
  static table_t t(kTableLen, kTableDim);
  return t;
}

template <class Backend>
void BM_sinusoidal_table(benchmark::State& state) {
  const posenc::sinusoidal<float, Backend> pe(kTableDim);
  table_t& out = table_buffer();
  for (auto _ : state) {
    pe.table_into(out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kTableLen * kTableDim * Index(sizeof(float)));
  state.SetLabel(Backend::name());
}

// What a user would write without posenc: one std::sin and one std::cos per pair, in
// double (float angles would miss the accuracy target), rounded to float.
void BM_sinusoidal_std_loop(benchmark::State& state) {
  std::vector<double> w(kTableDim / 2);
  for (Index i = 0; i < kTableDim / 2; ++i)
    w[static_cast<std::size_t>(i)] =
        1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / kTableDim);
  table_t& out = table_buffer();
  for (auto _ : state) {
    for (Index p = 0; p < kTableLen; ++p) {
      float* row = out.data() + p * kTableDim;
      for (Index i = 0; i < kTableDim / 2; ++i) {
        const double a = static_cast<double>(p) * w[static_cast<std::size_t>(i)];
        row[2 * i] = static_cast<float>(std::sin(a));
        row[2 * i + 1] = static_cast<float>(std::cos(a));
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kTableLen * kTableDim * Index(sizeof(float)));
  state.SetLabel("std::sin/std::cos");
}

constexpr Index kHeads = 32, kHeadDim = 128;

// 64-byte aligned, as Eigen's (with AVX-512) and PyTorch's allocators give: a std::vector's
// 16-byte alignment splits every other 32-byte access across two cache lines, which costs
// the in-cache rotation about 20 % (and the plain RMW pass, which aligns itself, nothing).
using aligned_buffer = std::vector<float, Eigen::aligned_allocator<float>>;
aligned_buffer& q_buffer(Index len) {
  static aligned_buffer big(static_cast<std::size_t>(4096 * kHeads * kHeadDim), 0.5f);
  static aligned_buffer small(static_cast<std::size_t>(512 * kHeads * kHeadDim), 0.5f);
  static aligned_buffer tiny(static_cast<std::size_t>(32 * kHeads * kHeadDim), 0.5f);
  return len == 4096 ? big : len == 512 ? small : tiny;
}

// RoPE in place on Q [len, 32, 128]; with several benchmark threads each rotates its own
// slice of tokens (its own positions), as a caller splitting the sequence would.
template <class Backend, posenc::rope_pairing Pairing>
void BM_rope_inplace(benchmark::State& state) {
  const Index len = state.range(0);
  const Index b = len * state.thread_index() / state.threads();
  const Index e = len * (state.thread_index() + 1) / state.threads();
  posenc::rotary_embedding<float, Backend> rope(kHeadDim, -1, 10000.0, Pairing);
  rope.reserve(len);
  float* q = q_buffer(len).data() + b * kHeads * kHeadDim;
  const auto view = posenc::strided_view<float, 3>::contiguous(q, {e - b, kHeads, kHeadDim});
  for (auto _ : state) {
    rope.apply(view, b);
    benchmark::ClobberMemory();
  }
  // bytes moved: each element read and written once
  state.SetBytesProcessed(state.iterations() * 2 * (e - b) * kHeads * kHeadDim *
                          Index(sizeof(float)));
  state.SetLabel(std::string(Backend::name()) +
                 (Pairing == posenc::rope_pairing::half ? " half" : " interleaved"));
}

// The roofline for the above: one multiply-add per element over the same buffer and slices.
void BM_rmw_inplace(benchmark::State& state) {
  const Index len = state.range(0);
  const Index b = len * state.thread_index() / state.threads();
  const Index e = len * (state.thread_index() + 1) / state.threads();
  const Index n = (e - b) * kHeads * kHeadDim;
  float* q = q_buffer(len).data() + b * kHeads * kHeadDim;
  for (auto _ : state) {
    Eigen::Map<Eigen::ArrayXf> v(q, n);
    v = v * 0.999f + 0.001f;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * Index(sizeof(float)));
  state.SetLabel("plain read-modify-write");
}

using posenc::rope_pairing;

}  // namespace

BENCHMARK(BM_sinusoidal_std_loop)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_sinusoidal_table, be::scalar)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_sinusoidal_table, posenc::default_backend)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_rmw_inplace)
    ->Arg(4096)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_rope_inplace, posenc::default_backend, rope_pairing::half)
    ->Arg(4096)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_rope_inplace, posenc::default_backend, rope_pairing::interleaved)
    ->Arg(4096)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_rmw_inplace)->Arg(512)->Arg(32)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_rope_inplace, be::scalar, rope_pairing::half)
    ->Arg(512)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_rope_inplace, posenc::default_backend, rope_pairing::half)
    ->Arg(512)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_rope_inplace, be::scalar, rope_pairing::interleaved)
    ->Arg(512)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_rope_inplace, posenc::default_backend, rope_pairing::interleaved)
    ->Arg(512)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
