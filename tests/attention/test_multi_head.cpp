// Multi-head / grouped-query attention over strided views, batches with padding, the
// weights output, and the KV cache (decode equals one full causal pass).

#include <posenc/attention.hpp>
#include <vector>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc_test::golden_matrix;
using posenc_test::max_abs_diff;
using posenc_test::random_matrix;
using posenc_test::rmat;

TEST_CASE("grouped-query multi-head ALiBi attention matches the reference",
          "[multi_head][golden]") {
  const auto q = golden_matrix<double>("attention_mh_q.npy");
  const auto k = golden_matrix<double>("attention_mh_k.npy");
  const auto v = golden_matrix<double>("attention_mh_v.npy");
  const auto want = golden_matrix<double>("attention_mh_out.npy");
  posenc::attention_config opt;
  opt.mask.causal = true;
  opt.q_offset = 1;
  const auto out = posenc::multi_head_attention(q, k, v, 4, 2, opt, posenc::alibi_policy(4));
  CHECK(max_abs_diff(out, want) < 1e-13);
  const rmat<float> outf =
      posenc::multi_head_attention(q.cast<float>().eval(), k.cast<float>().eval(),
                                   v.cast<float>().eval(), 4, 2, opt, posenc::alibi_policy(4));
  CHECK(max_abs_diff(outf, want) < 1e-5);
}

TEST_CASE("multi-head equals per-head single calls for MHA, GQA and MQA", "[multi_head]") {
  const Index H = 6, d = 5, dv = 3, Lq = 7, Lk = 11;
  for (Index hkv : {6, 3, 2, 1}) {
    INFO("kv heads " << hkv);
    const auto q = random_matrix(Lq, H * d, 1), k = random_matrix(Lk, hkv * d, 2),
               v = random_matrix(Lk, hkv * dv, 3);
    const auto table = random_matrix(32, H, 4);
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = 4;
    const posenc::t5_bias_policy t5(table, {32, 128, false});
    const posenc::alibi_policy alibi(H);
    const auto out_t5 = posenc::multi_head_attention(q, k, v, H, hkv, opt, t5);
    const auto out_al = posenc::multi_head_attention(q, k, v, H, hkv, opt, alibi);
    for (Index h = 0; h < H; ++h) {
      const Index g = h / (H / hkv);
      const rmat<double> qh = q.middleCols(h * d, d), kh = k.middleCols(g * d, d),
                         vh = v.middleCols(g * dv, dv);
      CHECK(max_abs_diff(out_t5.middleCols(h * dv, dv),
                         posenc::attention(qh, kh, vh, opt, t5.only_head(h))) < 1e-15);
      CHECK(max_abs_diff(out_al.middleCols(h * dv, dv),
                         posenc::attention(qh, kh, vh, opt, alibi.only_head(h))) < 1e-15);
    }
  }
}

