// RoPE apply to Q and K (L = 4096, H = 32, D = 128, float32), in place: cached vs
// on-the-fly cos/sin, half vs interleaved pairing, on 1 and 2 threads (the tokens split in
// two halves, each rotated by its own thread with its offset), next to two baselines of the
// same buffers in the same run: a plain copy, and an in-place read-modify-write pass (each
// value negated: what a rotation in place at memory speed would cost). Bytes/s count every
// byte read and written: 2 x (|Q| + |K|) for all of them.
//
// 16-bit storage: RoPE in place on Q [4096, 32, 128] of Eigen::half and Eigen::bfloat16
// (32 MiB; float maths), default and scalar backends, next to a plain in-place
// read-modify-write pass over the same 32 MiB (a 16-bit integer add, the memory roofline).
//
//   bench_rope --benchmark_filter='lowp|rmw16' --benchmark_repetitions=3
//              --benchmark_report_aggregates_only=true --benchmark_min_time=0.2

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <posenc/encoding/rotary.hpp>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

constexpr posenc::Index L = 4096, H = 32, D = 128;
constexpr std::size_t N = static_cast<std::size_t>(L * H * D);

// 64-byte aligned, as Eigen's (with AVX-512) and PyTorch's allocators give: a large
// std::vector starts 16 bytes into a page, so every 64-byte load of the AVX-512 kernels
// spans two cache lines, which cost the rotation 3-5 % from memory and the Eigen baseline,
// which aligns its own loop, nothing (docs/benchmarks-history.md, issue 27).
using aligned_buffer = std::vector<float, Eigen::aligned_allocator<float>>;

aligned_buffer& buffer(int which) {
  static aligned_buffer bufs[4];
  auto& b = bufs[which];
  if (b.empty()) {
    b.resize(N);
    std::mt19937 gen(static_cast<unsigned>(which + 1));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : b) v = u(gen);
  }
  return b;
}

void set_bytes(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(4 * N * sizeof(float)));
}

