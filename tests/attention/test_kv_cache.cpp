// The KV cache's kernels and its rotary embedding: the default tiled (flash) kernel against
// the exact reference kernel on every policy the tiles take, decode and chunked prefill,
// grouped heads, float and double; keys stored rotated once at their positions against
// rotary_policy over the full sequence; truncate; options and errors.

#include <cstdint>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/multi_head.hpp>
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/encoding/alibi.hpp>
#include <posenc/encoding/shaw.hpp>
#include <posenc/encoding/t5_bias.hpp>
#include <posenc/encoding/transformer_xl.hpp>
#include <vector>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;
using posenc_test::max_abs_diff;
using posenc_test::random_matrix;
using posenc_test::rel_norm_err;
using posenc_test::rmat;

namespace {

constexpr Index H = 4, Hkv = 2, d = 24, dv = 16;

posenc::kv_cache_options reference_kernel() {
  posenc::kv_cache_options o;
  o.kernel = posenc::kv_cache_kernel::reference;
  return o;
}

/// Decodes `tokens` through two caches (flash and reference kernels) a chunk at a time;
/// returns the largest relative difference of a chunk's output and checks the caches hold
/// the same keys.
template <class Scalar, class Policy>
double flash_vs_reference(const Policy& policy, const std::vector<Index>& chunks,
                          posenc::attention_config cfg = {}) {
  Index total = 0;
  for (Index n : chunks) total += n;
  const rmat<Scalar> q = random_matrix<Scalar>(total, H * d, 31);
  const rmat<Scalar> k = random_matrix<Scalar>(total, Hkv * d, 32);
  const rmat<Scalar> v = random_matrix<Scalar>(total, Hkv * dv, 33);
  posenc::kv_cache<Scalar> fast(Hkv, d, dv);
  posenc::kv_cache<Scalar> exact(Hkv, d, dv, 0, reference_kernel());
  REQUIRE(fast.options().kernel == posenc::kv_cache_kernel::flash);  // the default
  double worst = 0;
  Index r0 = 0;
  for (Index n : chunks) {
    const rmat<Scalar> a =
        fast.step(q.middleRows(r0, n), k.middleRows(r0, n), v.middleRows(r0, n), H, cfg, policy);
    const rmat<Scalar> b =
        exact.step(q.middleRows(r0, n), k.middleRows(r0, n), v.middleRows(r0, n), H, cfg, policy);
    worst = std::max(worst, rel_norm_err(a, b));
    r0 += n;
  }
  CHECK(fast.size() == total);
  return worst;
}

}  // namespace

TEST_CASE("kv_cache: the flash kernel equals the reference kernel within the flash bound",
          "[kv_cache][flash]") {
  // 1-token decode steps (split-key decode path) after a 300-token prefill chunk (tiled
  // prefill), and a 20-token chunk past the 8-row decode limit.
  const std::vector<Index> chunks{300, 1, 1, 3, 20, 1};
  const rmat<double> table = random_matrix(32, H, 41);
  posenc::shaw_policy<double> shaw(posenc::shaw_clip::symmetric(8), d, dv);
  shaw.key_tables() = random_matrix(shaw.rows(), d, 42);
  shaw.value_tables() = random_matrix(shaw.rows(), dv, 43);
  SECTION("float storage: relative 2e-6") {
    CHECK(flash_vs_reference<float>(posenc::no_position_policy{}, chunks) < 2e-6);
    CHECK(flash_vs_reference<float>(posenc::alibi_policy(H), chunks) < 2e-6);
    CHECK(flash_vs_reference<float>(posenc::t5_bias_policy(table, {32, 128, false}), chunks) <
          2e-6);
    CHECK(flash_vs_reference<float>(posenc::rotary_policy(d), chunks) < 2e-6);
    posenc::shaw_policy<float> shaw_f(posenc::shaw_clip::symmetric(8), d, dv);
    shaw_f.key_tables() = shaw.key_tables().cast<float>();
    shaw_f.value_tables() = shaw.value_tables().cast<float>();
    CHECK(flash_vs_reference<float>(shaw_f, chunks) < 2e-6);
  }
  SECTION("double storage: relative 1e-13") {
    CHECK(flash_vs_reference<double>(posenc::no_position_policy{}, chunks) < 1e-13);
    CHECK(flash_vs_reference<double>(posenc::alibi_policy(H), chunks) < 1e-13);
    CHECK(flash_vs_reference<double>(shaw, chunks) < 1e-13);
  }
  SECTION("an explicit scale is kept; the cache sets the offset and causal itself") {
    posenc::attention_config cfg;
    cfg.scale = 0.3;
    cfg.q_offset = 12345;     // overwritten by the cache
    cfg.mask.causal = false;  // likewise
    CHECK(flash_vs_reference<float>(posenc::alibi_policy(H), chunks, cfg) < 2e-6);
  }
  SECTION("the kernels differ: the comparison can fail") {
    // (not bitwise equal: the tiled kernel sums in another order)
    const rmat<float> q = random_matrix<float>(1, H * d, 1),
                      k = random_matrix<float>(700, Hkv * d, 2),
                      v = random_matrix<float>(700, Hkv * dv, 3);
    posenc::kv_cache<float> a(Hkv, d, dv), b(Hkv, d, dv, 0, reference_kernel());
    a.append(k, v);
    b.append(k, v);
    const rmat<float> oa = a.attend(q, H), ob = b.attend(q, H);
    CHECK(oa != ob);
    CHECK(rel_norm_err(oa, ob) < 2e-6);
  }
}

