// The flash kernel's log-sum-exp output and merge_attention_states: the lse against a direct
// double computation from the policy's hooks (prefill and split-key decode, every compiled
// backend), key shards merged back into the unsharded result (the recipe of merge.hpp), and
// the merge's own edge cases and error paths.

#include <cmath>
#include <limits>
#include <posenc/attention/flash.hpp>
#include <posenc/attention/merge.hpp>
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/encoding/alibi.hpp>
#include <posenc/encoding/t5_bias.hpp>
#include <string>
#include <vector>

#include "attention_support.hpp"
#include "backend/backends.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;
using posenc_test::random_matrix;
using posenc_test::rmat;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

struct sizes {
  Index batch, heads, kv_heads, len_q, len_k, dim, dim_v;
};

/// The expected lse(b, h, i) in double: the policy's hooks applied as the reference kernel
/// applies them (transformed keys and query, scale, bias, causal and padding masks).
template <class Policy>
rmat<double> expected_lse(const sizes& z, const rmat<float>& q, const rmat<float>& k,
                          const posenc::attention_config& cfg, const Policy& pol) {
  posenc::attention_shape s{z.batch, z.heads, z.kv_heads, z.len_q,
                            z.len_k, z.dim,   z.dim_v,    cfg.q_offset};
  pol.check(s);
  const double scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(double(z.dim));
  rmat<double> out(z.batch * z.heads, z.len_q);
  for (Index b = 0; b < z.batch; ++b)
    for (Index h = 0; h < z.heads; ++h) {
      auto head = pol.head(b, h, s);
      const Index g = h / (z.heads / z.kv_heads);
      posenc::dmatrix kd = k.block(b * z.len_k, g * z.dim, z.len_k, z.dim).cast<double>();
      head.transform_keys(kd);
      for (Index i = 0; i < z.len_q; ++i) {
        const Index pos = cfg.q_offset + i;
        posenc::drow qd = q.block(b * z.len_q + i, h * z.dim, 1, z.dim).cast<double>();
        head.transform_query(pos, qd);
        Index lim = z.len_k;
        if (!cfg.mask.key_lengths.empty()) lim = cfg.mask.key_lengths[std::size_t(b)];
        if (cfg.mask.causal) lim = std::min(lim, pos + 1);
        double mx = -inf;
        std::vector<double> logit;
        for (Index j = 0; j < lim; ++j) {
          logit.push_back(scale * qd.dot(kd.row(j)) + head.bias(pos, j));
          mx = std::max(mx, logit.back());
        }
        double sum = 0;
        for (double x : logit) sum += std::exp(x - mx);
        out(b * z.heads + h, i) = logit.empty() ? -inf : mx + std::log(sum);
      }
    }
  return out;
}

struct run_result {
  rmat<float> out;  // [B·Lq, H·dv]
  rmat<float> lse;  // [B·H, Lq]
};

template <class Backend = posenc::default_backend, class Policy>
run_result run_lse(const sizes& z, const rmat<float>& q, const rmat<float>& k, const rmat<float>& v,
                   const posenc::attention_config& cfg, const Policy& pol, Index threads = 1) {
  run_result r{rmat<float>::Constant(z.batch * z.len_q, z.heads * z.dim_v, 7.0f),
               rmat<float>::Constant(z.batch * z.heads, z.len_q, 7.0f)};
  posenc::flash_multi_head_attention<Backend>(
      posenc::view_bshd(q.data(), z.batch, z.len_q, z.heads, z.dim),
      posenc::view_bshd(k.data(), z.batch, z.len_k, z.kv_heads, z.dim),
      posenc::view_bshd(v.data(), z.batch, z.len_k, z.kv_heads, z.dim_v),
      posenc::view_bshd(r.out.data(), z.batch, z.len_q, z.heads, z.dim_v),
      posenc::view_bhs(r.lse.data(), z.batch, z.heads, z.len_q), cfg, pol,
      posenc::flash_options{threads});
  return r;
}

