// RoPE apply to Q and K (L = 4096, H = 32, D = 128, float32, one thread), in place:
// cached vs on-the-fly cos/sin, half vs interleaved pairing, next to a plain copy of the same
// buffers in the same run (the memory roofline). Bytes/s count every byte read and written:
// 2 x (|Q| + |K|) for both the rotation and the copy.

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include <posenc/encoding/rotary.hpp>

namespace {

constexpr posenc::Index L = 4096, H = 32, D = 128;
constexpr std::size_t N = static_cast<std::size_t>(L * H * D);

std::vector<float>& buffer(int which) {
  static std::vector<float> bufs[4];
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
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(4 * N * sizeof(float)));
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

void rope_qk(benchmark::State& state, posenc::rope_pairing pairing, posenc::rope_cache_mode mode) {
  posenc::rope_options opt;
  opt.cache = mode;
  opt.max_len = L;
  posenc::rotary_embedding<float> rope(D, -1, 10000.0, pairing, opt);
  auto &q = buffer(0), &k = buffer(1);
  const auto vq = posenc::view_shd(q.data(), L, H, D);
  const auto vk = posenc::view_shd(k.data(), L, H, D);
  for (auto _ : state) {
    rope.apply_qk(vq, vk, 0);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state);
  state.SetLabel(std::string(posenc::default_backend::name()) + ", " + posenc::to_string(pairing) + ", " +
                 (mode == posenc::rope_cache_mode::cached ? "cached" : "on the fly"));
}

}  // namespace

BENCHMARK(copy_qk)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, half_cached, posenc::rope_pairing::half, posenc::rope_cache_mode::cached)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, half_on_the_fly, posenc::rope_pairing::half, posenc::rope_cache_mode::on_the_fly)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, interleaved_cached, posenc::rope_pairing::interleaved, posenc::rope_cache_mode::cached)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rope_qk, interleaved_on_the_fly, posenc::rope_pairing::interleaved,
                  posenc::rope_cache_mode::on_the_fly)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