TEST_CASE("kv_cache: the reference kernel decodes the rows of one causal pass (1e-14)",
          "[kv_cache]") {
  const Index L = 37;
  const rmat<double> q = random_matrix(L, H * d, 51), k = random_matrix(L, Hkv * d, 52),
                     v = random_matrix(L, Hkv * dv, 53);
  posenc::attention_config causal;
  causal.mask.causal = true;
  const posenc::alibi_policy alibi(H);
  const rmat<double> full = posenc::multi_head_attention(q, k, v, H, Hkv, causal, alibi);
  posenc::kv_cache<double> cache(Hkv, d, dv, L, reference_kernel());
  for (Index t = 0; t < L; ++t) {
    const rmat<double> row =
        cache.step(q.middleRows(t, 1), k.middleRows(t, 1), v.middleRows(t, 1), H, {}, alibi);
    INFO("token " << t);
    CHECK(max_abs_diff(row, full.middleRows(t, 1)) < 1e-14);  // Eigen's products block by Lk
  }
}

TEST_CASE("kv_cache: threads change nothing, bit for bit", "[kv_cache][threads]") {
  const rmat<float> k = random_matrix<float>(2500, Hkv * d, 61),
                    v = random_matrix<float>(2500, Hkv * dv, 62);
  posenc::kv_cache<float> one(Hkv, d, dv);
  posenc::kv_cache_options three;
  three.flash.threads = 3;
  posenc::kv_cache<float> many(Hkv, d, dv, 0, three);
  one.append(k, v);
  many.append(k, v);
  for (Index n : {1, 5, 40}) {
    const rmat<float> q = random_matrix<float>(n, H * d, 63);
    CHECK(one.attend(q, H, {}, posenc::alibi_policy(H)) ==
          many.attend(q, H, {}, posenc::alibi_policy(H)));
  }
}

TEST_CASE("kv_cache: a policy the tiles cannot take runs on the reference kernel", "[kv_cache]") {
  posenc::transformer_xl_policy<double> xl(H, d);
  xl.u() = random_matrix(H, d, 71);
  xl.v() = random_matrix(H, d, 72);
  static_assert(!posenc::flash_supports_v<posenc::transformer_xl_policy<double>>);
  static_assert(posenc::flash_supports_v<posenc::shaw_policy<double>>);
  static_assert(posenc::flash_supports_v<posenc::rotary_policy>);
  const Index L = 12;
  const rmat<double> q = random_matrix(L, H * d, 73), k = random_matrix(L, Hkv * d, 74),
                     v = random_matrix(L, Hkv * dv, 75);
  posenc::attention_config causal;
  causal.mask.causal = true;
  const rmat<double> full = posenc::multi_head_attention(q, k, v, H, Hkv, causal, xl);
  posenc::kv_cache<double> cache(Hkv, d, dv);  // flash by default: falls back for xl
  for (Index t = 0; t < L; ++t)
    CHECK(max_abs_diff(
              cache.step(q.middleRows(t, 1), k.middleRows(t, 1), v.middleRows(t, 1), H, {}, xl),
              full.middleRows(t, 1)) < 1e-14);
}

