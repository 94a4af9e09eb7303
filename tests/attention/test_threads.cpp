// The threaded paths of the tiled kernel, small enough to run in seconds under
// ThreadSanitizer (scripts/ci_matrix.sh tsan, where any report fails the test): prefill
// units, the split-key decode and its merge over a kv_cache, and the keys' pre-rotation,
// at threads = 2, 3, 4 and 0 (all the hardware's). flash.hpp promises the same output
// bit for bit for any thread count, so each is compared exactly with one thread; one
// thread is checked against the reference attention. One rotary_policy is shared by all
// the worker threads of a call, at a far query offset (1 << 20: past its cos/sin cache,
// those rows are computed on the fly in each thread) as well as near ones. The same calls
// on a thread_pool (flash_options::pool), reused across calls and shared by two callers,
// and the pool's own contract (sizes, a busy pool, a throwing job).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <posenc/attention/flash.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/core/thread_pool.hpp>
#include <posenc/encoding/alibi.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;
using posenc_test::random_matrix;
using posenc_test::rmat;

namespace {

/// The thread counts every case runs (0: std::thread::hardware_concurrency()).
const Index thread_counts[] = {2, 3, 4, 0};

/// [B·L, H·d] packed rows (batch-major) for q, and k, v the same way.
struct problem {
  Index batch, heads, kv_heads, len_q, len_k, dim, dim_v;
  rmat<float> q, k, v;
  problem(Index b, Index h, Index hkv, Index lq, Index lk, Index d, Index dv, std::uint64_t seed)
      : batch(b), heads(h), kv_heads(hkv), len_q(lq), len_k(lk), dim(d), dim_v(dv) {
    q = random_matrix(b * lq, h * d, seed).cast<float>();
    k = random_matrix(b * lk, hkv * d, seed + 1).cast<float>();
    v = random_matrix(b * lk, hkv * dv, seed + 2).cast<float>();
  }

  template <class Policy>
  rmat<float> flash(const posenc::attention_config& cfg, const Policy& policy, Index threads,
                    posenc::thread_pool* pool = nullptr) const {
    posenc::flash_options options{threads};
    options.pool = pool;
    rmat<float> out = rmat<float>::Zero(batch * len_q, heads * dim_v);
    posenc::flash_multi_head_attention(posenc::view_bshd(q.data(), batch, len_q, heads, dim),
                                       posenc::view_bshd(k.data(), batch, len_k, kv_heads, dim),
                                       posenc::view_bshd(v.data(), batch, len_k, kv_heads, dim_v),
                                       posenc::view_bshd(out.data(), batch, len_q, heads, dim_v),
                                       cfg, policy, options);
    return out;
  }

  template <class Policy>
  rmat<float> reference(const posenc::attention_config& cfg, const Policy& policy) const {
    rmat<float> out = rmat<float>::Zero(batch * len_q, heads * dim_v);
    posenc::multi_head_attention(posenc::view_bshd(q.data(), batch, len_q, heads, dim),
                                 posenc::view_bshd(k.data(), batch, len_k, kv_heads, dim),
                                 posenc::view_bshd(v.data(), batch, len_k, kv_heads, dim_v),
                                 posenc::view_bshd(out.data(), batch, len_q, heads, dim_v), cfg,
                                 policy);
    return out;
  }
};

/// max |a - b| / max |b|: float32 parity is 2e-6 (test_flash.cpp).
double rel_err(const rmat<float>& a, const rmat<float>& b) {
  const double den = b.cast<double>().cwiseAbs().maxCoeff();
  return posenc_test::max_abs_diff(a, b) / (den > 0 ? den : 1.0);
}

/// Every thread count gives the one-thread result, bit for bit.
template <class Policy>
void check_threads(const problem& p, const posenc::attention_config& cfg, const Policy& policy) {
  const rmat<float> one = p.flash(cfg, policy, 1);
  CHECK(rel_err(one, p.reference(cfg, policy)) < 2e-6);
  for (Index t : thread_counts) {
    INFO("threads = " << t);
    CHECK(p.flash(cfg, policy, t) == one);
  }
}

}  // namespace