/// |a - b| <= tol·(1 + |b|) everywhere, -inf where b is -inf.
void check_lse(const rmat<float>& got, const rmat<double>& want, double tol) {
  for (Index e = 0; e < want.size(); ++e) {
    const double w = want.data()[e], g = got.data()[e];
    INFO("element " << e << ": got " << g << ", want " << w);
    if (w == -inf)
      CHECK(g == -inf);
    else
      CHECK(std::abs(g - w) <= tol * (1.0 + std::abs(w)));
  }
}

template <class F>
void for_each_backend(F&& f) {
  f(posenc::backend::scalar{});
  posenc_test::for_each_simd_backend(f);
}

posenc::alibi_policy alibi(Index heads) { return posenc::alibi_policy(heads); }

posenc::t5_bias_policy t5(Index heads) {
  posenc::t5_bucket_config c;
  c.num_buckets = 16;
  c.max_distance = 40;
  c.bidirectional = true;
  return posenc::t5_bias_policy(random_matrix(16, heads, 77), c);
}

}  // namespace

TEST_CASE("flash writes each row's log-sum-exp (prefill, decode, every backend)", "[merge][lse]") {
  // prefill (lane kernel and portable kernel) and split-key decode (<= 8 rows, > 1024 keys)
  const std::vector<sizes> shapes = {{2, 4, 2, 37, 150, 16, 12}, {1, 4, 1, 3, 2500, 8, 8}};
  for (const sizes& z : shapes) {
    const rmat<float> q = random_matrix<float>(z.batch * z.len_q, z.heads * z.dim, 1);
    const rmat<float> k = random_matrix<float>(z.batch * z.len_k, z.kv_heads * z.dim, 2);
    const rmat<float> v = random_matrix<float>(z.batch * z.len_k, z.kv_heads * z.dim_v, 3);
    posenc::attention_config cfg;
    cfg.mask.causal = true;
    cfg.q_offset = z.len_k - z.len_q - 4;
    if (z.batch > 1) cfg.mask.key_lengths = {z.len_k, 61};
    for_each_backend([&](auto tag) {
      using Tag = decltype(tag);
      INFO("Lq " << z.len_q << ", Lk " << z.len_k << ", backend " << Tag::name());
      SECTION("no positions") {
        const auto r = run_lse<Tag>(z, q, k, v, cfg, posenc::no_position_policy{}, 2);
        check_lse(r.lse, expected_lse(z, q, k, cfg, posenc::no_position_policy{}), 2e-6);
      }
      SECTION("ALiBi") {
        const auto r = run_lse<Tag>(z, q, k, v, cfg, alibi(z.heads));
        check_lse(r.lse, expected_lse(z, q, k, cfg, alibi(z.heads)), 2e-6);
      }
      SECTION("T5") {
        const auto r = run_lse<Tag>(z, q, k, v, cfg, t5(z.heads));
        check_lse(r.lse, expected_lse(z, q, k, cfg, t5(z.heads)), 2e-6);
      }
      SECTION("RoPE") {
        const posenc::rotary_policy rope(z.dim);
        const auto r = run_lse<Tag>(z, q, k, v, cfg, rope);
        check_lse(r.lse, expected_lse(z, q, k, cfg, rope), 2e-6);
      }
    });
  }
}

TEST_CASE("lse: -inf for a row that sees no key, NaN for a NaN row; output unchanged",
          "[merge][lse]") {
  const sizes z{2, 2, 2, 5, 9, 4, 4};
  rmat<float> q = random_matrix<float>(z.batch * z.len_q, z.heads * z.dim, 4);
  const rmat<float> k = random_matrix<float>(z.batch * z.len_k, z.kv_heads * z.dim, 5);
  const rmat<float> v = random_matrix<float>(z.batch * z.len_k, z.kv_heads * z.dim_v, 6);
  posenc::attention_config cfg;
  cfg.mask.key_lengths = {0, z.len_k};
  q(z.len_q + 2, 1) = std::numeric_limits<float>::quiet_NaN();  // batch 1, row 2, head 0
  const auto r = run_lse(z, q, k, v, cfg, posenc::no_position_policy{});
  for (Index i = 0; i < z.len_q; ++i) {
    CHECK(r.lse(0, i) == -inf);  // batch 0: key length 0
    CHECK(r.lse(1, i) == -inf);
    CHECK(r.out.row(i).isZero(0));
  }
  CHECK(std::isnan(r.lse(2, 2)));  // batch 1, head 0, row 2
  CHECK(std::isfinite(r.lse(3, 2)));
  CHECK(std::isfinite(r.lse(2, 1)));
  // the output is the call without lse, bit for bit
  rmat<float> plain = rmat<float>::Zero(r.out.rows(), r.out.cols());
  posenc::flash_multi_head_attention(
      posenc::view_bshd(q.data(), z.batch, z.len_q, z.heads, z.dim),
      posenc::view_bshd(k.data(), z.batch, z.len_k, z.kv_heads, z.dim),
      posenc::view_bshd(v.data(), z.batch, z.len_k, z.kv_heads, z.dim_v),
      posenc::view_bshd(plain.data(), z.batch, z.len_q, z.heads, z.dim_v), cfg);
  CHECK(
      ((r.out.array() == plain.array()) || (r.out.array().isNaN() && plain.array().isNaN())).all());
}