TEST_CASE("kv_cache: rotary inside the cache stores keys rotated once at their positions",
          "[kv_cache][rotary]") {
  const Index L = 45;
  const rmat<double> q = random_matrix(L, H * d, 81), k = random_matrix(L, Hkv * d, 82),
                     v = random_matrix(L, Hkv * dv, 83);
  posenc::attention_config causal;
  causal.mask.causal = true;

  SECTION("decode and chunks equal rotary_policy over the full sequence") {
    // Llama 3.1-style scaling with a partial rotary dim and the interleaved pairing: the
    // cache's embedding and the policy's come from the same config.
    posenc::rope_config cfg;
    cfg.head_dim = d;
    cfg.rotary_dim = 16;
    cfg.base = 500000.0;
    cfg.pairing = posenc::rope_pairing::interleaved;
    cfg.scaling = posenc::rope_scaling_type::llama3;
    cfg.factor = 8.0;
    cfg.original_max_positions = 16;
    const posenc::rotary_policy rope(posenc::rotary_embedding<double>(cfg, L));
    const rmat<double> full = posenc::multi_head_attention(q, k, v, H, Hkv, causal, rope);
    for (const auto kernel : {posenc::kv_cache_kernel::flash, posenc::kv_cache_kernel::reference}) {
      posenc::kv_cache_options o;
      o.kernel = kernel;
      posenc::kv_cache<double> cache(Hkv, d, dv, 0, o);
      cache.set_rotary(cfg, L);
      REQUIRE(cache.has_rotary());
      Index r0 = 0;
      for (Index n : {20, 1, 1, 9, 1, 13}) {
        const rmat<double> rows =
            cache.step(q.middleRows(r0, n), k.middleRows(r0, n), v.middleRows(r0, n), H);
        INFO("chunk at " << r0 << ", kernel " << static_cast<int>(kernel));
        CHECK(max_abs_diff(rows, full.middleRows(r0, n)) < 1e-13);
        r0 += n;
      }
      // the stored keys are the rotated ones
      rmat<double> rotated = k;
      posenc::rotary_embedding<double> emb(cfg, L);
      emb.apply(posenc::view_shd(rotated.data(), L, Hkv, d), 0, posenc::rope_role::key);
      const auto keys = cache.keys();
      double worst = 0;
      for (Index t = 0; t < L; ++t)
        for (Index h = 0; h < Hkv; ++h)
          for (Index c = 0; c < d; ++c)
            worst = std::max(worst, std::abs(keys(0, t, h, c) - rotated(t, h * d + c)));
      CHECK(worst < 1e-15);
      CHECK(max_abs_diff(rotated, k) > 0.1);  // the rotation did something
    }
  }
  SECTION("a float embedding converts; a float cache agrees within float rounding") {
    const rmat<double> full =
        posenc::multi_head_attention(q, k, v, H, Hkv, causal, posenc::rotary_policy(d));
    posenc::kv_cache<float> cache(Hkv, d, dv);
    cache.set_rotary(posenc::rotary_embedding<float>(d));
    const rmat<float> qf = q.cast<float>(), kf = k.cast<float>(), vf = v.cast<float>();
    for (Index t = 0; t < L; ++t) {
      const rmat<float> row =
          cache.step(qf.middleRows(t, 1), kf.middleRows(t, 1), vf.middleRows(t, 1), H);
      CHECK(max_abs_diff(row, full.middleRows(t, 1)) < 2e-6);
    }
  }
  SECTION("without the rotation the result differs (the test can fail)") {
    const rmat<double> full =
        posenc::multi_head_attention(q, k, v, H, Hkv, causal, posenc::rotary_policy(d));
    posenc::kv_cache<double> plain(Hkv, d, dv);
    plain.append(k, v);
    CHECK(max_abs_diff(plain.attend(q, H), full) > 1e-3);
  }
}