void copy_qk(benchmark::State& state) {
  auto &q = buffer(0), &k = buffer(1), &q2 = buffer(2), &k2 = buffer(3);
  for (auto _ : state) {
    std::memcpy(q2.data(), q.data(), N * sizeof(float));
    std::memcpy(k2.data(), k.data(), N * sizeof(float));
    benchmark::DoNotOptimize(q2.data());
    benchmark::DoNotOptimize(k2.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state);
  state.SetLabel("baseline: memcpy of Q and K");
}

/// Runs work(t0, t1) over the tokens [0, L) on `threads` threads, one contiguous share each.
template <class Work>
void split_tokens(posenc::Index threads, Work work) {
  std::vector<std::thread> pool;
  const posenc::Index per = L / threads;
  for (posenc::Index t = 1; t < threads; ++t)
    pool.emplace_back(work, t * per, t + 1 == threads ? L : (t + 1) * per);
  work(posenc::Index(0), per);
  for (auto& t : pool) t.join();
}

void rmw_qk(benchmark::State& state) {
  auto &q = buffer(0), &k = buffer(1);
  const posenc::Index threads = state.range(0);
  for (auto _ : state) {
    split_tokens(threads, [&](posenc::Index t0, posenc::Index t1) {
      const auto n = (t1 - t0) * H * D;
      Eigen::Map<Eigen::ArrayXf>(q.data() + t0 * H * D, n) *= -1.0f;
      Eigen::Map<Eigen::ArrayXf>(k.data() + t0 * H * D, n) *= -1.0f;
    });
    benchmark::ClobberMemory();
  }
  set_bytes(state);
  state.SetLabel("baseline: in-place read-modify-write of Q and K");
}

void rope_qk(benchmark::State& state, posenc::rope_pairing pairing, posenc::rope_cache_mode mode) {
  posenc::rope_options opt;
  opt.cache = mode;
  // cached: every row filled up front, so the threads only read the cache (rotary.hpp)
  opt.max_len = L;
  posenc::rotary_embedding<float> rope(D, -1, 10000.0, pairing, opt);
  const posenc::Index threads = state.range(0);
  auto &q = buffer(0), &k = buffer(1);
  for (auto _ : state) {
    split_tokens(threads, [&](posenc::Index t0, posenc::Index t1) {
      rope.apply_qk(posenc::view_shd(q.data() + t0 * H * D, t1 - t0, H, D),
                    posenc::view_shd(k.data() + t0 * H * D, t1 - t0, H, D), t0);
    });
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state);
  state.SetLabel(std::string(posenc::default_backend::name()) + ", " + posenc::to_string(pairing) +
                 ", " + (mode == posenc::rope_cache_mode::cached ? "cached" : "on the fly"));
}

// ---- 16-bit storage -------------------------------------------------------------------

/// Q [L, H, D] of 16-bit values: the float Q's values in [-1, 1) rounded to T.
template <class T>
std::vector<T>& q16() {
  static std::vector<T> q;
  if (q.empty()) {
    const auto& f = buffer(0);
    q.resize(N);
    for (std::size_t i = 0; i < N; ++i) q[i] = T(f[i]);
  }
  return q;
}

/// The roofline: one read and one write of every 16-bit element of the same 32 MiB.
void rmw16_inplace(benchmark::State& state) {
  auto& q = q16<Eigen::bfloat16>();
  Eigen::Map<Eigen::Array<std::uint16_t, Eigen::Dynamic, 1>> v(
      reinterpret_cast<std::uint16_t*>(q.data()), static_cast<posenc::Index>(N));
  for (auto _ : state) {
    v += std::uint16_t(1);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(2 * N * 2));
  state.SetLabel("baseline: plain read-modify-write, 16-bit");
}

template <class T, class Backend, posenc::rope_pairing pairing>
void rope_lowp_inplace(benchmark::State& state) {
  posenc::rotary_embedding<T, Backend> rope(D, -1, 10000.0, pairing);
  rope.reserve(L);
  auto& q = q16<T>();
  const auto view = posenc::strided_view<T, 3>::contiguous(q.data(), {L, H, D});
  for (auto _ : state) {
    rope.apply(view, 0);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(2 * N * sizeof(T)));
  state.SetLabel(std::string(Backend::name()) +
                 (std::is_same_v<T, Eigen::half> ? ", fp16, " : ", bf16, ") +
                 posenc::to_string(pairing));
}

}  // namespace

BENCHMARK(copy_qk)->Unit(benchmark::kMillisecond);
BENCHMARK(rmw_qk)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, half_cached, posenc::rope_pairing::half, posenc::rope_cache_mode::cached)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, half_on_the_fly, posenc::rope_pairing::half,
                  posenc::rope_cache_mode::on_the_fly)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, interleaved_cached, posenc::rope_pairing::interleaved,
                  posenc::rope_cache_mode::cached)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, interleaved_on_the_fly, posenc::rope_pairing::interleaved,
                  posenc::rope_cache_mode::on_the_fly)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(rmw16_inplace)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(rope_lowp_inplace, Eigen::bfloat16, posenc::default_backend,
                   posenc::rope_pairing::half)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(rope_lowp_inplace, Eigen::bfloat16, posenc::default_backend,
                   posenc::rope_pairing::interleaved)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(rope_lowp_inplace, Eigen::half, posenc::default_backend,
                   posenc::rope_pairing::half)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(rope_lowp_inplace, Eigen::half, posenc::default_backend,
                   posenc::rope_pairing::interleaved)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(rope_lowp_inplace, Eigen::bfloat16, posenc::backend::scalar,
                   posenc::rope_pairing::half)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(rope_lowp_inplace, Eigen::half, posenc::backend::scalar,
                   posenc::rope_pairing::half)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