TEST_CASE("key shards merged with merge_attention_states equal the unsharded call",
          "[merge][shards]") {
  // The recipe of merge.hpp: shard c holds keys [s_c, s_c + n_c); its call sees its own keys
  // at 0..n_c-1 and queries at q_offset - s_c; under a causal mask query rows before s_c
  // are left out of the shard's call.
  const sizes z{2, 4, 2, 40, 300, 16, 8};
  const rmat<float> q = random_matrix<float>(z.batch * z.len_q, z.heads * z.dim, 7);
  const rmat<float> k = random_matrix<float>(z.batch * z.len_k, z.kv_heads * z.dim, 8);
  const rmat<float> v = random_matrix<float>(z.batch * z.len_k, z.kv_heads * z.dim_v, 9);
  const std::vector<Index> bounds = {0, 97, 270, 300};  // three shards

  auto check_policy = [&](const auto& pol, bool causal, Index q_offset) {
    posenc::attention_config cfg;
    cfg.mask.causal = causal;
    cfg.q_offset = q_offset;
    const auto whole = run_lse(z, q, k, v, cfg, pol);

    // accumulator: no key yet (lse -inf, out 0)
    rmat<float> acc = rmat<float>::Zero(whole.out.rows(), whole.out.cols());
    rmat<float> acc_lse = rmat<float>::Constant(whole.lse.rows(), whole.lse.cols(), -INFINITY);
    const auto acc_v = posenc::view_bshd(acc.data(), z.batch, z.len_q, z.heads, z.dim_v);
    const auto acc_l = posenc::view_bhs(acc_lse.data(), z.batch, z.heads, z.len_q);
    for (std::size_t c = 0; c + 1 < bounds.size(); ++c) {
      const Index s0 = bounds[c], n = bounds[c + 1] - s0;
      // first query row that can see key s0 (all rows without a causal mask)
      const Index first = causal ? std::max<Index>(0, s0 - q_offset) : 0;
      if (first >= z.len_q) continue;
      const Index rows = z.len_q - first;
      rmat<float> part = rmat<float>::Zero(acc.rows(), acc.cols());
      rmat<float> part_lse = rmat<float>::Constant(acc_lse.rows(), acc_lse.cols(), -INFINITY);
      posenc::attention_config sc;
      sc.mask.causal = causal;
      // (without positions or a causal mask the offset means nothing: 0)
      sc.q_offset = causal ? q_offset + first - s0 : 0;
      const auto qs = posenc::view_bshd(q.data(), z.batch, z.len_q, z.heads, z.dim);
      const auto ks = posenc::view_bshd(k.data(), z.batch, z.len_k, z.kv_heads, z.dim);
      const auto vs = posenc::view_bshd(v.data(), z.batch, z.len_k, z.kv_heads, z.dim_v);
      const auto ps = posenc::view_bshd(part.data(), z.batch, z.len_q, z.heads, z.dim_v);
      const auto pl = posenc::view_bhs(part_lse.data(), z.batch, z.heads, z.len_q);
      // rows [first, Lq) of q and of the outputs, keys [s0, s0 + n)
      auto rows_of = [&](const auto& x, Index r0, Index count) {
        using V = std::decay_t<decltype(x)>;
        return V(x.data() + r0 * x.stride(1), {x.extent(0), count, x.extent(2), x.extent(3)},
                 x.strides());
      };
      const auto pls =
          posenc::strided_view<float, 3>(pl.data() + first, {z.batch, z.heads, rows}, pl.strides());
      posenc::flash_multi_head_attention(rows_of(qs, first, rows), rows_of(ks, s0, n),
                                         rows_of(vs, s0, n), rows_of(ps, first, rows), pls, sc,
                                         pol);
      posenc::merge_attention_states(acc_v, acc_l, ps, pl, acc_v, acc_l);
    }
    const double scale = whole.out.cwiseAbs().maxCoeff();
    CHECK((acc - whole.out).cwiseAbs().maxCoeff() <= 4e-6 * scale);
    for (Index e = 0; e < acc_lse.size(); ++e) {
      const double w = whole.lse.data()[e], g = acc_lse.data()[e];
      if (w == -inf)
        CHECK(g == -inf);
      else
        CHECK(std::abs(g - w) <= 4e-6 * (1 + std::abs(w)));
    }
  };
  SECTION("no positions, not causal") { check_policy(posenc::no_position_policy{}, false, 0); }
  SECTION("ALiBi, causal, offset") { check_policy(alibi(z.heads), true, 120); }
  SECTION("T5, causal, offset") { check_policy(t5(z.heads), true, 200); }
  SECTION("RoPE, causal, offset") { check_policy(posenc::rotary_policy(z.dim), true, 150); }
  SECTION("RoPE, decode rows after every key") {
    check_policy(posenc::rotary_policy(z.dim), true, 400);
  }
}

