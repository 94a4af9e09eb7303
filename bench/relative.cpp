// Relative position schemes inside the reference attention kernel, each next to the
// no-position reference attention of the same shape in the same run:
//
//   none     posenc::attention with no_position_policy (the baseline)
//   shaw     Shaw et al. (2018) tables, symmetric clip k = 16, keys and values
//   txl      Transformer-XL, P = R (no W_R), u and v
//   txl_wr   Transformer-XL with a W_R projection (d_R = d), u and v
//
// One head, float inputs, d = dv = 64, L = Lq = Lk in {128, 512, 2048}, causal and not.
// items/s counts query-key pairs (L^2 per call).

#include <benchmark/benchmark.h>

#include <posenc/attention/attention.hpp>
#include <posenc/encoding/shaw.hpp>
#include <posenc/encoding/transformer_xl.hpp>
#include <random>
#include <string>

namespace {

using fmat = posenc::attention_matrix<float>;
constexpr posenc::Index dim = 64;

fmat random_matrix(posenc::Index rows, posenc::Index cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  fmat m(rows, cols);
  for (posenc::Index i = 0; i < rows; ++i)
    for (posenc::Index j = 0; j < cols; ++j) m(i, j) = n(gen);
  return m;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (long causal : {0L, 1L})
    for (long len : {128L, 512L, 2048L}) b->Args({len, causal});
  b->Unit(benchmark::kMillisecond);
}

template <class Policy>
void run(benchmark::State& state, const Policy& policy, const char* name) {
  const posenc::Index len = state.range(0);
  const bool causal = state.range(1) != 0;
  const fmat q = random_matrix(len, dim, 1), k = random_matrix(len, dim, 2),
             v = random_matrix(len, dim, 3);
  posenc::attention_config opt;
  opt.mask.causal = causal;
  for (auto _ : state) {
    fmat out = posenc::attention(q, k, v, opt, policy);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * len * len);
  state.SetLabel(std::string(posenc::default_backend::name()) + " f32 " + name +
                 (causal ? " causal" : ""));
}

void bm_none(benchmark::State& state) { run(state, posenc::no_position_policy{}, "none"); }

void bm_shaw(benchmark::State& state) {
  posenc::shaw_policy<float> shaw(posenc::shaw_clip::symmetric(16), dim, dim);
  shaw.key_tables() = 0.1f * random_matrix(shaw.rows(), dim, 4);
  shaw.value_tables() = 0.1f * random_matrix(shaw.rows(), dim, 5);
  run(state, shaw, "shaw k=16");
}

void bm_txl(benchmark::State& state) {
  posenc::transformer_xl_policy<float> xl(1, dim);
  xl.u() = 0.1f * random_matrix(1, dim, 6);
  xl.v() = 0.1f * random_matrix(1, dim, 7);
  run(state, xl, "txl");
}

void bm_txl_wr(benchmark::State& state) {
  posenc::transformer_xl_policy<float> xl(1, dim, dim);
  xl.u() = 0.1f * random_matrix(1, dim, 6);
  xl.v() = 0.1f * random_matrix(1, dim, 7);
  xl.w_r() = 0.1f * random_matrix(dim, dim, 8);
  run(state, xl, "txl W_R");
}

}  // namespace

BENCHMARK(bm_none)->Apply(sizes);
BENCHMARK(bm_shaw)->Apply(sizes);
BENCHMARK(bm_txl)->Apply(sizes);
BENCHMARK(bm_txl_wr)->Apply(sizes);

BENCHMARK_MAIN();
