// Transformer-XL relative attention (Dai et al. 2019): sinusoid R, rel_shift against the
// direct O(L^2) formulation, goldens from tests/reference/relative.py, segment memory,
// properties, errors.

#include <limits>
#include <posenc/attention/attention.hpp>
#include <posenc/attention/multi_head.hpp>
#include <posenc/encoding/transformer_xl.hpp>
#include <random>
#include <string>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using dmat = posenc::attention_matrix<double>;
using posenc_test::normal_matrix;
using fmat = posenc::attention_matrix<float>;

namespace {

dmat g(const std::string& c, const std::string& what) {
  return posenc_test::golden_matrix<double>("relative_txl_" + c + "_" + what + ".npy");
}

posenc::attention_config options(bool causal, Index q_offset) {
  posenc::attention_config opt;
  opt.mask.causal = causal;
  opt.q_offset = q_offset;
  return opt;
}

// The position key P_dist of one head, straight from the definition (one distance at a time).
posenc::drow position_key(const posenc::transformer_xl_policy<double>& xl, Index head, Index dist) {
  const dmat r = posenc::txl_sinusoid<double>(xl.dim_r(), dist, 1, xl.base());
  if (!xl.projected()) return r.row(0);
  return r.row(0) * xl.w_r().middleCols(head * xl.dim(), xl.dim());
}

// Terms (b) + (d), direct O(L^2): (q_i + v) . P_{q_offset + i - j}.
dmat direct_position_scores(const posenc::transformer_xl_policy<double>& xl, Index head,
                            const dmat& q, Index lk, Index q_offset) {
  dmat s(q.rows(), lk);
  for (Index i = 0; i < q.rows(); ++i)
    for (Index j = 0; j < lk; ++j)
      s(i, j) = (q.row(i) + xl.v().row(head)).dot(position_key(xl, head, q_offset + i - j));
  return s;
}

posenc::transformer_xl_policy<double> random_policy(Index heads, Index d, Index d_r,
                                                    std::mt19937& gen) {
  posenc::transformer_xl_policy<double> xl(heads, d, d_r);
  xl.u() = normal_matrix(heads, d, gen);
  xl.v() = normal_matrix(heads, d, gen);
  if (d_r > 0) xl.w_r() = 0.5 * normal_matrix(d_r, heads * d, gen);
  return xl;
}

}  // namespace

TEST_CASE("transformer-xl sinusoid R matches the reference", "[attention][txl][golden]") {
  // Golden: distances -5..12 ascending, d_R = 8; txl_sinusoid lists them descending.
  const dmat ref = posenc_test::golden_matrix<double>("relative_txl_r.npy");
  REQUIRE(ref.rows() == 18);
  const dmat r = posenc::txl_sinusoid<double>(8, 12, 18);
  CHECK(posenc_test::max_abs_diff(r, ref.colwise().reverse()) < 1e-15);
  const fmat rf = posenc::txl_sinusoid<float>(8, 12, 18);
  CHECK(posenc_test::max_abs_diff(rf, ref.colwise().reverse()) < 1e-7);
  // Row 0 of distance 0: sin block zeros, cos block ones.
  const dmat z = posenc::txl_sinusoid<double>(6, 0, 1);
  CHECK(z.leftCols(3).cwiseAbs().maxCoeff() == 0.0);
  CHECK((z.rightCols(3).array() == 1.0).all());
  CHECK(posenc::txl_sinusoid<double>(4, 3, 0).rows() == 0);
}

