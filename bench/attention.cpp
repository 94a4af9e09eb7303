// The reference attention kernel with each position scheme, next to a baseline measured in
// the same run: the two Eigen float matrix products of the same shapes (S = Q·Kᵀ [L, L],
// O = S·V [L, d]), i.e. the work any attention has to do, without softmax or positions.
//
// Arguments: L (queries = keys), d (head dim), causal (0/1). One head, float32 inputs.
// Counters: GFLOP/s counts 4·L²·d (the two products in full, causal or not), so the rates
// of the kernel and of the baseline compare directly.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <posenc/attention.hpp>

#include "bench_util.hpp"

namespace {

using posenc::Index;
using posenc_bench::fmat;
using posenc_bench::random_input;

void set_counters(benchmark::State& state, Index L, Index d) {
  const double flops =
      4.0 * static_cast<double>(L) * static_cast<double>(L) * static_cast<double>(d);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_eigen_gemm_baseline(benchmark::State& state) {
  const Index L = state.range(0), d = state.range(1);
  posenc_bench::run_eigen_gemms(state, L, d);
  set_counters(state, L, d);
  state.SetLabel("eigen float GEMMs");
}

enum class scheme { none, alibi, t5, rope, absolute };

template <scheme S>
void BM_attention(benchmark::State& state) {
  const Index L = state.range(0), d = state.range(1);
  const fmat q = random_input(L, d, 1), k = random_input(L, d, 2), v = random_input(L, d, 3);
  posenc::attention_config opt;
  opt.mask.causal = state.range(2) != 0;
  auto run = [&](const auto& policy) {
    for (auto _ : state) {
      auto out = posenc::attention(q, k, v, opt, policy);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
  };
  if constexpr (S == scheme::none) run(posenc::no_position_policy{});
  if constexpr (S == scheme::alibi) run(posenc::alibi_policy(8).only_head(3));
  if constexpr (S == scheme::t5) {
    opt.scale = 1.0;
    run(posenc::t5_bias_policy(random_input(32, 1, 4), {32, 128, !opt.mask.causal}));
  }
  if constexpr (S == scheme::rope) run(posenc::rotary_policy(d));
  if constexpr (S == scheme::absolute) run(posenc::absolute_policy(random_input(L, d, 5)));
  set_counters(state, L, d);
  state.SetLabel(posenc::default_backend::name());
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{128, 512, 2048}, {64, 128}, {0, 1}})
      ->ArgNames({"L", "d", "causal"})
      ->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_eigen_gemm_baseline)
    ->ArgsProduct({{128, 512, 2048}, {64, 128}})
    ->ArgNames({"L", "d"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_attention, scheme::none)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, scheme::alibi)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, scheme::t5)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, scheme::rope)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, scheme::absolute)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
