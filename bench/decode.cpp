// Decode (a few query tokens against a long KV cache) next to the memory roofline of the
// same bytes, measured in the same process:
//
//   roofline<S>/keys/kv_heads/d/threads
//       the fastest read of the K and V bytes of a decode step this CPU gives: each thread
//       streams its share of the keys, K and V side by side, each cut into `parts` pieces
//       read side by side too (2, 4 or 8 streams, two cache lines of each per step, eight
//       independent 32-byte accumulators), with a software prefetch `prefetch_bytes` ahead
//       on every stream, the threads taking contiguous shares (`block_bytes` 0) or blocks
//       dealt round robin (the best plan of a sweep run once per process: best_plan
//       below); GB/s of K + V.
//   decode<S>/keys/heads/kv_heads/d/queries/threads
//       posenc::flash_multi_head_attention, causal, the queries the last `queries`
//       positions of the cache; GB/s of the unique K + V bytes, and `vs_roofline`: that
//       rate over the roofline of the same bytes and thread count (measured when the row
//       starts, best of five passes); beside it `fma_ceiling_GB/s`, the rate at which the
//       row's fused multiply-adds alone would run at this CPU's measured FMA peak (every
//       query row's dot with every key and its value update: 2 · queries · heads · keys · d
//       float FMAs per call, whatever the storage type), and `vs_ceiling`: the rate over the
//       lower of the two ceilings (the roofline, or the FMAs where they take longer than
//       the read: several queries, or a GQA group of 16-bit rows).
//
// S: float, Eigen::half, Eigen::bfloat16 (float32 maths). Layout [1, keys, heads, d] for
// q, k, v and out (view_bshd, a KV cache as inference engines keep it). Wall-clock time,
// call by call.
// The default rows are those of issue 27's table and the GQA shape; POSENC_DECODE_BENCH=full
// adds every combination of d 64 / 128, 4k / 16k / 64k keys, 1 / 4 / 8 queries and the three
// storage types, and POSENC_DECODE_BENCH=cache rows over 256 and 1024 keys (short caches:
// decode where a GQA group or several queries share the rows, prefill for one query of
// MHA) and 1280 and 2048 keys (just past decode_chunk) (K and V in the caches: the cost of
// the arithmetic alone, per byte).
// POSENC_DECODE_BENCH=order runs read_order instead (below: the roofline's bytes in a
// decode kernel's read order and instruction mix, no attention).
// POSENC_DECODE_PAGES=huge puts K and V (and the roofline's plan sweep) in memory advised
// as transparent huge pages, as posenc::kv_cache keeps them (counter `huge_pages`), and
// POSENC_DECODE_LAYOUT=head stores K and V head by head ([1, kv_heads, keys, d], counter
// `head_major`; compare_ggml's default layout) instead of token by token.
// POSENC_DECODE_POOL=1 runs the decode rows on a posenc::thread_pool started once per row
// (flash_options::pool, counter `pool`) instead of threads started by each call.
// POSENC_DECODE_KEY_RUNS=0 or 1 sets the CPU tuning's decode_key_runs (core/cpu.hpp: a GQA
// group's dots in four runs of keys on AVX-512, on by default on Intel and, for rows of 128
// values or more, Zen 5; 1 takes them for every d; counter `key_runs`: whether the row's d
// takes them), to compare the two orders on one CPU.
// POSENC_DECODE_STREAM_PREFETCH=bytes sets its decode_stream_prefetch (one query's MHA over
// head-major K/V asks for each row's stream that far ahead; 2048 on Zen 5 and Intel, else 0;
// counter `stream_prefetch`).
// POSENC_DECODE_KEY_RUN_PREFETCH=bytes sets its decode_key_run_prefetch (the GQA key runs ask
// for their key rows that far ahead in each run beside the value rows; 2048 on Zen 5, else 0;
// counter `key_run_prefetch`).
// POSENC_DECODE_VALUE_PASS_KEYS=0 or 1 sets its decode_value_pass_key_prefetch (the GQA key
// runs' value passes ask for the next tile's key rows into L2; on by default on Zen 4; counter
// `value_pass_keys`).
// POSENC_DECODE_ONE_QUERY_HEADS=n sets its decode_one_query_heads (one query's MHA over
// head-major K/V reads n heads at a time, key by key across them; 1 on Zen 4 and Zen 5,
// else 2; counter `one_query_heads`).
// POSENC_DECODE_GROUP_ROWS=0 or 1 sets its decode_group_rows (one query's GQA group of 2-4
// heads over head-major rows of 64 or 128 values reads each row whole, one at a time; on by
// default on Zen 4; counter `group_rows`).
//
//   bench_decode --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <posenc/attention/flash.hpp>
#include <posenc/core/allocator.hpp>
#include <posenc/core/cpu.hpp>
#include <posenc/core/thread_pool.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench_util.hpp"

