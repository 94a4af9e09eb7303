// Absolute encodings: sinusoidal table generation and add-to-embeddings, learned
// lookup + add, each next to a baseline moving the same bytes in the same run:
//
//   memcpy       copy an [L, d] table (what reading a precomputed table costs)
//   plain_add    E += T for a precomputed [L, d] table T (the floor for any add)
//
// Sizes: L in {512, 4096, 32768} x d in {64, 512, 4096} (learned: L in {512, 4096}),
// float and double. Throughput is
// reported as bytes/s of the [L, d] output (items/s = elements).

#include <benchmark/benchmark.h>

#include <cstring>
#include <posenc/encoding/learned.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <string>
#include <vector>

namespace {

template <class T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void sizes(benchmark::internal::Benchmark* b) {
  for (long len : {512L, 4096L, 32768L})
    for (long d : {64L, 512L, 4096L}) b->Args({len, d});
  b->Unit(benchmark::kMillisecond);
}

// The learned table keeps weights and gradient: smaller lengths keep memory modest.
void learned_sizes(benchmark::internal::Benchmark* b) {
  for (long len : {512L, 4096L})
    for (long d : {64L, 512L, 4096L}) b->Args({len, d});
  b->Unit(benchmark::kMillisecond);
}

template <class T>
void set_counters(benchmark::State& state, long len, long d) {
  state.SetBytesProcessed(state.iterations() * len * d * static_cast<long>(sizeof(T)));
  state.SetItemsProcessed(state.iterations() * len * d);
  state.SetLabel(std::string(posenc::default_backend::name()) + (sizeof(T) == 4 ? " f32" : " f64"));
}

template <class T>
void bm_memcpy(benchmark::State& state) {
  const long len = state.range(0), d = state.range(1);
  const matrix<T> src = matrix<T>::Constant(len, d, T(0.5));
  matrix<T> dst = matrix<T>::Zero(len, d);  // touched: no first-touch page faults timed
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(len * d) * sizeof(T));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters<T>(state, len, d);
}

template <class T>
void bm_plain_add(benchmark::State& state) {
  const long len = state.range(0), d = state.range(1);
  const matrix<T> table = matrix<T>::Constant(len, d, T(1e-3));
  matrix<T> e = matrix<T>::Zero(len, d);
  for (auto _ : state) {
    e += table;
    benchmark::DoNotOptimize(e.data());
    benchmark::ClobberMemory();
  }
  set_counters<T>(state, len, d);
}

template <class T>
void bm_sinusoidal_table(benchmark::State& state) {
  const long len = state.range(0), d = state.range(1);
  const posenc::sinusoidal<T> pe(d);
  matrix<T> out = matrix<T>::Zero(len, d);
  for (auto _ : state) {
    pe.table_into(out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters<T>(state, len, d);
}

template <class T>
void bm_sinusoidal_add(benchmark::State& state) {
  const long len = state.range(0), d = state.range(1);
  const posenc::sinusoidal<T> pe(d);
  matrix<T> e = matrix<T>::Zero(len, d);
  for (auto _ : state) {
    pe.add_to(e);
    benchmark::DoNotOptimize(e.data());
    benchmark::ClobberMemory();
  }
  set_counters<T>(state, len, d);
}

template <class T>
void bm_learned_add(benchmark::State& state) {
  const long len = state.range(0), d = state.range(1);
  const posenc::learned_table<T> wpe(matrix<T>::Constant(len, d, T(1e-3)));
  matrix<T> e = matrix<T>::Zero(len, d);
  for (auto _ : state) {
    wpe.add_to(e);
    benchmark::DoNotOptimize(e.data());
    benchmark::ClobberMemory();
  }
  set_counters<T>(state, len, d);
}

template <class T>
void bm_learned_lookup(benchmark::State& state) {
  const long len = state.range(0), d = state.range(1);
  const posenc::learned_table<T> wpe(matrix<T>::Constant(len, d, T(1e-3)));
  std::vector<posenc::Index> pos(static_cast<std::size_t>(len));
  for (long i = 0; i < len; ++i) pos[static_cast<std::size_t>(i)] = (i * 7919) % len;  // scattered
  for (auto _ : state) {
    const matrix<T> rows = wpe.at(pos);
    benchmark::DoNotOptimize(rows.data());
  }
  set_counters<T>(state, len, d);
}

}  // namespace

BENCHMARK_TEMPLATE(bm_memcpy, float)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_sinusoidal_table, float)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_plain_add, float)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_sinusoidal_add, float)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_learned_add, float)->Apply(learned_sizes);
BENCHMARK_TEMPLATE(bm_learned_lookup, float)->Apply(learned_sizes);
BENCHMARK_TEMPLATE(bm_memcpy, double)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_sinusoidal_table, double)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_plain_add, double)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_sinusoidal_add, double)->Apply(sizes);
BENCHMARK_TEMPLATE(bm_learned_add, double)->Apply(learned_sizes);
BENCHMARK_TEMPLATE(bm_learned_lookup, double)->Apply(learned_sizes);

BENCHMARK_MAIN();