TEST_CASE("prefill on threads equals one thread, bit for bit", "[threads][prefill]") {
  // 2 batches x 4 heads x 3 blocks of 128 query rows: 24 units; GQA, two keys per head
  const problem p(2, 4, 2, 300, 310, 32, 16, 71);
  posenc::attention_config cfg;
  SECTION("ALiBi, causal from an offset, padded keys") {
    cfg.mask.causal = true;
    cfg.q_offset = 10;
    cfg.mask.key_lengths = {310, 200};
    check_threads(p, cfg, posenc::alibi_policy(4));
  }
  SECTION("RoPE: keys pre-rotated on threads") {
    cfg.mask.causal = true;
    check_threads(p, cfg, posenc::rotary_policy(p.dim));
  }
}

TEST_CASE("decode over a kv_cache on threads equals one thread, bit for bit", "[threads][decode]") {
  // 2600 cached tokens: three key chunks of 1024 per row, merged in a fixed order
  const Index tokens = 2600, kv_heads = 2, heads = 4, dim = 32, dim_v = 16;
  posenc::kv_cache<float> cache(kv_heads, dim, dim_v);
  const rmat<float> k = random_matrix(tokens, kv_heads * dim, 81).cast<float>();
  const rmat<float> v = random_matrix(tokens, kv_heads * dim_v, 82).cast<float>();
  for (Index t = 0; t < tokens; t += 500) {
    const Index n = std::min<Index>(500, tokens - t);
    cache.append(k.middleRows(t, n), v.middleRows(t, n));
  }
  for (Index n : {1, 4}) {
    INFO("queries = " << n);
    const rmat<float> q =
        random_matrix(n, heads * dim, 83 + static_cast<std::uint64_t>(n)).cast<float>();
    posenc::attention_config cfg;
    cfg.mask.causal = true;
    cfg.q_offset = cache.size() - n;
    auto run = [&](Index threads) {
      rmat<float> out = rmat<float>::Zero(n, heads * dim_v);
      posenc::flash_multi_head_attention(
          posenc::view_bshd(q.data(), 1, n, heads, dim), cache.keys(), cache.values(),
          posenc::view_bshd(out.data(), 1, n, heads, dim_v), cfg, posenc::alibi_policy(heads),
          posenc::flash_options{threads});
      return out;
    };
    const rmat<float> one = run(1);
    // the cache's own (reference) attention of the same queries
    CHECK(rel_err(one, cache.attend(q, heads, {}, posenc::alibi_policy(heads))) < 2e-6);
    for (Index t : thread_counts) {
      INFO("threads = " << t);
      CHECK(run(t) == one);
    }
  }
}

TEST_CASE("one rotary_policy shared by the threads of a call, at a far offset",
          "[threads][rotary]") {
  // keys at 0..Lk-1 (from the cache the policy reserves before the threads start), queries
  // at 1 << 20 (past the cache's limit: each thread computes those rows itself)
  const posenc::rotary_policy rope(32, 10000.0);
  posenc::attention_config cfg;
  cfg.q_offset = Index(1) << 20;
  {
    INFO("prefill");
    const problem p(1, 4, 2, 200, 700, 32, 16, 91);
    check_threads(p, cfg, rope);
  }
  {
    INFO("decode");
    const problem p(2, 4, 1, 3, 2100, 32, 16, 93);
    cfg.mask.causal = true;
    check_threads(p, cfg, rope);
  }
  {
    INFO("near positions, from the cache grown by the calls above");
    const problem p(1, 2, 2, 5, 40, 32, 16, 95);
    cfg.q_offset = 7;
    check_threads(p, cfg, rope);
  }
}