namespace {

using posenc::Index;

template <class S>
using smat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class S>
const char* type_name() {
  if constexpr (std::is_same_v<S, float>) return "f32";
  if constexpr (std::is_same_v<S, Eigen::half>) return "f16";
  return "bf16";
}

// Whether environment variable `var` is set to `value`.
bool env_is(const char* var, const char* value) {
  const char* e = std::getenv(var);
  return e && std::string(e) == value;
}
bool mode(const char* name) { return env_is("POSENC_DECODE_BENCH", name); }

// POSENC_DECODE_PAGES=huge: K and V (and the roofline's plan sweep) in memory advised as
// huge pages, as posenc::kv_cache keeps its rows (posenc::huge_page_allocator); else
// plain 4 KiB pages, as a caller's own buffers usually are.
bool huge_pages() { return env_is("POSENC_DECODE_PAGES", "huge"); }

// POSENC_DECODE_LAYOUT=head: K and V stored head by head (each head's keys contiguous, the
// layout of compare_ggml's default rows) instead of token by token.
bool head_major() { return env_is("POSENC_DECODE_LAYOUT", "head"); }

// POSENC_DECODE_POOL=1: decode calls on a thread_pool instead of threads started per call.
bool use_pool() { return env_is("POSENC_DECODE_POOL", "1"); }

// n values of S on the pages huge_pages() picks.
template <class S>
struct page_buffer {
  std::vector<S> small;
  std::vector<S, posenc::huge_page_allocator<S>> huge;
  S* data;
  explicit page_buffer(Index n) {
    if (huge_pages()) {
      huge.resize(static_cast<std::size_t>(n));
      data = huge.data();
    } else {
      small.resize(static_cast<std::size_t>(n));
      data = small.data();
    }
  }
};

// 32 bytes as one value: GCC's and clang's vector extension (full-width loads on any
// target; plain words where the CPU has no vectors that wide).
typedef std::int32_t words8 __attribute__((vector_size(32)));

// Reads [p, p + bytes) and [q, q + bytes) (multiples of 128 bytes), each as Parts pieces
// side by side (2 * Parts streams; the steps past Parts equal pieces as one more pair), two
// cache lines of each stream per step, prefetching `ahead` bytes in front of every stream;
// returns a word of the sums. More streams than K's and V's two: Zen 3 read four 1.1-1.3x
// faster than two (docs/benchmarks.md), and decode reads two heads' rows side by side.
template <int Parts>
std::int32_t stream_parts(const char* p, const char* q, Index bytes, Index ahead) {
  words8 a[8] = {};
  const auto step = [&](Index i) {
    if (ahead > 0) {
      __builtin_prefetch(p + i + ahead);
      __builtin_prefetch(p + i + ahead + 64);
      __builtin_prefetch(q + i + ahead);
      __builtin_prefetch(q + i + ahead + 64);
    }
    for (int k = 0; k < 4; ++k) {
      words8 x, y;
      std::memcpy(&x, p + i + 32 * k, 32);
      std::memcpy(&y, q + i + 32 * k, 32);
      a[k] += x;
      a[4 + k] += y;
    }
  };
  const Index per = 128 * (bytes / 128 / Parts);  // bytes per piece
  for (Index i = 0; i < per; i += 128)
    for (int part = 0; part < Parts; ++part) step(part * per + i);
  for (Index i = Parts * per; i < bytes; i += 128) step(i);
  words8 s = a[0];
  for (int k = 1; k < 8; ++k) s += a[k];
  return s[0] ^ s[7];
}

std::int32_t stream_kv(const char* p, const char* q, Index bytes, Index ahead, int parts) {
  if (parts == 4) return stream_parts<4>(p, q, bytes, ahead);
  if (parts == 2) return stream_parts<2>(p, q, bytes, ahead);
  return stream_parts<1>(p, q, bytes, ahead);
}

// How the roofline reads: the prefetch distance, how the threads share the bytes (block 0:
// each thread its contiguous share; else blocks of `block` bytes dealt round robin, so the
// threads stream neighbouring memory at the same time), and in how many pieces read side by
// side each of K and V is cut (a thread's share, or a block).
struct read_plan {
  Index ahead = 0, block = 0;
  int parts = 1;
};

// One pass over K and V bytes on `threads` threads as `plan` says (whole 128-byte steps;
// the remainder goes to the last thread). Seconds.
double roofline_pass(const char* k, const char* v, Index bytes, Index threads, read_plan plan) {
  const Index steps = bytes / 128, per = steps / threads;
  std::vector<std::int32_t> sink(static_cast<std::size_t>(threads));
  auto work = [&](Index t) {
    std::int32_t& out = sink[static_cast<std::size_t>(t)];
    if (plan.block == 0 || threads == 1) {
      const Index s0 = t * per, s1 = t + 1 == threads ? steps : s0 + per;
      out = stream_kv(k + 128 * s0, v + 128 * s0, 128 * (s1 - s0), plan.ahead, plan.parts);
      return;
    }
    for (Index b0 = t * plan.block; b0 < 128 * steps; b0 += threads * plan.block)
      out ^=
          stream_kv(k + b0, v + b0, std::min(plan.block, 128 * steps - b0), plan.ahead, plan.parts);
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (Index t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& t : pool) t.join();
  const auto t1 = std::chrono::steady_clock::now();
  benchmark::DoNotOptimize(sink.data());
  return std::chrono::duration<double>(t1 - t0).count();
}

// The fastest plan (a pass over 64 MiB of K and V at the given thread count): prefetch
// distances, K and V each read as 1, 2 or 4 pieces side by side, and with several threads
// contiguous shares or 64 KiB / 1 MiB blocks dealt round robin; found once per process.
read_plan best_plan(Index threads) {
  static std::map<Index, read_plan> best;
  auto it = best.find(threads);
  if (it != best.end()) return it->second;
  const Index bytes = Index(32) << 20;
  page_buffer<char> k(bytes), v(bytes);
  std::fill(k.data, k.data + bytes, char(1));
  std::fill(v.data, v.data + bytes, char(2));
  read_plan pick;
  double fastest = 1e30;
  for (Index block : {Index(0), Index(64) << 10, Index(1) << 20}) {
    if (block > 0 && threads == 1) continue;
    for (int parts : {1, 2, 4})
      for (Index ahead :
           {Index(0), Index(256), Index(512), Index(1024), Index(2048), Index(4096)}) {
        const read_plan plan{ahead, block, parts};
        double t = 1e30;
        for (int r = 0; r < 3; ++r)
          t = std::min(t, roofline_pass(k.data, v.data, bytes, threads, plan));
        if (t < fastest) fastest = t, pick = plan;
      }
  }
  return best[threads] = pick;
}

// The roofline of `bytes` of K and of V at `threads`: GB/s of both, best of five passes.
double roofline_gbps(const char* k, const char* v, Index bytes, Index threads) {
  const read_plan plan = best_plan(threads);
  double t = 1e30;
  for (int r = 0; r < 5; ++r) t = std::min(t, roofline_pass(k, v, bytes, threads, plan));
  return 2.0 * static_cast<double>(bytes) / t * 1e-9;
}

// The most float fused multiply-adds per second (lanes, all threads together) `threads`
// threads do at once, each running posenc_bench::fma_loop on this build's default backend
// (as bench_roofline's fma_peak) and timing its own loop, so that starting the threads is
// not counted; the sum of their rates, best of five passes, measured once per thread count.
double fma_peak(Index threads) {
  static std::map<Index, double> peak;
  auto it = peak.find(threads);
  if (it != peak.end()) return it->second;
  constexpr Index steps = Index(1) << 18;
  std::vector<float> sink(static_cast<std::size_t>(threads));
  std::vector<int> lanes(static_cast<std::size_t>(threads));
  std::vector<double> seconds(static_cast<std::size_t>(threads));
  auto work = [&](Index t) {
    const auto i = static_cast<std::size_t>(t);
    const auto t0 = std::chrono::steady_clock::now();
    sink[i] = posenc_bench::fma_loop<posenc::default_backend>(steps, lanes[i]);
    seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    std::vector<std::thread> pool;
    for (Index i = 1; i < threads; ++i) pool.emplace_back(work, i);
    work(0);
    for (auto& th : pool) th.join();
    double rate = 0;
    for (std::size_t i = 0; i < seconds.size(); ++i)
      rate += static_cast<double>(steps * posenc_bench::fma_chains * lanes[i]) / seconds[i];
    best = std::max(best, rate);
  }
  benchmark::DoNotOptimize(sink.data());
  return peak[threads] = best;
}

template <class S>
struct cache {
  page_buffer<S> k, v;
  Index rows, cols;
  cache(Index keys, Index kv_heads, Index d)
      : k(keys * kv_heads * d), v(keys * kv_heads * d), rows(keys), cols(kv_heads * d) {
    Eigen::Map<smat<S>>(k.data, rows, cols) = posenc_bench::random_input(rows, cols, 2).cast<S>();
    Eigen::Map<smat<S>>(v.data, rows, cols) = posenc_bench::random_input(rows, cols, 3).cast<S>();
  }
  Index bytes() const { return rows * cols * Index(sizeof(S)); }  // of K (V: the same)
};

template <class S>
void roofline(benchmark::State& state) {
  const Index keys = state.range(0), kv_heads = state.range(1), d = state.range(2),
              threads = state.range(3);
  const cache<S> c(keys, kv_heads, d);
  const read_plan plan = best_plan(threads);
  const auto* k = reinterpret_cast<const char*>(c.k.data);
  const auto* v = reinterpret_cast<const char*>(c.v.data);
  // one untimed pass first, as the decode rows' roofline_gbps reads K and V before they
  // time: the first pass over freshly written memory ran 25x slower on Zen 5's virtual
  // machine (64k keys: 396 ms, then 15 ms), and a row of 512 MiB runs that pass alone
  roofline_pass(k, v, c.bytes(), threads, plan);
  for (auto _ : state) {
    const double t = roofline_pass(k, v, c.bytes(), threads, plan);
    state.SetIterationTime(t);
  }
  state.SetBytesProcessed(state.iterations() * 2 * c.bytes());
  state.counters["prefetch_bytes"] = static_cast<double>(plan.ahead);
  state.counters["block_bytes"] = static_cast<double>(plan.block);
  state.counters["streams"] = 2.0 * plan.parts;
  state.counters["huge_pages"] = huge_pages() ? 1 : 0;
  state.SetLabel(std::string("roofline: read of K and V, ") + type_name<S>());
}

// Times `call` call by call (wall clock, manual time) and reports `bytes` per call as GB/s,
// beside `roof` (the roofline of the same bytes, GB/s) and their ratio `vs_roofline`.
template <class Call>
void time_against_roofline(benchmark::State& state, double bytes, double roof, Call call) {
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(t);
    seconds += t;
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(static_cast<double>(state.iterations()) * bytes));
  state.counters["roofline_GB/s"] = roof;
  state.counters["huge_pages"] = huge_pages() ? 1 : 0;
  if (seconds > 0)
    state.counters["vs_roofline"] =
        static_cast<double>(state.iterations()) * bytes * 1e-9 / seconds / roof;
}

// K then V of each 256-key tile of a [keys, 8 heads, 128] float cache, in the order a
// decode kernel reads them: `Rows` key rows of one head at a time (1: key by key across
// the heads, which is address order; 16: 512 bytes of each of 16 rows 4 KiB apart, head
// by head, the order of a GQA group's block kernels), with `Fmas` fused multiply-adds per
// packet loaded (a GQA group of 4 query heads does 4 per packet of K and of V), their
// other operand a register or (`QueryLoads`) a load of the head's query rows (4 rows of
// each of the 8 heads, 16 KiB, which stay in L1), as a kernel loads them. P is the decode
// kernels' own packet (one register); eight sums, eight independent FMA chains, unrolled
// into registers (held as an array of a type wider than the registers, as this loop once
// did, GCC moved them through the stack and timed that instead of the reads).
template <class P, int Rows, int Fmas, bool QueryLoads>
float read_in_order(const float* k, const float* v, Index keys, const float* q) {
  constexpr Index heads = 8, d = 128, row = heads * d, tile = 256;
  constexpr int packets = d / P::size;  // per row of one head
  P acc[8];
  for (P& a : acc) a = P::zero();
  P w = P::broadcast(0.999f);
  for (Index j0 = 0; j0 < keys; j0 += tile) {
    const Index n = std::min(tile, keys - j0);
    for (const float* base : {k + j0 * row, v + j0 * row})
      for (Index c0 = 0; c0 < n; c0 += Rows) {
        const Index c1 = std::min<Index>(c0 + Rows, n);
        for (Index h = 0; h < heads; ++h)
          for (Index c = c0; c < c1; ++c)
#pragma GCC unroll 32
            for (int j = 0; j < packets; ++j) {
              const P x = P::load(base + c * row + h * d + P::size * j);
              for (int f = 0; f < Fmas; ++f) {
                if constexpr (QueryLoads)  // head h's query rows: [8 heads][4 rows][128]
                  w = P::load(q + (h * 4 + f) * d + P::size * j);
                acc[j % 8] = fmadd(x, w, acc[j % 8]);
              }
            }
      }
  }
  P s = acc[0];
  for (int j = 1; j < 8; ++j) s = s + acc[j];
  return reduce_add(s);
}

// POSENC_DECODE_BENCH=order: read_order/keys/rows/fmas/query_loads, one thread: whether
// this core overlaps a decode's arithmetic with its reads, and how the order of the reads
// (address order, or a head's rows a block at a time) and loads of the query rows beside
// them change the rate; GB/s of K + V, and `vs_roofline` over the roofline of the same
// bytes.
template <class P>
void read_order_packets(benchmark::State& state) {
  const Index keys = state.range(0), rows = state.range(1), fmas = state.range(2);
  const bool query_loads = state.range(3) != 0;
  const cache<float> c(keys, 8, 128);
  const std::vector<float> q(8 * 4 * 128, 0.5f);  // 4 query rows of 8 heads: 16 KiB, in L1
  const double roof = roofline_gbps(reinterpret_cast<const char*>(c.k.data),
                                    reinterpret_cast<const char*>(c.v.data), c.bytes(), 1);
  // the registered combinations (main): read_in_order's loops are compile-time constants
  using pass_fn = float (*)(const float*, const float*, Index, const float*);
  pass_fn pass = read_in_order<P, 16, 4, true>;  // GQA's block kernels
  if (rows == 1 && query_loads)
    pass = fmas == 1 ? read_in_order<P, 1, 1, true> : read_in_order<P, 1, 4, true>;
  if (rows == 1 && !query_loads)
    pass = fmas == 1 ? read_in_order<P, 1, 1, false> : read_in_order<P, 1, 4, false>;
  if (rows == 16 && !query_loads)
    pass = fmas == 1 ? read_in_order<P, 16, 1, false> : read_in_order<P, 16, 4, false>;
  time_against_roofline(state, 2.0 * static_cast<double>(c.bytes()), roof, [&] {
    benchmark::DoNotOptimize(pass(c.k.data, c.v.data, keys, q.data()));
  });
  state.SetLabel(std::string(rows == 1 ? "address order" : "16 rows of a head at a time") +
                 (query_loads ? ", query loads" : ""));
}

void read_order(benchmark::State& state) {
  using tag = posenc::default_backend;
  if constexpr (!posenc::simd::has_packet_arch_v<tag>) {
    state.SkipWithError("read_order times packet loops: build with SIMD flags (-march=native)");
    return;
  } else {
    read_order_packets<posenc::simd::packet<float, posenc::simd::packet_arch_t<tag>>>(state);
  }
}

template <class S>
void decode(benchmark::State& state) {
  const Index keys = state.range(0), heads = state.range(1), kv_heads = state.range(2),
              d = state.range(3), queries = state.range(4), threads = state.range(5);
  const cache<S> c(keys, kv_heads, d);
  const smat<S> q = posenc_bench::random_input(queries, heads * d, 1).cast<S>();
  smat<S> out(queries, heads * d);
  posenc::attention_config config;
  config.mask.causal = true;
  config.q_offset = keys - queries;
  const auto qv = posenc::view_bshd(q.data(), 1, queries, heads, d);
  // token-major [1, keys, kv_heads, d] (a KV cache as inference engines keep it), or with
  // POSENC_DECODE_LAYOUT=head each head's keys contiguous ([1, kv_heads, keys, d])
  const auto stored = [&](const S* data) {
    return head_major() ? posenc::view_bhsd(data, 1, kv_heads, keys, d)
                        : posenc::view_bshd(data, 1, keys, kv_heads, d);
  };
  const auto kv = stored(c.k.data), vv = stored(c.v.data);
  const auto ov = posenc::view_bshd(out.data(), 1, queries, heads, d);
  const double roof = roofline_gbps(reinterpret_cast<const char*>(c.k.data),
                                    reinterpret_cast<const char*>(c.v.data), c.bytes(), threads);
  posenc::flash_options options{threads};
  std::unique_ptr<posenc::thread_pool> pool;
  if (use_pool() && threads > 1) {
    pool = std::make_unique<posenc::thread_pool>(threads);
    options.pool = pool.get();
  }
  time_against_roofline(state, 2.0 * static_cast<double>(c.bytes()), roof, [&] {
    posenc::flash_multi_head_attention(qv, kv, vv, ov, config, posenc::no_position_policy{},
                                       options);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  });
  // the FMA ceiling: the call's float FMAs at this CPU's peak (see the file comment)
  const double fmas = 2.0 * static_cast<double>(queries * heads * keys * d);
  const double ceiling = 2.0 * static_cast<double>(c.bytes()) * fma_peak(threads) / fmas * 1e-9;
  state.counters["fma_ceiling_GB/s"] = ceiling;
  if (state.counters.count("vs_roofline"))
    state.counters["vs_ceiling"] =
        state.counters["vs_roofline"].value * roof / std::min(roof, ceiling);
  state.counters["head_major"] = head_major() ? 1 : 0;
  state.counters["pool"] = pool ? 1 : 0;
  const posenc::cpu::settings& tuning = posenc::cpu::tuning();
  state.counters["key_runs"] =
      tuning.decode_key_runs && d >= tuning.decode_key_runs_min_values.load() ? 1 : 0;
  state.counters["stream_prefetch"] = tuning.decode_stream_prefetch.load();
  state.counters["key_run_prefetch"] = tuning.decode_key_run_prefetch.load();
  state.counters["value_pass_keys"] = tuning.decode_value_pass_key_prefetch ? 1 : 0;
  state.counters["one_query_heads"] = tuning.decode_one_query_heads.load();
  state.counters["group_rows"] = tuning.decode_group_rows ? 1 : 0;
  state.SetLabel(std::string(type_name<S>()) + (heads == kv_heads ? " MHA " : " GQA ") +
                 std::to_string(heads) + "/" + std::to_string(kv_heads));
}

template <class S>
void add_rows(bool every) {
  const std::string t = type_name<S>();
  std::vector<std::tuple<long, long, long, long, long>> rows;  // keys, heads, kv, d, queries
  if (mode("cache")) {
    // K and V small enough to stay in L2 / L3 across calls: the arithmetic's own cost
    for (long keys : {256L, 1024L}) {
      rows.emplace_back(keys, 32, 8, 128, 1);
      rows.emplace_back(keys, 8, 8, 128, 1);
      rows.emplace_back(keys, 8, 8, 128, 4);
      rows.emplace_back(keys, 32, 8, 128, 4);
    }
    for (long keys : {1280L, 2048L})
      for (long heads : {8L, 32L})
        for (long d : {64L, 128L}) rows.emplace_back(keys, heads, 8, d, 1);
    rows.emplace_back(2048, 32, 8, 128, 4);
  } else if (every) {
    for (long keys : {4096L, 16384L, 65536L})
      for (long heads : {8L, 32L})
        for (long d : {64L, 128L})
          for (long queries : {1L, 4L, 8L}) rows.emplace_back(keys, heads, 8, d, queries);
  } else if (std::is_same_v<S, float>) {
    for (long keys : {4096L, 16384L, 65536L}) {
      rows.emplace_back(keys, 8, 8, 128, 1);
      rows.emplace_back(keys, 32, 8, 128, 1);
    }
    rows.emplace_back(16384, 32, 8, 64, 1);
    rows.emplace_back(16384, 32, 8, 128, 4);
    rows.emplace_back(16384, 32, 8, 128, 8);
  } else {
    rows.emplace_back(16384, 32, 8, 128, 1);
  }
  std::vector<std::pair<long, long>> roofs;  // (keys, d) of the kv shapes above, 8 KV heads
  for (const auto& r : rows) roofs.emplace_back(std::get<0>(r), std::get<3>(r));
  std::sort(roofs.begin(), roofs.end());
  roofs.erase(std::unique(roofs.begin(), roofs.end()), roofs.end());
  for (const auto& [keys, d] : roofs)
    benchmark::RegisterBenchmark(("roofline<" + t + ">").c_str(), roofline<S>)
        ->Args({keys, 8, d, 1})
        ->Args({keys, 8, d, 2})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  for (const auto& [keys, heads, kv, d, queries] : rows)
    benchmark::RegisterBenchmark(("decode<" + t + ">").c_str(), decode<S>)
        ->Args({keys, heads, kv, d, queries, 1})
        ->Args({keys, heads, kv, d, queries, 2})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* runs = std::getenv("POSENC_DECODE_KEY_RUNS")) {
    posenc::cpu::tuning().decode_key_runs = std::strcmp(runs, "0") != 0;
    posenc::cpu::tuning().decode_key_runs_min_values = 0;
  }
  if (const char* ahead = std::getenv("POSENC_DECODE_STREAM_PREFETCH"))
    posenc::cpu::tuning().decode_stream_prefetch = std::atoi(ahead);
  if (const char* ahead = std::getenv("POSENC_DECODE_KEY_RUN_PREFETCH"))
    posenc::cpu::tuning().decode_key_run_prefetch = std::atoi(ahead);
  if (const char* keys = std::getenv("POSENC_DECODE_VALUE_PASS_KEYS"))
    posenc::cpu::tuning().decode_value_pass_key_prefetch = std::strcmp(keys, "0") != 0;
  if (const char* heads = std::getenv("POSENC_DECODE_ONE_QUERY_HEADS"))
    posenc::cpu::tuning().decode_one_query_heads = std::atoi(heads);
  if (const char* group = std::getenv("POSENC_DECODE_GROUP_ROWS"))
    posenc::cpu::tuning().decode_group_rows = std::atoi(group) != 0;
  const bool every = mode("full");
  if (mode("order"))
    for (long keys : {1280L, 16384L})
      benchmark::RegisterBenchmark("read_order", read_order)
          ->ArgsProduct({{keys}, {1, 16}, {1, 4}, {0}})
          ->Args({keys, 1, 1, 1})  // MHA's mix: one FMA and one query load per vector
          ->Args({keys, 1, 4, 1})
          ->Args({keys, 16, 4, 1})  // GQA's block kernels: their order and load mix
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
  else {
    add_rows<float>(every);
    add_rows<Eigen::half>(every);
    add_rows<Eigen::bfloat16>(every);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