TEST_CASE("rel_shift equals the direct O(L^2) formulation", "[attention][txl][rel_shift]") {
  std::mt19937 gen(21);
  for (Index lq : {1, 3, 5})
    for (Index mem : {0, 2, 4}) {
      const Index lk = lq + mem;
      INFO("Lq " << lq << " memory " << mem);
      // Dai et al.'s shift: column m of x holds distance Lk-1-m.
      const dmat x = normal_matrix(lq, lk, gen);
      const dmat y = posenc::rel_shift(x);
      REQUIRE(y.rows() == lq);
      REQUIRE(y.cols() == lk);
      for (Index i = 0; i < lq; ++i)
        for (Index j = 0; j <= mem + i; ++j) {
          const Index dist = mem + i - j;
          CHECK(y(i, j) == x(i, lk - 1 - dist));
        }
      // The full shift is exact everywhere, for any query offset.
      const dmat xf = normal_matrix(lq, lq + lk - 1, gen);
      const dmat yf = posenc::rel_shift_full(xf, lk);
      for (Index i = 0; i < lq; ++i)
        for (Index j = 0; j < lk; ++j) CHECK(yf(i, j) == xf(i, j + lq - 1 - i));
    }
}

TEST_CASE("position terms via rel_shift, the policy and the direct formulation agree",
          "[attention][txl][rel_shift]") {
  std::mt19937 gen(22);
  for (Index d_r : {0, 6}) {
    INFO("d_R " << d_r);
    const Index heads = 2, d = 4, lq = 5, mem = 3, lk = lq + mem;
    const auto xl = random_policy(heads, d, d_r, gen);
    for (Index h = 0; h < heads; ++h) {
      const dmat q = normal_matrix(lq, d, gen);
      const dmat direct = direct_position_scores(xl, h, q, lk, mem);
      // Paper form: (Q + v) P^T over distances Lk-1 .. 0, then rel_shift (causal region).
      const dmat bd_raw =
          (q.rowwise() + xl.v().row(h)) * xl.position_keys(h, lk - 1, lk).transpose();
      const dmat bd = posenc::rel_shift(bd_raw);
      for (Index i = 0; i < lq; ++i)
        for (Index j = 0; j <= mem + i; ++j) CHECK(std::abs(bd(i, j) - direct(i, j)) < 1e-12);
      // Full range: distances q_offset+Lq-1 .. q_offset-(Lk-1), every (i, j), non-causal.
      for (Index q_offset : {Index(0), Index(2), mem}) {
        const dmat dir = direct_position_scores(xl, h, q, lk, q_offset);
        const dmat full_raw = (q.rowwise() + xl.v().row(h)) *
                              xl.position_keys(h, q_offset + lq - 1, lq + lk - 1).transpose();
        CHECK(posenc_test::max_abs_diff(posenc::rel_shift_full(full_raw, lk), dir) < 1e-12);
        posenc::attention_shape s;
        s.heads = heads;
        s.len_q = lq;
        s.len_k = lk;
        s.dim = d;
        s.dim_v = d;
        s.q_offset = q_offset;
        CHECK(posenc_test::max_abs_diff(posenc::materialize_score(xl, 0, h, s, q), dir) < 1e-12);
      }
    }
  }
}

TEST_CASE("transformer-xl over many key chunks equals attention with the direct terms as a bias",
          "[attention][txl][rel_shift]") {
  // Lk = 150 spans three of the policy's lazily computed key chunks; the same logits as a
  // plain attention with additive bias scale * (u . k_j + (q_i + v) . P_{pos-j}).
  std::mt19937 gen(26);
  const Index lq = 9, lk = 150, d = 4, q_offset = 141;
  const auto xl = random_policy(1, d, 6, gen);
  const dmat q = normal_matrix(lq, d, gen), k = normal_matrix(lk, d, gen),
             v = normal_matrix(lk, 3, gen);
  const double scale = 0.5;
  const dmat bd = direct_position_scores(xl, 0, q, lk, q_offset);
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    auto opt = options(causal, q_offset);
    opt.scale = scale;
    const dmat out = posenc::attention(q, k, v, opt, xl);
    opt.mask.additive = scale * (bd.rowwise() + (k * xl.u().row(0).transpose()).transpose());
    CHECK(posenc_test::max_abs_diff(out, posenc::attention(q, k, v, opt)) < 1e-12);
  }
  // Keys asked for in any order.
  posenc::attention_shape s;
  s.len_q = lq;
  s.len_k = lk;
  s.dim = d;
  s.dim_v = 3;
  s.q_offset = q_offset;
  auto h = xl.head(0, 0, s);
  for (Index i = 0; i < lq; ++i) {
    h.begin_row(q_offset + i, q.row(i));
    for (Index j : {Index(100), Index(3), Index(149), Index(64), Index(63), Index(0)})
      CHECK(std::abs(h.score(q_offset + i, j) - bd(i, j)) < 1e-12);
  }
}