TEST_CASE("batched attention over bshd and bhsd views with padding and weights",
          "[multi_head][mask]") {
  const Index B = 3, L = 6, H = 4, Hkv = 2, d = 4, dv = 2;
  // Logical [B, L, H, d] values, stored once as bshd and once as bhsd.
  auto fill = [](Index heads, Index dim, std::uint64_t seed) {
    return random_matrix(B * L * heads, dim, seed);  // row ((b*L + s)*heads + h)
  };
  const auto q = fill(H, d, 5), k = fill(Hkv, d, 6), v = fill(Hkv, dv, 7);
  auto to_bhsd = [&](const rmat<double>& m, Index heads) {
    std::vector<double> out(static_cast<std::size_t>(m.size()));
    const Index dim = m.cols();
    for (Index b = 0; b < B; ++b)
      for (Index s = 0; s < L; ++s)
        for (Index h = 0; h < heads; ++h)
          for (Index c = 0; c < dim; ++c)
            out[static_cast<std::size_t>(((b * heads + h) * L + s) * dim + c)] =
                m((b * L + s) * heads + h, c);
    return out;
  };
  const auto qb = to_bhsd(q, H), kb = to_bhsd(k, Hkv), vb = to_bhsd(v, Hkv);
  posenc::attention_config opt;
  opt.mask.causal = true;
  opt.mask.key_lengths = {6, 3, 0};
  std::vector<double> out1(static_cast<std::size_t>(B * L * H * dv)), out2(out1.size()),
      w(static_cast<std::size_t>(B * H * L * L));
  const auto wv = posenc::strided_view<double, 4>::contiguous(w.data(), {B, H, L, L});
  posenc::multi_head_attention(
      posenc::view_bshd(q.data(), B, L, H, d), posenc::view_bshd(k.data(), B, L, Hkv, d),
      posenc::view_bshd(v.data(), B, L, Hkv, dv), posenc::view_bshd(out1.data(), B, L, H, dv), opt,
      posenc::alibi_policy(H), &wv);
  posenc::multi_head_attention(
      posenc::view_bhsd(qb.data(), B, H, L, d), posenc::view_bhsd(kb.data(), B, Hkv, L, d),
      posenc::view_bhsd(vb.data(), B, Hkv, L, dv), posenc::view_bshd(out2.data(), B, L, H, dv), opt,
      posenc::alibi_policy(H));
  for (std::size_t e = 0; e < out1.size(); ++e) REQUIRE(out1[e] == out2[e]);
  // Each (b, h) equals a single-head call on the valid keys.
  const auto slopes = posenc::alibi_slopes(H);
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h) {
      const Index g = h / (H / Hkv), len = opt.mask.key_lengths[static_cast<std::size_t>(b)];
      rmat<double> qh(L, d), kh(len, d), vh(len, dv);
      for (Index s = 0; s < L; ++s) qh.row(s) = q.row((b * L + s) * H + h);
      for (Index s = 0; s < len; ++s) {
        kh.row(s) = k.row((b * L + s) * Hkv + g);
        vh.row(s) = v.row((b * L + s) * Hkv + g);
      }
      posenc::attention_config o;
      o.mask.causal = true;
      rmat<double> wh;
      const auto want =
          posenc::attention_with_weights(qh, kh, vh, wh, o, posenc::alibi_policy(H).only_head(h));
      for (Index s = 0; s < L; ++s)
        for (Index c = 0; c < dv; ++c)
          CHECK(out1[static_cast<std::size_t>(((b * L + s) * H + h) * dv + c)] == want(s, c));
      for (Index s = 0; s < L; ++s)
        for (Index j = 0; j < L; ++j) CHECK(wv(b, h, s, j) == (j < len ? wh(s, j) : 0.0));
    }
}

TEST_CASE("multi-head errors name the parameter", "[multi_head][errors]") {
  const auto q = random_matrix(4, 12, 1), k = random_matrix(5, 8, 2), v = random_matrix(5, 8, 3);
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention(q, random_matrix(5, 12, 2), random_matrix(5, 12, 3), 4, 3),
      "kv_heads = 3");
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, v, 5, 1), "q.cols() = 12");
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, v, 0, 1), "heads = 0");
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, v, 4, 0), "kv_heads = 0");
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, random_matrix(5, 9, 3), 4, 2),
                       "v.cols() = 9");
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, random_matrix(5, 9, 3), v, 4, 2),
                       "k.cols() = 9");
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, random_matrix(6, 8, 3), 4, 2),
                       "v.rows() = 6");
  // k head dim 4 vs q head dim 3.
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, v, 4, 2), "k dim = 4");
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention(q, random_matrix(5, 6, 2), v, 4, 2, {}, posenc::alibi_policy(3)),
      "heads = 4");
  // View-level checks.
  std::vector<double> buf(64 * 64, 0.0);
  const auto qv = posenc::view_bshd(buf.data(), 2, 3, 4, 2);
  const auto kv = posenc::view_bshd(buf.data(), 1, 3, 2, 2);
  const auto vv = posenc::view_bshd(buf.data(), 2, 3, 2, 2);
  auto ov = posenc::view_bshd(buf.data() + 1024, 2, 3, 4, 2);
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(qv, kv, vv, ov), "k batch = 1");
  const auto kv2 = posenc::view_bshd(buf.data(), 2, 3, 2, 2);
  const auto vbad = posenc::view_bshd(buf.data(), 2, 4, 2, 2);
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(qv, kv2, vbad, ov), "v len = 4");
  auto obad = posenc::view_bshd(buf.data() + 1024, 2, 3, 4, 3);
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(qv, kv2, vv, obad), "out extents");
  const auto wbad = posenc::strided_view<double, 4>::contiguous(buf.data() + 2048, {2, 4, 3, 2});
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention(qv, kv2, vv, ov, {}, posenc::no_position_policy{}, &wbad),
      "weights extents");
}

