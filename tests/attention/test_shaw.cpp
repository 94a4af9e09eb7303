// Shaw et al. (2018) relative position representations as an attention policy:
// goldens from tests/reference/relative.py, properties, errors.

#include <limits>
#include <posenc/attention/attention.hpp>
#include <posenc/attention/multi_head.hpp>
#include <posenc/encoding/shaw.hpp>
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

struct shaw_case {
  std::string name;
  posenc::shaw_clip clip;
  bool causal;
  Index q_offset;
};

shaw_case golden_case(const std::string& name) {
  if (name == "shaw_sym") return {name, posenc::shaw_clip::symmetric(2), false, 0};
  return {name, posenc::shaw_clip::asymmetric(3, 1), true, 2};
}

dmat g(const std::string& c, const std::string& what) {
  return posenc_test::golden_matrix<double>("relative_" + c + "_" + what + ".npy");
}

template <class Scalar>
posenc::shaw_policy<Scalar> golden_policy(const shaw_case& c) {
  const dmat ak = g(c.name, "ak"), av = g(c.name, "av");
  posenc::shaw_policy<Scalar> shaw(c.clip, ak.cols(), av.cols());
  shaw.key_table(0) = ak.cast<Scalar>();
  shaw.value_table(0) = av.cast<Scalar>();
  return shaw;
}

posenc::attention_config options(bool causal, Index q_offset) {
  posenc::attention_config opt;
  opt.mask.causal = causal;
  opt.q_offset = q_offset;
  return opt;
}

// The policy's score term, directly from the definition: q_i . a^K[clip(j - pos) + left].
dmat direct_scores(const dmat& q, Index lk, const dmat& ak, posenc::shaw_clip clip,
                   Index q_offset) {
  dmat s(q.rows(), lk);
  for (Index i = 0; i < q.rows(); ++i)
    for (Index j = 0; j < lk; ++j) {
      const Index rel = j - (q_offset + i);
      const Index r = std::min(clip.right, std::max(-clip.left, rel)) + clip.left;
      s(i, j) = q.row(i).dot(ak.row(r));
    }
  return s;
}

}  // namespace

TEST_CASE("shaw clip rows follow clip(j - i) + left", "[attention][shaw]") {
  const auto rows = posenc_test::golden_matrix<std::int64_t>("relative_shaw_rows.npy");
  REQUIRE(rows.rows() == 13);
  const auto sym = posenc::shaw_clip::symmetric(2);
  const auto asym = posenc::shaw_clip::asymmetric(3, 1);
  CHECK(sym.rows() == 5);
  CHECK(asym.rows() == 5);
  for (Index r = 0; r < rows.rows(); ++r) {
    CHECK(sym.row(rows(r, 0)) == rows(r, 1));
    CHECK(asym.row(rows(r, 0)) == rows(r, 2));
  }
  CHECK(posenc::shaw_clip::symmetric(0).rows() == 1);
  CHECK(posenc::shaw_clip::symmetric(0).row(-7) == 0);
  CHECK(posenc::shaw_clip::symmetric(0).row(9) == 0);
}