TEST_CASE("transformer-xl decoding token by token equals one causal pass (sinusoid cache)",
          "[attention][txl][memory]") {
  std::mt19937 gen(27);
  const Index l = 45, heads = 2, d = 4;
  const auto xl = random_policy(heads, d, 6, gen);
  const dmat q = normal_matrix(l, heads * d, gen), k = normal_matrix(l, heads * d, gen),
             v = normal_matrix(l, heads * d, gen);
  xl.clear_cache();
  CHECK(xl.cached_distances() == std::pair<Index, Index>{0, 1});
  const dmat full = posenc::multi_head_attention(q, k, v, heads, heads, options(true, 0), xl);
  xl.clear_cache();
  Index grown = 0, last_hi = 0;
  for (Index t = 0; t < l; ++t) {
    const dmat step =
        posenc::multi_head_attention(dmat(q.row(t)), dmat(k.topRows(t + 1)), dmat(v.topRows(t + 1)),
                                     heads, heads, options(true, t), xl);
    CHECK(posenc_test::max_abs_diff(step, full.row(t)) < 1e-12);
    const auto range = xl.cached_distances();
    CHECK(range.first >= t);  // covers distances t .. 0
    CHECK(range.second <= 0);
    if (range.first != last_hi) ++grown;
    last_hi = range.first;
  }
  CHECK(grown < 10);  // extended now and then, not at every step
  // A head built without the cache gives the same numbers as one built from it.
  posenc::attention_shape s;
  s.heads = heads;
  s.len_q = 3;
  s.len_k = 20;
  s.dim = d;
  s.dim_v = d;
  s.q_offset = 17;
  xl.check(s);
  auto cached = xl.head(0, 1, s);
  const auto copy = xl;
  copy.clear_cache();
  auto fresh = copy.head(0, 1, s);
  CHECK((cached.p - fresh.p).cwiseAbs().maxCoeff() == 0.0);
  CHECK((cached.r - fresh.r).cwiseAbs().maxCoeff() == 0.0);
}