TEST_CASE("prefill and decode on a thread_pool equal one thread, bit for bit", "[threads][pool]") {
  const problem prefill(2, 4, 2, 300, 310, 32, 16, 101);  // 24 units of 128 query rows
  const problem decode(2, 4, 1, 3, 2600, 32, 16, 103);    // 3 key chunks per batch item
  posenc::attention_config cfg;
  cfg.mask.causal = true;
  cfg.q_offset = 2597;  // decode: the last 3 of 2600 positions
  const posenc::alibi_policy alibi(4);
  const rmat<float> one_decode = decode.flash(cfg, alibi, 1);
  cfg.q_offset = 10;
  const rmat<float> one_prefill = prefill.flash(cfg, alibi, 1);
  for (Index size : {1, 2, 3, 4}) {
    // size 3: threads that sleep as soon as they are idle (no spinning)
    posenc::thread_pool pool(size, std::chrono::microseconds(size == 3 ? 0 : 100));
    INFO("pool of " << size << " (" << pool.size() << " started)");
    CHECK(pool.size() >= 1);
    CHECK(pool.size() <= size);
    for (Index t : {Index(1), Index(2), Index(0), Index(8)}) {  // 0: all the pool's threads
      INFO("threads = " << t);
      cfg.q_offset = 10;
      CHECK(prefill.flash(cfg, alibi, t, &pool) == one_prefill);
      cfg.q_offset = 2597;
      CHECK(decode.flash(cfg, alibi, t, &pool) == one_decode);
    }
  }
  SECTION("one pool, many calls in a row, and RoPE's keys pre-rotated on it") {
    posenc::thread_pool pool(3);
    const posenc::rotary_policy rope(32);
    cfg.q_offset = 2597;
    const rmat<float> one = decode.flash(cfg, rope, 1);
    for (int call = 0; call < 40; ++call) {
      INFO("call " << call);
      REQUIRE(decode.flash(cfg, rope, 0, &pool) == one);
    }
  }
  SECTION("a kv_cache decoding token by token on a pool (kv_cache_options::flash.pool)") {
    posenc::thread_pool pool(2);
    posenc::kv_cache<float> one(1, 32, 16), pooled(1, 32, 16);
    posenc::kv_cache_options options;
    options.flash.threads = 0;
    options.flash.pool = &pool;
    pooled.set_options(options);
    const Index start = 2000;  // past decode_chunk: every step takes the split-key path
    one.append(decode.k.topRows(start), decode.v.topRows(start));
    pooled.append(decode.k.topRows(start), decode.v.topRows(start));
    for (Index t = start; t < start + 30; ++t) {
      INFO("token " << t);
      const auto q = decode.q.row(t % 3);
      const auto k = decode.k.row(t);
      const auto v = decode.v.row(t);
      REQUIRE(pooled.step(q, k, v, 4, {}, alibi) == one.step(q, k, v, 4, {}, alibi));
    }
  }
  SECTION("two callers sharing one pool: one runs on it, the other on its own threads") {
    posenc::thread_pool pool(2);
    cfg.q_offset = 2597;
    std::atomic<int> mismatches{0};
    auto caller = [&] {
      for (int call = 0; call < 20; ++call)
        if (!(decode.flash(cfg, alibi, 2, &pool) == one_decode)) ++mismatches;
    };
    std::thread other(caller);
    caller();
    other.join();
    CHECK(mismatches.load() == 0);
  }
}

TEST_CASE("thread_pool: sizes, a busy pool, a job that throws", "[threads][pool]") {
  using posenc::thread_pool;
  POSENC_REQUIRE_ERROR(thread_pool(-1), "thread_pool: threads = -1");
  POSENC_REQUIRE_ERROR(thread_pool(1025), "thread_pool: threads = 1025");
  POSENC_REQUIRE_ERROR(thread_pool(2, std::chrono::microseconds(-1)), "thread_pool: spin = -1");
  CHECK(thread_pool(0).size() >= 1);  // the hardware's threads

  thread_pool pool(3);
  const Index size = pool.size();
  std::vector<std::atomic<int>> ran(8);
  auto count = [&](Index w) { ++ran[static_cast<std::size_t>(w)]; };
  for (Index n : {Index(1), Index(2), Index(3), Index(7)}) {
    INFO("n = " << n);
    for (auto& r : ran) r = 0;
    REQUIRE(pool.try_run(n, count));
    for (Index w = 0; w < 8; ++w)  // each of min(n, size) threads once, the rest never
      CHECK(ran[static_cast<std::size_t>(w)].load() == (w < std::min(n, size) ? 1 : 0));
  }

  // a job that asks for the pool it runs on finds it busy (false, nothing run)
  std::atomic<int> nested_ran{0};
  bool nested = true;
  auto inner = [&](Index) { ++nested_ran; };
  auto outer = [&](Index w) {
    if (w == 0) nested = pool.try_run(2, inner);
  };
  REQUIRE(pool.try_run(2, outer));
  CHECK_FALSE(nested);
  CHECK(nested_ran.load() == 0);

  // job(0) throws: the exception reaches the caller after the other threads are done, and
  // the pool runs the next call
  std::atomic<int> others{0};
  auto throwing = [&](Index w) {
    if (w == 0) throw std::runtime_error("job 0");
    ++others;
  };
  CHECK_THROWS_AS(pool.try_run(size, throwing), std::runtime_error);
  CHECK(others.load() == size - 1);
  for (auto& r : ran) r = 0;
  REQUIRE(pool.try_run(size, count));
  CHECK(ran[0].load() == 1);
}