TEST_CASE("kv_cache: truncate rolls back tokens; a redone step gives the same rows", "[kv_cache]") {
  const rmat<float> q = random_matrix<float>(30, H * d, 91),
                    k = random_matrix<float>(30, Hkv * d, 92),
                    v = random_matrix<float>(30, Hkv * dv, 93);
  posenc::kv_cache<float> cache(Hkv, d, dv);
  cache.set_rotary(posenc::rotary_embedding<double>(d));
  cache.step(q.topRows(20), k.topRows(20), v.topRows(20), H);
  const rmat<float> first =
      cache.step(q.middleRows(20, 4), k.middleRows(20, 4), v.middleRows(20, 4), H);
  // a rejected draft: other keys at positions 24..29, then rolled back
  cache.step(q.bottomRows(6), random_matrix<float>(6, Hkv * d, 5), v.bottomRows(6), H);
  cache.truncate(20);
  CHECK(cache.size() == 20);
  CHECK(cache.step(q.middleRows(20, 4), k.middleRows(20, 4), v.middleRows(20, 4), H) == first);
  POSENC_REQUIRE_ERROR(cache.truncate(25), "tokens = 25");
  POSENC_REQUIRE_ERROR(cache.truncate(-1), "tokens = -1");
  cache.truncate(0);
  CHECK(cache.size() == 0);
}

TEST_CASE("kv_cache: options and rotary errors", "[kv_cache][errors]") {
  posenc::kv_cache_options bad;
  bad.flash.threads = -1;
  POSENC_REQUIRE_ERROR(posenc::kv_cache<float>(Hkv, d, dv, 0, bad), "flash.threads = -1");
  bad.flash.threads = posenc::flash_options::max_threads + 1;
  POSENC_REQUIRE_ERROR(posenc::kv_cache<float>(Hkv, d, dv, 0, bad), "flash.threads");
  posenc::kv_cache<float> cache(Hkv, d, dv);
  POSENC_REQUIRE_ERROR(cache.set_rotary(posenc::rotary_embedding<float>(d + 2)), "head_dim = 26");
  POSENC_REQUIRE_ERROR(cache.rotary(), "has_rotary()");
  cache.append(random_matrix<float>(2, Hkv * d, 1), random_matrix<float>(2, Hkv * dv, 2));
  POSENC_REQUIRE_ERROR(cache.set_rotary(posenc::rotary_embedding<float>(d)), "size() = 2");
  cache.clear();
  cache.set_rotary(posenc::rotary_embedding<float>(d));
  CHECK(cache.rotary().head_dim() == d);
  cache.append(random_matrix<float>(2, Hkv * d, 1), random_matrix<float>(2, Hkv * dv, 2));
  // a second rotation through a policy is refused, and the cache is left as it was
  POSENC_REQUIRE_ERROR(
      cache.step(random_matrix<float>(1, H * d, 3), random_matrix<float>(1, Hkv * d, 4),
                 random_matrix<float>(1, Hkv * dv, 5), H, {}, posenc::rotary_policy(d)),
      "policy");
  CHECK(cache.size() == 2);
  POSENC_REQUIRE_ERROR(cache.clear_rotary(), "size() = 2");
  cache.clear();
  cache.clear_rotary();
  CHECK(!cache.has_rotary());
}

TEST_CASE("kv_cache: rows of 2 MiB or more start on a huge-page boundary, and attend the same",
          "[kv_cache]") {
  // 8 heads x 128 values x 4 bytes = 4 KiB a token: 600 tokens reserve 2.3 MiB of K and V
  const Index heads = 8, dim = 128, tokens = 600;
  posenc::kv_cache<float> big(heads, dim, dim, tokens), small(heads, dim, dim);
  const auto k = random_matrix<float>(tokens, heads * dim, 1);
  const auto v = random_matrix<float>(tokens, heads * dim, 2);
  big.append(k, v);
  small.append(k.topRows(3), v.topRows(3));  // 12 KiB: operator new
  const auto aligned = [](const float* p) {
    return reinterpret_cast<std::uintptr_t>(p) % posenc::huge_page_bytes == 0;
  };
  CHECK(aligned(big.keys().data()));
  CHECK(aligned(big.values().data()));
  small.append(k.bottomRows(tokens - 3), v.bottomRows(tokens - 3));  // grows past 2 MiB
  CHECK(aligned(small.keys().data()));
  const auto q = random_matrix<float>(1, 2 * heads * dim, 3);
  CHECK(big.attend(q, 2 * heads) == small.attend(q, 2 * heads));
}