TEST_CASE("transformer-xl attention matches the reference: terms (a)-(d)",
          "[attention][txl][golden]") {
  SECTION("two heads, W_R, memory of 3, causal") {
    const dmat q = g("mem", "q"), k = g("mem", "k"), v = g("mem", "v");
    posenc::transformer_xl_policy<double> xl(2, 4, 6);
    xl.u() = g("mem", "u");
    xl.v() = g("mem", "vbias");
    xl.w_r() = g("mem", "w_r");
    const auto opt = options(true, 3);
    const dmat out = posenc::multi_head_attention(q, k, v, 2, 2, opt, xl);
    CHECK(posenc_test::max_abs_diff(out, g("mem", "out")) < 1e-12);

    posenc::transformer_xl_policy<float> xf(2, 4, 6);
    xf.u() = g("mem", "u").cast<float>();
    xf.v() = g("mem", "vbias").cast<float>();
    xf.w_r() = g("mem", "w_r").cast<float>();
    const fmat out_f = posenc::multi_head_attention(fmat(q.cast<float>()), fmat(k.cast<float>()),
                                                    fmat(v.cast<float>()), 2, 2, opt, xf);
    CHECK(posenc_test::max_abs_diff(out_f, g("mem", "out")) < 1e-5);
  }
  SECTION("one head, P = R, bidirectional") {
    const dmat q = g("bi", "q"), k = g("bi", "k"), v = g("bi", "v");
    posenc::transformer_xl_policy<double> xl(1, 4);
    xl.u() = g("bi", "u");
    xl.v() = g("bi", "vbias");
    dmat w;
    const dmat out = posenc::attention_with_weights(q, k, v, w, {}, xl);
    CHECK(posenc_test::max_abs_diff(out, g("bi", "out")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(w, g("bi", "weights")) < 1e-12);
  }
}

TEST_CASE("transformer-xl with memory equals the full computation over [memory; segment]",
          "[attention][txl][memory][property]") {
  std::mt19937 gen(23);
  const Index heads = 2, d = 4, seg = 4, segments = 3, total = seg * segments;
  const auto xl = random_policy(heads, d, 6, gen);
  const dmat q = normal_matrix(total, heads * d, gen), k = normal_matrix(total, heads * d, gen),
             v = normal_matrix(total, heads * d, gen);
  const dmat full = posenc::multi_head_attention(q, k, v, heads, heads, options(true, 0), xl);

  SECTION("memory holding every previous segment") {
    posenc::txl_memory<double> mem(total, heads * d, heads * d);
    for (Index s = 0; s < segments; ++s) {
      const dmat qs = q.middleRows(s * seg, seg), ks = k.middleRows(s * seg, seg),
                 vs = v.middleRows(s * seg, seg);
      CHECK(mem.q_offset() == s * seg);
      const dmat out =
          posenc::multi_head_attention(qs, mem.keys_with(ks), mem.values_with(vs), heads, heads,
                                       options(true, mem.q_offset()), xl);
      CHECK(posenc_test::max_abs_diff(out, full.middleRows(s * seg, seg)) < 1e-12);
      mem.update(ks, vs);
    }
    CHECK(mem.size() == total);
  }
  SECTION("memory shorter than the history: the window, at the same distances") {
    // With mem_len = 3 the last segment sees keys 5..11; positions only enter through
    // i - j, so this equals the full computation with keys before the window masked.
    const Index mem_len = 3;
    posenc::txl_memory<double> mem(mem_len, heads * d, heads * d);
    for (Index s = 0; s < segments; ++s) {
      const dmat qs = q.middleRows(s * seg, seg), ks = k.middleRows(s * seg, seg),
                 vs = v.middleRows(s * seg, seg);
      const dmat out =
          posenc::multi_head_attention(qs, mem.keys_with(ks), mem.values_with(vs), heads, heads,
                                       options(true, mem.q_offset()), xl);
      const Index first_key = s * seg - mem.size();
      auto opt = options(true, s * seg);
      opt.mask.allowed = posenc::bool_mask::Constant(seg, total, true);
      opt.mask.allowed.leftCols(first_key).setConstant(false);
      const dmat ref = posenc::multi_head_attention(qs, k, v, heads, heads, opt, xl);
      CHECK(posenc_test::max_abs_diff(out, ref) < 1e-12);
      mem.update(ks, vs);
      CHECK(mem.size() == std::min(mem_len, (s + 1) * seg));
      CHECK(posenc_test::max_abs_diff(mem.keys(),
                                      k.middleRows((s + 1) * seg - mem.size(), mem.size())) == 0.0);
    }
    mem.clear();
    CHECK(mem.size() == 0);
    CHECK(mem.keys().cols() == heads * d);
  }
}

TEST_CASE("transformer-xl depends on positions only through i - j", "[attention][txl][property]") {
  std::mt19937 gen(24);
  const Index lq = 5, lk = 7, d = 4, offset = 2, shift = 5;
  const auto xl = random_policy(1, d, 0, gen);
  const dmat q = normal_matrix(lq, d, gen), k = normal_matrix(lk, d, gen),
             v = normal_matrix(lk, d, gen);
  for (bool causal : {false, true}) {
    const dmat base = posenc::attention(q, k, v, options(causal, offset), xl);
    dmat k2(lk + shift, d), v2(lk + shift, d);
    k2 << normal_matrix(shift, d, gen), k;
    v2 << normal_matrix(shift, d, gen), v;
    auto opt = options(causal, offset + shift);
    opt.mask.allowed = posenc::bool_mask::Constant(lq, lk + shift, true);
    opt.mask.allowed.leftCols(shift).setConstant(false);
    CHECK(posenc_test::max_abs_diff(base, posenc::attention(q, k2, v2, opt, xl)) < 1e-12);
  }
}

TEST_CASE("transformer-xl attention is not permutation-equivariant", "[attention][txl][property]") {
  std::mt19937 gen(25);
  const Index l = 7, d = 4;
  const dmat q = normal_matrix(l, d, gen), k = normal_matrix(l, d, gen),
             v = normal_matrix(l, d, gen);
  Eigen::PermutationMatrix<Eigen::Dynamic> perm(l);
  perm.setIdentity();
  std::swap(perm.indices()(1), perm.indices()(6));
  std::swap(perm.indices()(0), perm.indices()(3));
  // No position terms (W_R = 0, only u): equivariant, so the check below can tell.
  auto xl = random_policy(1, d, 4, gen);
  const dmat w = xl.w_r();
  xl.w_r().setZero();
  {
    const dmat a = perm * posenc::attention(q, k, v, {}, xl);
    const dmat b = posenc::attention(dmat(perm * q), dmat(perm * k), dmat(perm * v), {}, xl);
    CHECK(posenc_test::max_abs_diff(a, b) < 1e-12);
  }
  xl.w_r() = w;
  const dmat a = perm * posenc::attention(q, k, v, {}, xl);
  const dmat b = posenc::attention(dmat(perm * q), dmat(perm * k), dmat(perm * v), {}, xl);
  CHECK(posenc_test::max_abs_diff(a, b) > 1e-3);
}

TEST_CASE("transformer-xl sinusoid cache after a far jump stays small",
          "[attention][txl][memory]") {
  // A call at a far offset then one near 0 (or the reverse) must not cache every distance
  // in between (that was 2^40 rows: an allocation failure).
  std::mt19937 gen(33);
  const Index heads = 1, d = 4;
  const auto xl = random_policy(heads, d, 6, gen);
  const dmat q = normal_matrix(3, d, gen), k = normal_matrix(5, d, gen),
             v = normal_matrix(5, d, gen);
  xl.clear_cache();
  const dmat far =
      posenc::multi_head_attention(q, k, v, heads, heads, options(false, Index(1) << 40), xl);
  const dmat near = posenc::multi_head_attention(q, k, v, heads, heads, options(true, 2), xl);
  const auto range = xl.cached_distances();
  CHECK(range.first - range.second < 1000);
  CHECK(range.first >= 4);  // covers the near call's distances 4 .. -2
  CHECK(range.second <= -2);
  // The same numbers as with a fresh cache.
  xl.clear_cache();
  CHECK(posenc_test::max_abs_diff(near, posenc::multi_head_attention(q, k, v, heads, heads,
                                                                     options(true, 2), xl)) == 0.0);
  xl.clear_cache();
  CHECK(posenc_test::max_abs_diff(
            far, posenc::multi_head_attention(q, k, v, heads, heads, options(false, Index(1) << 40),
                                              xl)) == 0.0);
}

TEST_CASE("transformer-xl errors name the parameter and its value", "[attention][txl][error]") {
  POSENC_REQUIRE_ERROR(posenc::txl_inv_freq(7), "dim = 7");
  POSENC_REQUIRE_ERROR(posenc::txl_inv_freq(0), "dim = 0");
  POSENC_REQUIRE_ERROR(posenc::txl_inv_freq(4, 1.0), "base = 1");
  POSENC_REQUIRE_ERROR(posenc::txl_sinusoid<double>(4, 0, -1), "count = -1");
  POSENC_REQUIRE_ERROR(posenc::rel_shift(dmat(dmat::Zero(4, 3))), "x.rows() = 4");
  POSENC_REQUIRE_ERROR(posenc::rel_shift_full(dmat(dmat::Zero(2, 4)), 4), "x.cols() = 4");
  POSENC_REQUIRE_ERROR(posenc::rel_shift_full(dmat(dmat::Zero(2, 1)), 0), "lk = 0");

  using xl_t = posenc::transformer_xl_policy<double>;
  POSENC_REQUIRE_ERROR(xl_t(0, 4), "heads = 0");
  POSENC_REQUIRE_ERROR(xl_t(2, 0), "dim = 0");
  POSENC_REQUIRE_ERROR(xl_t(2, 4, -1), "dim_r = -1");
  POSENC_REQUIRE_ERROR(xl_t(2, 5), "dim = 5");
  POSENC_REQUIRE_ERROR(xl_t(2, 5, 7), "dim_r = 7");
  POSENC_REQUIRE_ERROR(xl_t(2, 4, 0, 0.5), "base = 0.5");
  const xl_t xl(2, 4, 6);
  POSENC_REQUIRE_ERROR(xl.position_keys(2, 0, 1), "head = 2");
  const dmat q = dmat::Ones(3, 8), k = dmat::Ones(4, 8);
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, k, 4, 4, {}, xl), "heads = 4");
  POSENC_REQUIRE_ERROR(posenc::attention(dmat(dmat::Ones(3, 4)), dmat(dmat::Ones(4, 4)),
                                         dmat(dmat::Ones(4, 4)), {}, xl_t(1, 2)),
                       "dim = 4");
  xl_t xm(2, 4, 6);
  auto grad = xm.zero_gradient();
  grad.u.resize(1, 4);
  POSENC_REQUIRE_ERROR(xm.sgd_step(grad, 0.1), "gradient.u.rows() = 1");
  grad = xm.zero_gradient();
  grad.v.resize(3, 4);
  POSENC_REQUIRE_ERROR(xm.sgd_step(grad, 0.1), "gradient.v.rows() = 3");
  grad = xm.zero_gradient();
  grad.w_r.resize(0, 0);
  POSENC_REQUIRE_ERROR(xm.sgd_step(grad, 0.1), "gradient.w_r.rows() = 0");

  // Distances must stay exact in double (and the cache arithmetic far from overflow).
  posenc::attention_config far;
  far.q_offset = (Index(1) << 53) - 2;  // Lq = 3: the last query sits at 2^53
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, k, 2, 2, far, xl),
                       "q_offset = 9007199254740990");
  far.q_offset = std::numeric_limits<Index>::max() - 3;
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, k, 2, 2, far, xl),
                       "q_offset = 9223372036854775804");

  POSENC_REQUIRE_ERROR(posenc::txl_memory<double>(-1, 4, 4), "mem_len = -1");
  POSENC_REQUIRE_ERROR(posenc::txl_memory<double>(2, 0, 4), "dim_k = 0");
  POSENC_REQUIRE_ERROR(posenc::txl_memory<double>(2, 4, 0), "dim_v = 0");
  posenc::txl_memory<double> mem(2, 4, 3);
  POSENC_REQUIRE_ERROR(mem.keys_with(dmat::Ones(2, 5)), "cur_k.cols() = 5");
  POSENC_REQUIRE_ERROR(mem.values_with(dmat::Ones(2, 4)), "cur_v.cols() = 4");
  POSENC_REQUIRE_ERROR(mem.update(dmat::Ones(2, 4), dmat::Ones(3, 3)), "cur_v.rows() = 3");
}