TEST_CASE("shaw attention matches the numpy reference (eqs. 3-4)", "[attention][shaw][golden]") {
  for (const char* name : {"shaw_sym", "shaw_asym"}) {
    INFO(name);
    const shaw_case c = golden_case(name);
    const dmat q = g(name, "q"), k = g(name, "k"), v = g(name, "v");
    const auto opt = options(c.causal, c.q_offset);

    const auto shaw = golden_policy<double>(c);
    dmat w;
    const dmat out = posenc::attention_with_weights(q, k, v, w, opt, shaw);
    CHECK(posenc_test::max_abs_diff(out, g(name, "out")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(w, g(name, "weights")) < 1e-12);

    // float storage and inputs: one rounding of the double result.
    const auto shaw_f = golden_policy<float>(c);
    const fmat out_f = posenc::attention(fmat(q.cast<float>()), fmat(k.cast<float>()),
                                         fmat(v.cast<float>()), opt, shaw_f);
    CHECK(posenc_test::max_abs_diff(out_f, g(name, "out")) < 1e-5);

    // The score hook equals the definition.
    posenc::attention_shape s;
    s.len_q = q.rows();
    s.len_k = k.rows();
    s.dim = q.cols();
    s.dim_v = v.cols();
    s.q_offset = c.q_offset;
    const dmat score = posenc::materialize_score(shaw, 0, 0, s, q);
    CHECK(posenc_test::max_abs_diff(
              score, direct_scores(q, k.rows(), g(name, "ak"), c.clip, c.q_offset)) < 1e-13);
  }
}

TEST_CASE("shaw value buckets equal the per-key sum", "[attention][shaw]") {
  // add_values sums the weights per bucket over contiguous end ranges; check it against
  // sum_j p_j a^V[r_ij] for every window shape, query position and key count.
  std::mt19937 gen(7);
  for (Index left : {0, 1, 3})
    for (Index right : {0, 2, 5})
      for (Index lk : {1, 4, 9}) {
        posenc::shaw_policy<double> shaw(posenc::shaw_clip::asymmetric(left, right), 2, 3);
        shaw.value_tables() = normal_matrix(shaw.rows(), 3, gen);
        posenc::attention_shape s;
        s.len_q = 1;
        s.len_k = lk;
        s.dim = 2;
        s.dim_v = 3;
        for (Index pos = 0; pos < lk + 4; ++pos) {
          s.q_offset = pos;
          auto h = shaw.head(0, 0, s);
          const posenc::drow p = normal_matrix(1, lk, gen);
          posenc::drow out = posenc::drow::Zero(3), expect = posenc::drow::Zero(3);
          h.add_values(pos, p, out);
          for (Index j = 0; j < lk; ++j)
            expect += p(j) * shaw.value_tables().row(shaw.clip().row(j - pos));
          INFO("left " << left << " right " << right << " lk " << lk << " pos " << pos);
          CHECK((out - expect).cwiseAbs().maxCoeff() < 1e-13);
        }
      }
}

TEST_CASE("shaw with clip distance 0 is attention with constant key/value offsets",
          "[attention][shaw][property]") {
  std::mt19937 gen(11);
  const Index lq = 6, lk = 9, d = 5, dv = 4;
  const dmat q = normal_matrix(lq, d, gen), k = normal_matrix(lk, d, gen),
             v = normal_matrix(lk, dv, gen);
  posenc::shaw_policy<double> shaw(posenc::shaw_clip::symmetric(0), d, dv);
  shaw.key_tables() = normal_matrix(1, d, gen);
  shaw.value_tables() = normal_matrix(1, dv, gen);
  const dmat k_off = k.rowwise() + shaw.key_tables().row(0);
  const dmat v_off = v.rowwise() + shaw.value_tables().row(0);
  for (bool causal : {false, true}) {
    const auto opt = options(causal, 3);
    const dmat a = posenc::attention(q, k, v, opt, shaw);
    const dmat b = posenc::attention(q, k_off, v_off, opt);
    CHECK(posenc_test::max_abs_diff(a, b) < 1e-12);
  }
}

TEST_CASE("shaw depends on positions only through j - i", "[attention][shaw][property]") {
  // Shift every position by `shift`: queries at offset + shift, keys behind `shift`
  // masked-off filler keys. The outputs must not change.
  std::mt19937 gen(12);
  const Index lq = 5, lk = 8, d = 4, dv = 3, offset = 3, shift = 6;
  const dmat q = normal_matrix(lq, d, gen), k = normal_matrix(lk, d, gen),
             v = normal_matrix(lk, dv, gen);
  posenc::shaw_policy<double> shaw(posenc::shaw_clip::asymmetric(2, 3), d, dv);
  shaw.key_tables() = normal_matrix(shaw.rows(), d, gen);
  shaw.value_tables() = normal_matrix(shaw.rows(), dv, gen);
  for (bool causal : {false, true}) {
    const dmat base = posenc::attention(q, k, v, options(causal, offset), shaw);
    dmat k2(lk + shift, d), v2(lk + shift, dv);
    k2 << normal_matrix(shift, d, gen), k;
    v2 << normal_matrix(shift, dv, gen), v;
    auto opt = options(causal, offset + shift);
    opt.mask.allowed = posenc::bool_mask::Constant(lq, lk + shift, true);
    opt.mask.allowed.leftCols(shift).setConstant(false);
    const dmat shifted = posenc::attention(q, k2, v2, opt, shaw);
    CHECK(posenc_test::max_abs_diff(base, shifted) < 1e-12);
  }
}

TEST_CASE("shaw attention is not permutation-equivariant", "[attention][shaw][property]") {
  std::mt19937 gen(13);
  const Index l = 7, d = 4, dv = 4;
  const dmat q = normal_matrix(l, d, gen), k = normal_matrix(l, d, gen),
             v = normal_matrix(l, dv, gen);
  Eigen::PermutationMatrix<Eigen::Dynamic> perm(l);
  perm.setIdentity();
  std::swap(perm.indices()(0), perm.indices()(4));
  std::swap(perm.indices()(2), perm.indices()(5));
  posenc::shaw_policy<double> shaw(posenc::shaw_clip::symmetric(2), d, dv);
  // Zero tables: plain attention, equivariant (so the check below can tell the difference).
  {
    const dmat a = perm * posenc::attention(q, k, v, {}, shaw);
    const dmat b = posenc::attention(dmat(perm * q), dmat(perm * k), dmat(perm * v), {}, shaw);
    CHECK(posenc_test::max_abs_diff(a, b) < 1e-12);
  }
  shaw.key_tables() = normal_matrix(shaw.rows(), d, gen);
  shaw.value_tables() = normal_matrix(shaw.rows(), dv, gen);
  const dmat a = perm * posenc::attention(q, k, v, {}, shaw);
  const dmat b = posenc::attention(dmat(perm * q), dmat(perm * k), dmat(perm * v), {}, shaw);
  CHECK(posenc_test::max_abs_diff(a, b) > 1e-3);
}

TEST_CASE("shaw tables shared or per head in multi-head and grouped-query attention",
          "[attention][shaw]") {
  std::mt19937 gen(14);
  const Index l = 6, heads = 4, d = 3, dv = 2;
  const auto clip = posenc::shaw_clip::asymmetric(1, 2);
  posenc::shaw_policy<double> shared(clip, d, dv, 1);
  posenc::shaw_policy<double> per_head(clip, d, dv, heads);
  shared.key_tables() = normal_matrix(clip.rows(), d, gen);
  shared.value_tables() = normal_matrix(clip.rows(), dv, gen);
  per_head.key_tables() = normal_matrix(heads * clip.rows(), d, gen);
  per_head.value_tables() = normal_matrix(heads * clip.rows(), dv, gen);
  for (Index kv_heads : {4, 2, 1}) {
    INFO("kv_heads " << kv_heads);
    const dmat q = normal_matrix(l, heads * d, gen), k = normal_matrix(l, kv_heads * d, gen),
               v = normal_matrix(l, kv_heads * dv, gen);
    const auto opt = options(true, 0);
    const dmat out_shared = posenc::multi_head_attention(q, k, v, heads, kv_heads, opt, shared);
    const dmat out_per = posenc::multi_head_attention(q, k, v, heads, kv_heads, opt, per_head);
    for (Index h = 0; h < heads; ++h) {
      const Index kvh = h / (heads / kv_heads);
      const dmat qh = q.middleCols(h * d, d), kh = k.middleCols(kvh * d, d),
                 vh = v.middleCols(kvh * dv, dv);
      posenc::shaw_policy<double> one(clip, d, dv);
      one.key_table(0) = per_head.key_table(h);
      one.value_table(0) = per_head.value_table(h);
      CHECK(posenc_test::max_abs_diff(out_per.middleCols(h * dv, dv),
                                      posenc::attention(qh, kh, vh, opt, one)) < 1e-12);
      CHECK(posenc_test::max_abs_diff(out_shared.middleCols(h * dv, dv),
                                      posenc::attention(qh, kh, vh, opt, shared)) < 1e-12);
    }
  }
}

TEST_CASE("shaw at query positions near the largest Index (no overflow in the window)",
          "[attention][shaw]") {
  // The value term's window bounds pos + right must not be formed past the largest Index;
  // far from every key all of them sit in the left end bucket.
  std::mt19937 gen(91);
  posenc::shaw_policy<double> shaw(posenc::shaw_clip::asymmetric(3, 1000), 4, 2);
  shaw.key_tables() = normal_matrix(shaw.rows(), 4, gen);
  shaw.value_tables() = normal_matrix(shaw.rows(), 2, gen);
  const dmat q = normal_matrix(2, 4, gen), k = normal_matrix(5, 4, gen),
             v = normal_matrix(5, 2, gen);
  posenc::attention_config far, near;
  far.q_offset = std::numeric_limits<Index>::max() - 2;
  near.q_offset = 100;  // also past every key by more than left = 3
  CHECK(posenc_test::max_abs_diff(posenc::attention(q, k, v, far, shaw),
                                  posenc::attention(q, k, v, near, shaw)) == 0.0);
}

TEST_CASE("shaw errors name the parameter and its value", "[attention][shaw][error]") {
  POSENC_REQUIRE_ERROR(posenc::shaw_clip::symmetric(-1), "k = -1");
  POSENC_REQUIRE_ERROR(posenc::shaw_clip::asymmetric(-2, 1), "left = -2");
  POSENC_REQUIRE_ERROR(posenc::shaw_clip::asymmetric(1, -3), "right = -3");
  // Windows past 2^31 would overflow rows() = left + right + 1 (and never fit in memory).
  POSENC_REQUIRE_ERROR(posenc::shaw_clip::symmetric(std::numeric_limits<Index>::max()),
                       "k = 9223372036854775807");
  POSENC_REQUIRE_ERROR(posenc::shaw_clip::asymmetric(Index(1) << 32, 1), "left = 4294967296");
  POSENC_REQUIRE_ERROR(posenc::shaw_clip::asymmetric(1, (Index(1) << 31) + 1),
                       "right = 2147483649");
  POSENC_REQUIRE_ERROR((posenc::shaw_policy<double>(posenc::shaw_clip{-1, 0}, 2, 2)), "left = -1");
  const auto clip = posenc::shaw_clip::symmetric(1);
  POSENC_REQUIRE_ERROR((posenc::shaw_policy<double>(clip, 0, 2)), "dim = 0");
  POSENC_REQUIRE_ERROR((posenc::shaw_policy<double>(clip, 2, 0)), "dim_v = 0");
  POSENC_REQUIRE_ERROR((posenc::shaw_policy<double>(clip, 2, 2, 0)), "tables = 0");

  posenc::shaw_policy<double> shaw(clip, 2, 3, 2);
  POSENC_REQUIRE_ERROR(shaw.key_table(2), "table = 2");
  POSENC_REQUIRE_ERROR(shaw.value_table(-1), "table = -1");
  const dmat q = dmat::Ones(3, 2), k = dmat::Ones(4, 2), v = dmat::Ones(4, 3);
  POSENC_REQUIRE_ERROR(
      posenc::attention(dmat(dmat::Ones(3, 4)), dmat(dmat::Ones(4, 4)), v, {}, shaw), "dim = 4");
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, dmat(dmat::Ones(4, 5)), {}, shaw), "dim_v = 5");
  // Two table sets need two heads.
  POSENC_REQUIRE_ERROR(posenc::multi_head_attention(dmat(dmat::Ones(3, 6)), dmat(dmat::Ones(4, 6)),
                                                    dmat(dmat::Ones(4, 9)), 3, 3, {}, shaw),
                       "heads = 3");
  auto grad = shaw.zero_gradient();
  grad.key.resize(1, 2);
  POSENC_REQUIRE_ERROR(shaw.sgd_step(grad, 0.1), "gradient.key.rows() = 1");
  grad = shaw.zero_gradient();
  grad.value.resize(6, 1);
  POSENC_REQUIRE_ERROR(shaw.sgd_step(grad, 0.1), "gradient.value.rows() = 6");
}