TEST_CASE("KV-cache decoding token by token equals one full causal pass", "[kv_cache][property]") {
  const Index L = 23, H = 4, Hkv = 2, d = 6, dv = 5;
  const auto q = random_matrix(L, H * d, 11), k = random_matrix(L, Hkv * d, 12),
             v = random_matrix(L, Hkv * dv, 13);
  const auto table = random_matrix(16, H, 14);
  auto check_policy = [&](const auto& policy, double scale) {
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.scale = scale;
    const auto full = posenc::multi_head_attention(q, k, v, H, Hkv, opt, policy);
    posenc::kv_cache<double> cache(Hkv, d, dv, 4);
    posenc::attention_config dec;
    dec.scale = scale;
    for (Index t = 0; t < L; ++t) {
      const auto row =
          cache.step(q.middleRows(t, 1), k.middleRows(t, 1), v.middleRows(t, 1), H, dec, policy);
      CHECK(cache.size() == t + 1);
      INFO("token " << t);
      CHECK(max_abs_diff(row, full.middleRows(t, 1)) < 1e-14);
    }
    // Chunked prefill through the cache: 7 + 9 + 7 tokens.
    cache.clear();
    CHECK(cache.size() == 0);
    Index r0 = 0;
    for (Index n : {7, 9, 7}) {
      const auto rows =
          cache.step(q.middleRows(r0, n), k.middleRows(r0, n), v.middleRows(r0, n), H, dec, policy);
      CHECK(max_abs_diff(rows, full.middleRows(r0, n)) < 1e-14);
      r0 += n;
    }
    // float cache.
    posenc::kv_cache<float> cf(Hkv, d, dv);
    const rmat<float> qf = q.cast<float>(), kf = k.cast<float>(), vf = v.cast<float>();
    for (Index t = 0; t < L; ++t) {
      const rmat<float> row =
          cf.step(qf.middleRows(t, 1), kf.middleRows(t, 1), vf.middleRows(t, 1), H, dec, policy);
      CHECK(max_abs_diff(row, full.middleRows(t, 1)) < 1e-5);
    }
  };
  check_policy(posenc::no_position_policy{}, 0.0);
  check_policy(posenc::alibi_policy(H), 0.0);
  check_policy(posenc::t5_bias_policy(table, {16, 12, false}), 1.0);
}

TEST_CASE("KV cache errors leave the cache unchanged", "[kv_cache][errors]") {
  POSENC_REQUIRE_ERROR(posenc::kv_cache<double>(0, 4, 4), "kv_heads = 0");
  POSENC_REQUIRE_ERROR(posenc::kv_cache<double>(1, 0, 4), "dim = 0");
  POSENC_REQUIRE_ERROR(posenc::kv_cache<double>(1, 4, 0), "dim_v = 0");
  POSENC_REQUIRE_ERROR(posenc::kv_cache<double>(1, 4, 4, -1), "reserve_tokens = -1");
  posenc::kv_cache<double> c(2, 3, 2);
  POSENC_REQUIRE_ERROR(c.append(random_matrix(1, 5, 1), random_matrix(1, 4, 1)), "k.cols() = 5");
  POSENC_REQUIRE_ERROR(c.append(random_matrix(1, 6, 1), random_matrix(1, 5, 1)), "v.cols() = 5");
  POSENC_REQUIRE_ERROR(c.append(random_matrix(1, 6, 1), random_matrix(2, 4, 1)), "v.rows() = 2");
  POSENC_REQUIRE_ERROR(
      c.step(random_matrix(1, 7, 1), random_matrix(1, 6, 1), random_matrix(1, 4, 1), 2),
      "q.cols() = 7");
  POSENC_REQUIRE_ERROR(
      c.step(random_matrix(2, 6, 1), random_matrix(1, 6, 1), random_matrix(1, 4, 1), 2),
      "q.rows() = 2");
  CHECK(c.size() == 0);
  c.append(random_matrix(2, 6, 1), random_matrix(2, 4, 1));
  POSENC_REQUIRE_ERROR(c.attend(random_matrix(3, 6, 1), 2), "q.rows() = 3");
  POSENC_REQUIRE_ERROR(c.attend(random_matrix(1, 6, 1), 0), "heads = 0");
  CHECK(c.size() == 2);
  CHECK(c.keys().extent(1) == 2);
  CHECK(c.values().extent(3) == 2);
}
