// The tiled (flash-style) attention kernel next to its baselines, measured in the same run:
//
//   eigen_gemm/N/d            the two Eigen float products of one head, S = Q·Kᵀ [N, N] and
//                             O = S·V [N, d]: the work any attention does, without softmax
//   flash/N/d/causal/threads  posenc::flash_multi_head_attention, 8 heads, float32
//   flash_storage<S>/...      the same with inputs and output stored as S (Eigen::half,
//                             Eigen::bfloat16), float32 maths
//   flash_alibi, flash_t5     the same with ALiBi (causal) or a T5 bias (bidirectional)
//   read_kv<S>/keys/d         a plain read of the K and V bytes of a decode step (8 heads),
//                             stored as S (float, Eigen::half, Eigen::bfloat16)
//   decode<S>/keys/d/threads  one query over a `keys`-long cache of S, 8 heads
//
// GFLOP/s counts the useful work of the two products, 4·d per visible (query, key) pair:
// 4·N²·d per head without a mask, 4·d·N(N+1)/2 with the causal mask. `per_thread` is
// GFLOP/s divided by the thread count. Decode and read_kv report bytes of K and V per
// second. Single-thread figures use the benchmark thread's CPU time (robust on a shared,
// oversubscribed machine); thread comparisons use wall-clock time. Keep runs short:
//
//   bench_flash --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <posenc/attention/flash.hpp>
#include <posenc/encoding/alibi.hpp>
#include <posenc/encoding/t5_bias.hpp>
#include <string>
#include <type_traits>

#include "bench_util.hpp"