TEST_CASE("merge_attention_states: weights, empty sides, NaN, in place, double", "[merge]") {
  // one row, dv = 2, in [1, 1, 1, 2] and [1, 1, 1] views
  auto merge1 = [](float oa0, float la, float ob0, float lb, float& out0, float& lse) {
    float oa[2] = {oa0, 1.0f}, ob[2] = {ob0, 1.0f}, o[2] = {0, 0};
    posenc::merge_attention_states(posenc::view_bshd(static_cast<const float*>(oa), 1, 1, 1, 2),
                                   posenc::view_bhs(&la, 1, 1, 1),
                                   posenc::view_bshd(static_cast<const float*>(ob), 1, 1, 1, 2),
                                   posenc::view_bhs(&lb, 1, 1, 1), posenc::view_bshd(o, 1, 1, 1, 2),
                                   posenc::view_bhs(&lse, 1, 1, 1));
    out0 = o[0];
    return o[1];
  };
  float o = 0, l = 0;
  // equal lse: the mean, lse + log 2
  CHECK(merge1(1.0f, 0.5f, 3.0f, 0.5f, o, l) == Approx(1.0f));
  CHECK(o == Approx(2.0f));
  CHECK(l == Approx(0.5 + std::log(2.0)));
  // weights e^la : e^lb
  merge1(1.0f, std::log(3.0f), 5.0f, 0.0f, o, l);
  CHECK(o == Approx(0.75 * 1 + 0.25 * 5));
  CHECK(l == Approx(std::log(4.0)));
  // an empty side drops out even when its output holds NaN; two empty sides stay empty
  merge1(std::nanf(""), -INFINITY, 5.0f, 2.0f, o, l);
  CHECK(o == 5.0f);
  CHECK(l == 2.0f);
  CHECK(merge1(1.0f, -INFINITY, 2.0f, -INFINITY, o, l) == 0.0f);
  CHECK(o == 0.0f);
  CHECK(l == -INFINITY);
  // NaN on either side: NaN row
  merge1(1.0f, std::nanf(""), 2.0f, 0.0f, o, l);
  CHECK(std::isnan(o));
  CHECK(std::isnan(l));
  // huge lse differences do not overflow
  merge1(1.0f, 1e30f, 2.0f, -1e30f, o, l);
  CHECK(o == 1.0f);
  CHECK(l == 1e30f);

  // commutative; in place into either side; double lse with half outputs
  const rmat<float> a = random_matrix<float>(6, 3 * 4, 11), b = random_matrix<float>(6, 3 * 4, 12);
  rmat<float> la = random_matrix<float>(2 * 3, 3, 13), lb = random_matrix<float>(2 * 3, 3, 14);
  rmat<float> ab(6, 12), ba(6, 12), lab(6, 3), lba(6, 3);
  auto v4 = [](auto& m) { return posenc::view_bshd(m.data(), 2, 3, 3, 4); };
  auto v3 = [](auto& m) { return posenc::view_bhs(m.data(), 2, 3, 3); };
  posenc::merge_attention_states(v4(a), v3(la), v4(b), v3(lb), v4(ab), v3(lab));
  posenc::merge_attention_states(v4(b), v3(lb), v4(a), v3(la), v4(ba), v3(lba));
  CHECK((ab - ba).cwiseAbs().maxCoeff() <= 1e-7);
  CHECK((lab - lba).cwiseAbs().maxCoeff() <= 1e-7);
  rmat<float> acc = a, acc_l = la;
  posenc::merge_attention_states(v4(acc), v3(acc_l), v4(b), v3(lb), v4(acc), v3(acc_l));
  CHECK(acc == ab);
  CHECK(acc_l == lab);
  rmat<Eigen::half> ah = a.cast<Eigen::half>(), bh = b.cast<Eigen::half>(), oh(6, 12);
  rmat<double> lad = la.cast<double>(), lbd = lb.cast<double>(), lod(6, 3);
  posenc::merge_attention_states(v4(ah), v3(lad), v4(bh), v3(lbd), v4(oh), v3(lod));
  CHECK((oh.cast<float>() - ab).cwiseAbs().maxCoeff() <= 2e-3);
  CHECK((lod.cast<float>() - lab).cwiseAbs().maxCoeff() <= 1e-6);
}

