// Cost of computing the effective RoPE frequencies (rope_config::frequencies) per scaling,
// r = 128, next to two baselines measured in the same run: the unscaled
// plain_rope_frequencies, and one decode step of the rotation it would precede (q and k of
// one token, 32 heads x 128, float32, on the fly). Dynamic NTK and LongRoPE may recompute
// their frequencies when the sequence grows; this says what that costs relative to a step.

#include <benchmark/benchmark.h>

#include <posenc/encoding/rotary.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr posenc::Index D = 128, H = 32;

posenc::rope_config config(posenc::rope_scaling_type t) {
  posenc::rope_config c;
  c.head_dim = D;
  c.scaling = t;
  c.factor = 4.0;
  c.original_max_positions = 4096;
  if (t == posenc::rope_scaling_type::longrope) {
    c.short_factor.assign(static_cast<std::size_t>(D / 2), 1.5);
    c.long_factor.assign(static_cast<std::size_t>(D / 2), 8.0);
  }
  return c;
}

void plain(benchmark::State& state) {
  for (auto _ : state) {
    auto f = posenc::plain_rope_frequencies(D, 10000.0);
    benchmark::DoNotOptimize(f.inv_freq.data());
  }
  state.SetLabel("baseline: plain_rope_frequencies(128)");
}

void frequencies(benchmark::State& state, posenc::rope_scaling_type t) {
  const posenc::rope_config c = config(t);
  for (auto _ : state) {
    auto f = c.frequencies(8192);
    benchmark::DoNotOptimize(f.inv_freq.data());
  }
  state.SetLabel(std::string("rope_config::frequencies, ") + posenc::to_string(t));
}

void decode_step(benchmark::State& state) {
  posenc::rope_options opt;
  opt.cache = posenc::rope_cache_mode::on_the_fly;
  posenc::rotary_embedding<float> rope(config(posenc::rope_scaling_type::dynamic), 8192, opt);
  std::vector<float> q(static_cast<std::size_t>(H * D)), k(q.size());
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : q) v = u(gen);
  for (auto& v : k) v = u(gen);
  const auto vq = posenc::view_shd(q.data(), 1, H, D);
  const auto vk = posenc::view_shd(k.data(), 1, H, D);
  for (auto _ : state) {
    rope.apply_qk(vq, vk, 8191);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(
      std::string("baseline: one decode step, q and k [1, 32, 128] float, on the fly, ") +
      posenc::default_backend::name());
}

}  // namespace

BENCHMARK(plain);
BENCHMARK(decode_step);
BENCHMARK_CAPTURE(frequencies, none, posenc::rope_scaling_type::none);
BENCHMARK_CAPTURE(frequencies, linear, posenc::rope_scaling_type::linear);
BENCHMARK_CAPTURE(frequencies, ntk, posenc::rope_scaling_type::ntk);
BENCHMARK_CAPTURE(frequencies, dynamic, posenc::rope_scaling_type::dynamic);
BENCHMARK_CAPTURE(frequencies, yarn, posenc::rope_scaling_type::yarn);
BENCHMARK_CAPTURE(frequencies, llama3, posenc::rope_scaling_type::llama3);
BENCHMARK_CAPTURE(frequencies, longrope, posenc::rope_scaling_type::longrope);
BENCHMARK_CAPTURE(frequencies, xpos, posenc::rope_scaling_type::xpos);

BENCHMARK_MAIN();