namespace {

using posenc::Index;
using posenc_bench::fmat;
using posenc_bench::random_input;

constexpr Index kHeads = 8;

double useful_flops(Index n, Index d, bool causal, Index heads) {
  const double pairs = causal ? 0.5 * double(n) * double(n + 1) : double(n) * double(n);
  return 4.0 * pairs * double(d) * double(heads);
}

void set_flops(benchmark::State& state, double flops, Index threads) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["per_thread"] = benchmark::Counter(flops * 1e-9 / double(threads),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

void eigen_gemm(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  posenc_bench::run_eigen_gemms(state, n, d);
  set_flops(state, useful_flops(n, d, false, 1), 1);
  state.SetLabel("baseline: Eigen float GEMMs, one head");
}

template <class S>
void flash_storage(benchmark::State& state) {
  using smat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Index n = state.range(0), d = state.range(1), threads = state.range(3);
  const bool causal = state.range(2) != 0;
  const smat q = random_input(n, kHeads * d, 1).cast<S>(),
             k = random_input(n, kHeads * d, 2).cast<S>(),
             v = random_input(n, kHeads * d, 3).cast<S>();
  smat out(n, kHeads * d);
  posenc::attention_config opt;
  opt.mask.causal = causal;
  const auto qv = posenc::view_shd(q.data(), n, kHeads, d),
             kv = posenc::view_shd(k.data(), n, kHeads, d),
             vv = posenc::view_shd(v.data(), n, kHeads, d);
  const auto ov = posenc::view_shd(out.data(), n, kHeads, d);
  for (auto _ : state) {
    posenc::flash_multi_head_attention(qv, kv, vv, ov, opt, posenc::no_position_policy{},
                                       posenc::flash_options{threads});
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, useful_flops(n, d, causal, kHeads), threads);
  state.SetLabel(std::string(posenc::default_backend::name()) + (causal ? ", causal" : ""));
}

void flash(benchmark::State& state) { flash_storage<float>(state); }

void flash_alibi(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  const fmat q = random_input(n, kHeads * d, 1), k = random_input(n, kHeads * d, 2),
             v = random_input(n, kHeads * d, 3);
  fmat out(n, kHeads * d);
  posenc::attention_config opt;
  opt.mask.causal = true;
  const posenc::alibi_policy alibi(kHeads);
  const auto qv = posenc::view_shd(q.data(), n, kHeads, d),
             kv = posenc::view_shd(k.data(), n, kHeads, d),
             vv = posenc::view_shd(v.data(), n, kHeads, d);
  const auto ov = posenc::view_shd(out.data(), n, kHeads, d);
  for (auto _ : state) {
    posenc::flash_multi_head_attention(qv, kv, vv, ov, opt, alibi);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, useful_flops(n, d, true, kHeads), 1);
  state.SetLabel("ALiBi in the tiles, causal");
}

void flash_t5(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  const fmat q = random_input(n, kHeads * d, 1), k = random_input(n, kHeads * d, 2),
             v = random_input(n, kHeads * d, 3);
  fmat out(n, kHeads * d);
  posenc::attention_config opt;  // bidirectional, as in a T5 encoder
  const posenc::t5_bias_policy t5(random_input(32, kHeads, 4).cast<double>(), {32, 128, true});
  const auto qv = posenc::view_shd(q.data(), n, kHeads, d),
             kv = posenc::view_shd(k.data(), n, kHeads, d),
             vv = posenc::view_shd(v.data(), n, kHeads, d);
  const auto ov = posenc::view_shd(out.data(), n, kHeads, d);
  for (auto _ : state) {
    posenc::flash_multi_head_attention(qv, kv, vv, ov, opt, t5);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, useful_flops(n, d, false, kHeads), 1);
  state.SetLabel("T5 bias in the tiles, bidirectional");
}

// K and V of a decode step in storage type S: [keys, 8 heads, d] each.
template <class S>
struct kv_cache {
  using smat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  smat k, v;
  kv_cache(Index keys, Index d)
      : k(random_input(keys, kHeads * d, 2).cast<S>()),
        v(random_input(keys, kHeads * d, 3).cast<S>()) {}
  Index bytes() const { return (k.size() + v.size()) * Index(sizeof(S)); }
};

// The largest 32-bit word of a buffer: a plain, vectorised read at any storage type (Eigen
// has int32 packets, and a maximum cannot overflow).
std::int32_t max_word(const void* p, Index bytes) {
  using words = Eigen::Array<std::int32_t, Eigen::Dynamic, 1>;
  return Eigen::Map<const words>(static_cast<const std::int32_t*>(p), bytes / 4).maxCoeff();
}

template <class S>
void read_kv(benchmark::State& state) {
  const Index keys = state.range(0), d = state.range(1);
  const kv_cache<S> c(keys, d);
  for (auto _ : state) {
    if constexpr (std::is_same_v<S, float>) {
      float sk = c.k.sum(), sv = c.v.sum();
      benchmark::DoNotOptimize(sk);
      benchmark::DoNotOptimize(sv);
    } else {
      std::int32_t sk = max_word(c.k.data(), c.bytes() / 2),
                   sv = max_word(c.v.data(), c.bytes() / 2);
      benchmark::DoNotOptimize(sk);
      benchmark::DoNotOptimize(sv);
    }
  }
  state.SetBytesProcessed(state.iterations() * c.bytes());
  state.SetLabel("baseline: plain read of K and V");
}

template <class S>
void decode(benchmark::State& state) {
  const Index keys = state.range(0), d = state.range(1), threads = state.range(2);
  const kv_cache<S> c(keys, d);
  const typename kv_cache<S>::smat q = random_input(1, kHeads * d, 1).cast<S>();
  typename kv_cache<S>::smat out(1, kHeads * d);
  posenc::attention_config opt;
  opt.mask.causal = true;
  opt.q_offset = keys - 1;
  const auto qv = posenc::view_shd(q.data(), 1, kHeads, d),
             kv = posenc::view_shd(c.k.data(), keys, kHeads, d),
             vv = posenc::view_shd(c.v.data(), keys, kHeads, d);
  const auto ov = posenc::view_shd(out.data(), 1, kHeads, d);
  for (auto _ : state) {
    posenc::flash_multi_head_attention(qv, kv, vv, ov, opt, posenc::no_position_policy{},
                                       posenc::flash_options{threads});
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * c.bytes());
  state.SetLabel("split-key decode, " + std::to_string(threads) + " thread(s)");
}

void main_grid(benchmark::internal::Benchmark* b) {
  for (long n : {512L, 2048L, 8192L})
    for (long d : {64L, 128L})
      for (long causal : {0L, 1L}) b->Args({n, d, causal, 1});
  // Head dims off the vector width, against d = 64 above.
  for (long d : {72L, 80L, 96L}) b->Args({2048, d, 0, 1});
  b->Unit(benchmark::kMillisecond);
}

// One thread against two: wall-clock time (the speed-up) and the CPU time of the whole
// process (the work: equal CPU time means no parallel overhead).
void thread_grid(benchmark::internal::Benchmark* b) {
  for (long t : {1L, 2L}) {
    b->Args({2048, 64, 0, t});
    b->Args({2048, 128, 1, t});
  }
  b->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(eigen_gemm)
    ->ArgsProduct({{512, 2048, 8192}, {64, 128}})
    ->Args({2048, 72})
    ->Args({2048, 80})
    ->Args({2048, 96})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(flash)->Apply(main_grid);
BENCHMARK(flash)->Apply(thread_grid)->UseRealTime();
BENCHMARK(flash)->Apply(thread_grid)->MeasureProcessCPUTime();
// 16-bit inputs (float32 maths; K and V widened once per head), against flash/2048/64/1/1.
BENCHMARK_TEMPLATE(flash_storage, Eigen::half)
    ->Args({2048, 64, 1, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(flash_storage, Eigen::bfloat16)
    ->Args({2048, 64, 1, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(flash_alibi)->Args({2048, 64})->Unit(benchmark::kMillisecond);
BENCHMARK(flash_t5)->Args({2048, 64})->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(read_kv, float)->Args({16384, 128})->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(decode, float)->Args({16384, 128, 1})->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(decode, float)
    ->Args({16384, 128, 1})
    ->Args({16384, 128, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// A 16-bit KV cache (float32 maths): against a plain read of its own bytes.
BENCHMARK_TEMPLATE(read_kv, Eigen::half)->Args({16384, 128})->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(decode, Eigen::half)->Args({16384, 128, 1})->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(read_kv, Eigen::bfloat16)->Args({16384, 128})->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(decode, Eigen::bfloat16)->Args({16384, 128, 1})->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