TEST_CASE("merge_attention_states and the lse output reject bad views", "[merge][errors]") {
  rmat<float> a = rmat<float>::Zero(6, 12), b = a, o = a;
  rmat<float> la = rmat<float>::Zero(6, 3), lb = la, lo = la;
  auto v4 = [](auto& m) { return posenc::view_bshd(m.data(), 2, 3, 3, 4); };
  auto v3 = [](auto& m) { return posenc::view_bhs(m.data(), 2, 3, 3); };
  POSENC_REQUIRE_ERROR(
      posenc::merge_attention_states(v4(a), v3(la), posenc::view_bshd(b.data(), 2, 3, 2, 4), v3(lb),
                                     v4(o), v3(lo)),
      "merge_attention_states: o_b extents");
  POSENC_REQUIRE_ERROR(posenc::merge_attention_states(v4(a), posenc::view_bhs(la.data(), 2, 2, 3),
                                                      v4(b), v3(lb), v4(o), v3(lo)),
                       "lse_a = extents mismatch");
  // outputs that partly overlap an input: neither in place nor disjoint
  rmat<float> big = rmat<float>::Zero(7, 12), big_l = rmat<float>::Zero(7, 3);
  POSENC_REQUIRE_ERROR(
      posenc::merge_attention_states(v4(big), v3(la), v4(b), v3(lb),
                                     posenc::view_bshd(big.data() + 1, 2, 3, 3, 4), v3(lo)),
      "shares memory with o_a");
  POSENC_REQUIRE_ERROR(posenc::merge_attention_states(v4(a), v3(big_l), v4(b), v3(lb), v4(o),
                                                      posenc::view_bhs(big_l.data() + 1, 2, 3, 3)),
                       "shares memory with lse_a");
  // in place is allowed
  CHECK_NOTHROW(posenc::merge_attention_states(v4(a), v3(la), v4(b), v3(lb), v4(a), v3(la)));
  const rmat<float> q = random_matrix<float>(6, 12, 1), k = random_matrix<float>(10, 12, 2);
  POSENC_REQUIRE_ERROR(
      posenc::flash_multi_head_attention(
          posenc::view_bshd(q.data(), 2, 3, 3, 4), posenc::view_bshd(k.data(), 2, 5, 3, 4),
          posenc::view_bshd(k.data(), 2, 5, 3, 4), v4(o), posenc::view_bhs(lo.data(), 2, 3, 2)),
      "flash_multi_head_attention: lse = extents mismatch");
}
