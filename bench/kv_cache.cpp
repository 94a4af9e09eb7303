// One decode step of a Llama-3.1-8B attention layer through posenc::kv_cache (32 query
// heads, 8 key/value heads, head dim 128, float32), over `keys` cached tokens, measured as
// kv_cache::step (append one token, attend its query) followed by truncate (so every
// iteration sees the same cache):
//
//   kv_step_reference/keys     kernel = kv_cache_kernel::reference: the exact kernel, what
//                              kv_cache::step ran before issue 26 (the baseline)
//   kv_step_flash/keys         the default kernel: split-key (Flash-Decoding) decode
//   kv_step_flash_rope/keys    the same with the cache's own RoPE (Llama 3.1 scaling): the
//                              new key is rotated once, then stored; the query is rotated
//   kv_step_flash_policy/keys  RoPE as a rotary_policy instead: every step re-rotates all
//                              cached keys (why the cache stores them rotated)
//
// Bytes/s counts the K and V bytes a step reads. One thread (flash_options::threads = 1),
// the benchmark thread's CPU time. Keep runs short:
//
//   bench_kv_cache --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/rotary_policy.hpp>

#include "bench_util.hpp"

namespace {

using posenc::Index;
using posenc_bench::fmat;
using posenc_bench::random_input;

constexpr Index kHeads = 32, kKvHeads = 8, kDim = 128;

posenc::rope_config llama31() {
  posenc::rope_config c;
  c.head_dim = kDim;
  c.base = 500000.0;
  c.scaling = posenc::rope_scaling_type::llama3;
  c.factor = 8.0;
  c.original_max_positions = 8192;
  return c;
}

enum class variant { reference, flash, flash_rope, flash_policy };

template <variant V>
void kv_step(benchmark::State& state) {
  const Index keys = state.range(0);
  posenc::kv_cache_options o;
  o.kernel =
      V == variant::reference ? posenc::kv_cache_kernel::reference : posenc::kv_cache_kernel::flash;
  posenc::kv_cache<float> cache(kKvHeads, kDim, kDim, keys + 1, o);
  if (V == variant::flash_rope) cache.set_rotary(llama31(), keys + 1);
  const fmat k = random_input(keys, kKvHeads * kDim, 1), v = random_input(keys, kKvHeads * kDim, 2);
  cache.append(k, v);
  const fmat q = random_input(1, kHeads * kDim, 3), k1 = random_input(1, kKvHeads * kDim, 4),
             v1 = random_input(1, kKvHeads * kDim, 5);
  const posenc::rotary_policy policy(posenc::rotary_embedding<double>(llama31(), keys + 1));
  for (auto _ : state) {
    if constexpr (V == variant::flash_policy) {
      auto out = cache.step(q, k1, v1, kHeads, {}, policy);
      benchmark::DoNotOptimize(out.data());
    } else {
      auto out = cache.step(q, k1, v1, kHeads);
      benchmark::DoNotOptimize(out.data());
    }
    cache.truncate(keys);
  }
  state.SetBytesProcessed(state.iterations() * 2 * (keys + 1) * kKvHeads * kDim *
                          Index(sizeof(float)));
}

}  // namespace

BENCHMARK_TEMPLATE(kv_step, variant::reference)
    ->Arg(4096)
    ->Arg(32768)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(kv_step, variant::flash)->Arg(4096)->Arg(32768)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(kv_step, variant::flash_rope)
    ->Arg(4096)
    ->Arg(32768)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(kv_step, variant::flash_policy)
    ->Arg(4096)
    ->Arg(32768)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
