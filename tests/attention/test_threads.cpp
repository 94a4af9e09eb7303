// The threaded paths of the tiled kernel, small enough to run in seconds under
// ThreadSanitizer (scripts/ci_matrix.sh tsan, where any report fails the test): prefill
// units, the split-key decode and its merge over a kv_cache, and the keys' pre-rotation,
// at threads = 2, 3, 4 and 0 (all the hardware's). flash.hpp promises the same output
// bit for bit for any thread count, so each is compared exactly with one thread; one
// thread is checked against the reference attention. One rotary_policy is shared by all
// the worker threads of a call, at a far query offset (1 << 20: past its cos/sin cache,
// those rows are computed on the fly in each thread) as well as near ones.

#include <algorithm>
#include <cstdint>
#include <posenc/attention/flash.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/encoding/alibi.hpp>
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
  rmat<float> flash(const posenc::attention_config& cfg, const Policy& policy,
                    Index threads) const {
    rmat<float> out = rmat<float>::Zero(batch * len_q, heads * dim_v);
    posenc::flash_multi_head_attention(posenc::view_bshd(q.data(), batch, len_q, heads, dim),
                                       posenc::view_bshd(k.data(), batch, len_k, kv_heads, dim),
                                       posenc::view_bshd(v.data(), batch, len_k, kv_heads, dim_v),
                                       posenc::view_bshd(out.data(), batch, len_q, heads, dim_v),
                                       cfg, policy, posenc::flash_options{threads});
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
