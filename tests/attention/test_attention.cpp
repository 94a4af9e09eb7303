// Reference attention: goldens from tests/reference/attention.py, masks, numerics,
// permutation properties, chunked prefill, error paths.

#include <cmath>
#include <limits>
#include <posenc/attention.hpp>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc_test::golden_matrix;
using posenc_test::max_abs_diff;
using posenc_test::random_matrix;
using posenc_test::rmat;

namespace {

struct golden_inputs {
  rmat<double> q = golden_matrix<double>("attention_q.npy");
  rmat<double> k = golden_matrix<double>("attention_k.npy");
  rmat<double> v = golden_matrix<double>("attention_v.npy");
};

template <class Policy>
void check_case(const golden_inputs& in, const std::string& name,
                const posenc::attention_config& opt, const Policy& policy) {
  INFO("case " << name);
  const auto want = golden_matrix<double>("attention_out_" + name + ".npy");
  const auto want_w = golden_matrix<double>("attention_weights_" + name + ".npy");
  rmat<double> w;
  const auto out = posenc::attention_with_weights(in.q, in.k, in.v, w, opt, policy);
  CHECK(max_abs_diff(out, want) < 1e-13);
  CHECK(max_abs_diff(w, want_w) < 1e-13);
  // float inputs: the float64 result rounded once.
  rmat<float> wf;
  const auto outf =
      posenc::attention_with_weights(in.q.cast<float>().eval(), in.k.cast<float>().eval(),
                                     in.v.cast<float>().eval(), wf, opt, policy);
  CHECK(max_abs_diff(outf, want) < 1e-5);
  CHECK(max_abs_diff(wf, want_w) < 1e-5);
}

}  // namespace

TEST_CASE("attention matches the numpy reference for every scheme and mask",
          "[attention][golden]") {
  const golden_inputs in;
  posenc::attention_config opt;
  check_case(in, "none", opt, posenc::no_position_policy{});

  opt.q_offset = 2;
  opt.mask.causal = true;
  check_case(in, "causal", opt, posenc::no_position_policy{});
  check_case(in, "alibi_causal", opt, posenc::alibi_policy(4).only_head(1));

  posenc::attention_config sym;
  sym.q_offset = 2;
  check_case(in, "alibi_symmetric", sym,
             posenc::alibi_policy(6, posenc::alibi_form::symmetric).only_head(5));

  const auto table = golden_matrix<double>("attention_t5_table.npy");
  posenc::attention_config t5;
  t5.scale = 1.0;
  t5.q_offset = 2;
  check_case(in, "t5_bidir", t5, posenc::t5_bias_policy(table, {32, 128, true}));
  t5.mask.causal = true;
  check_case(in, "t5_unidir", t5, posenc::t5_bias_policy(table, {32, 128, false}));

  posenc::attention_config m;
  m.mask.key_lengths = {6};
  m.mask.allowed = golden_matrix<std::uint8_t>("attention_masked_allowed.npy").cast<bool>();
  m.mask.additive = golden_matrix<double>("attention_masked_additive.npy");
  check_case(in, "masked", m, posenc::no_position_policy{});
}

TEST_CASE("attention agrees with a naive loop on random shapes", "[attention]") {
  for (int t = 0; t < 12; ++t) {
    const Index lq = 1 + t % 5 * 7, lk = 1 + (t * 13) % 70, d = 1 + t % 9, dv = 1 + (t * 5) % 7;
    const Index off = t % 3 == 0 ? 0 : lk / 2;
    const auto q = random_matrix(lq, d, 100 + t), k = random_matrix(lk, d, 200 + t),
               v = random_matrix(lk, dv, 300 + t);
    posenc::attention_config opt;
    opt.q_offset = off;
    opt.mask.causal = t % 2 == 0;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const auto want = posenc_test::naive_attention(
        q, k, v, scale, [](Index, Index) { return 0.0; },
        [&](Index i, Index j) { return !opt.mask.causal || j <= off + i; });
    INFO("t = " << t);
    CHECK(max_abs_diff(posenc::attention(q, k, v, opt), want) < 1e-13);
  }
}

TEST_CASE("the scale is settable and defaults to 1/sqrt(d)", "[attention]") {
  const auto q = random_matrix(5, 16, 1), k = random_matrix(8, 16, 2), v = random_matrix(8, 3, 3);
  posenc::attention_config opt;
  opt.scale = 0.25;  // = 1/sqrt(16)
  CHECK(max_abs_diff(posenc::attention(q, k, v, opt), posenc::attention(q, k, v)) == 0.0);
  opt.scale = 1.0;
  const rmat<double> q4 = 4.0 * q;
  CHECK(max_abs_diff(posenc::attention(q, k, v, opt), posenc::attention(q4, k, v)) < 1e-14);
  CHECK(max_abs_diff(posenc::attention(q, k, v, opt), posenc::attention(q, k, v)) > 1e-3);
}

TEST_CASE("softmax is stable for huge logits", "[attention]") {
  rmat<double> q = random_matrix(4, 8, 5) * 1e4, k = random_matrix(6, 8, 6) * 1e4;
  const auto v = random_matrix(6, 2, 7);
  const auto out = posenc::attention(q, k, v);
  CHECK(out.allFinite());
  rmat<float> outf =
      posenc::attention(q.cast<float>().eval(), k.cast<float>().eval(), v.cast<float>().eval());
  CHECK(outf.allFinite());
  // Each row is (numerically) the value of its best key.
  for (Index i = 0; i < 4; ++i) {
    Index best = 0;
    (k * q.row(i).transpose()).maxCoeff(&best);
    CHECK(max_abs_diff(out.row(i), v.row(best)) < 1e-12);
  }
}

TEST_CASE("fully masked rows give zeros, never NaN", "[attention][mask]") {
  const auto q = random_matrix(3, 4, 8), k = random_matrix(5, 4, 9), v = random_matrix(5, 2, 10);
  posenc::attention_config opt;
  opt.mask.key_lengths = {0};
  rmat<double> w;
  auto out = posenc::attention_with_weights(q, k, v, w, opt);
  CHECK(out.allFinite());
  CHECK(out.isZero(0));
  CHECK(w.isZero(0));
  posenc::attention_config add;
  add.mask.additive = rmat<double>::Constant(3, 5, -std::numeric_limits<double>::infinity());
  out = posenc::attention_with_weights(q, k, v, w, add, posenc::alibi_policy(1));
  CHECK(out.isZero(0));
  CHECK(w.isZero(0));
  // No keys at all.
  const rmat<double> k0(0, 4), v0(0, 2);
  out = posenc::attention(q, k0, v0);
  CHECK(out.rows() == 3);
  CHECK(out.isZero(0));
}

TEST_CASE("NaN and infinite inputs propagate; they are never silently zeroed",
          "[attention][numerics]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  rmat<double> q = random_matrix(4, 3, 21);
  rmat<double> k = random_matrix(5, 3, 22);
  const auto v = random_matrix(5, 2, 23);
  k(0, 1) = 0.5;  // so that row 2 meets a +inf logit (and k(1, 1) a -inf one)
  k(1, 1) = -0.5;
  q(1, 0) = nan;  // every logit of row 1 is NaN: its weights and output are NaN, not zeros
  q(2, 1) = inf;  // row 2 has +-inf logits: +inf makes its weights NaN (exp(inf - inf))
  rmat<double> w;
  const auto out = posenc::attention_with_weights(q, k, v, w, {}, posenc::alibi_policy(1));
  CHECK(out.row(1).array().isNaN().all());
  CHECK(w.row(1).array().isNaN().all());
  CHECK(out.row(2).array().isNaN().all());
  // The other rows are untouched by the bad ones.
  for (Index i : {Index(0), Index(3)}) {
    CHECK(out.row(i).allFinite());
    CHECK(std::abs(w.row(i).sum() - 1.0) < 1e-14);
  }
  // One NaN key component poisons only the rows that can see that key.
  rmat<double> k2 = k;
  k2(3, 2) = nan;
  posenc::attention_config causal;
  causal.mask.causal = true;
  const auto outc = posenc::attention(random_matrix(5, 3, 24), k2, v, causal);
  CHECK(outc.topRows(3).allFinite());
  CHECK(outc.bottomRows(2).array().isNaN().all());
  // A NaN value row reaches exactly the outputs that weigh it (all of them here).
  rmat<double> v2 = v;
  v2(0, 1) = nan;
  const auto outv = posenc::attention(random_matrix(4, 3, 25), k, v2);
  CHECK(outv.col(0).allFinite());
  CHECK(outv.col(1).array().isNaN().all());
  // float inputs behave the same.
  const rmat<float> qf = q.cast<float>();
  const auto outf = posenc::attention(qf, k.cast<float>().eval(), v.cast<float>().eval());
  CHECK(outf.row(1).array().isNaN().all());
  CHECK(outf.row(0).allFinite());
}

TEST_CASE("weights rows sum to one and respect the causal offset", "[attention][mask]") {
  const auto q = random_matrix(6, 4, 11), k = random_matrix(10, 4, 12),
             v = random_matrix(10, 3, 13);
  posenc::attention_config opt;
  opt.mask.causal = true;
  opt.q_offset = 3;
  rmat<double> w;
  posenc::attention_with_weights(q, k, v, w, opt);
  for (Index i = 0; i < 6; ++i) {
    CHECK(std::abs(w.row(i).sum() - 1.0) < 1e-14);
    for (Index j = 0; j < 10; ++j)
      if (j > 3 + i) CHECK(w(i, j) == 0.0);
    CHECK(w(i, 3 + i) > 0.0);
  }
}

TEST_CASE("float32 attention stays within 1e-5 of float64 at L = 4096", "[attention][numerics]") {
  const Index L = 4096, d = 32;
  const rmat<float> q = random_matrix<float>(L, d, 21) * 2.0f,
                    k = random_matrix<float>(L, d, 22) * 2.0f, v = random_matrix<float>(L, d, 23);
  posenc::attention_config opt;
  opt.mask.causal = true;
  const rmat<float> outf = posenc::attention(q, k, v, opt);
  const rmat<double> outd = posenc::attention(q.cast<double>().eval(), k.cast<double>().eval(),
                                              v.cast<double>().eval(), opt);
  CHECK(posenc_test::rel_norm_err(outf, outd) < 1e-5);
  double worst = 0;
  for (Index i = 0; i < L; ++i)
    worst = std::max(worst, (outf.row(i).cast<double>() - outd.row(i)).norm() / outd.row(i).norm());
  CHECK(worst < 1e-5);
}

TEST_CASE("without positions attention is permutation-equivariant; with a scheme it is not",
          "[attention][property]") {
  const Index L = 9, d = 8;
  const auto x = random_matrix(L, d, 31);
  // A fixed permutation (reversal plus a swap) and its matrix form.
  Eigen::VectorXi perm(L);
  for (Index i = 0; i < L; ++i) perm(i) = static_cast<int>(L - 1 - i);
  std::swap(perm(0), perm(4));
  const Eigen::PermutationMatrix<Eigen::Dynamic> P(perm);
  const rmat<double> px = P * x;
  const auto f = [&](const rmat<double>& in, const auto& policy,
                     const posenc::attention_config& o) {
    return posenc::attention(in, in, in, o, policy);
  };
  posenc::attention_config none;
  const rmat<double> fpx = f(px, posenc::no_position_policy{}, none);
  const rmat<double> pfx = P * f(x, posenc::no_position_policy{}, none);
  CHECK(max_abs_diff(fpx, pfx) < 1e-12);

  const rmat<double> table = random_matrix(32, 1, 32) * 3.0;
  posenc::attention_config t5;
  t5.scale = 1.0;
  CHECK(max_abs_diff(f(px, posenc::alibi_policy(1), none),
                     P * f(x, posenc::alibi_policy(1), none)) > 1e-3);
  CHECK(max_abs_diff(f(px, posenc::alibi_policy(1, posenc::alibi_form::symmetric), none),
                     P * f(x, posenc::alibi_policy(1, posenc::alibi_form::symmetric), none)) >
        1e-3);
  const posenc::t5_bias_policy t5p(table, {32, 128, true});
  CHECK(max_abs_diff(f(px, t5p, t5), P * f(x, t5p, t5)) > 1e-3);
}

TEST_CASE("chunked prefill with a query offset equals one causal pass", "[attention][property]") {
  const Index L = 37, d = 6;
  const auto q = random_matrix(L, d, 41), k = random_matrix(L, d, 42), v = random_matrix(L, 4, 43);
  const auto table = random_matrix(32, 1, 44);
  auto run = [&](const auto& policy, double scale) {
    posenc::attention_config full;
    full.mask.causal = true;
    full.scale = scale;
    const rmat<double> want = posenc::attention(q, k, v, full, policy);
    for (Index chunk : {1, 5, 16}) {
      for (Index r0 = 0; r0 < L; r0 += chunk) {
        const Index n = std::min(chunk, L - r0);
        posenc::attention_config o = full;
        o.q_offset = r0;
        // Only the keys seen so far are passed, as a KV cache would hold them.
        const rmat<double> got =
            posenc::attention(q.middleRows(r0, n), k.topRows(r0 + n), v.topRows(r0 + n), o, policy);
        INFO("chunk " << chunk << " at " << r0);
        CHECK(max_abs_diff(got, want.middleRows(r0, n)) < 1e-14);
      }
    }
  };
  run(posenc::no_position_policy{}, 0.0);
  run(posenc::alibi_policy(3).only_head(2), 0.0);
  run(posenc::t5_bias_policy(table, {32, 128, false}), 1.0);
}

TEST_CASE("attention validates its arguments", "[attention][errors]") {
  const auto q = random_matrix(3, 4, 1), k = random_matrix(5, 4, 2), v = random_matrix(5, 2, 3);
  const rmat<double> k3 = random_matrix(5, 3, 4), v4 = random_matrix(4, 2, 5);
  POSENC_REQUIRE_ERROR(posenc::attention(q, k3, v), "k.cols() = 3");
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v4), "v.rows() = 4");
  const rmat<double> q0(3, 0), k0(5, 0);
  POSENC_REQUIRE_ERROR(posenc::attention(q0, k0, v), "dim = 0");
  posenc::attention_config opt;
  opt.scale = -1.0;
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "scale = -1");
  opt.scale = std::numeric_limits<double>::quiet_NaN();
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "scale = nan");
  opt = {};
  opt.q_offset = -2;
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "q_offset = -2");
  opt = {};
  opt.mask.key_lengths = {6};
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.key_lengths[b] = 6");
  opt.mask.key_lengths = {1, 2};
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.key_lengths.size() = 2");
  opt = {};
  opt.mask.allowed = posenc::bool_mask::Constant(3, 4, true);
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.allowed.cols() = 4");
  opt.mask.allowed = posenc::bool_mask::Constant(2, 5, true);
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.allowed.rows() = 2");
  opt = {};
  opt.mask.additive = rmat<double>::Zero(3, 6);
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.additive.cols() = 6");
  opt.mask.additive = rmat<double>::Zero(4, 5);
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.additive.rows() = 4");
  opt.mask.additive = rmat<double>::Zero(3, 5);
  opt.mask.additive(1, 1) = std::numeric_limits<double>::infinity();
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.additive element = inf");
  opt.mask.additive(1, 1) = std::numeric_limits<double>::quiet_NaN();
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt), "mask.additive element = nan");
  // Query positions q_offset + i must be representable: no signed overflow in pos + 1.
  opt = {};
  opt.mask.causal = true;
  opt.q_offset = std::numeric_limits<Index>::max() - 2;  // Lq = 3: the last position overflows
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt, posenc::alibi_policy(1)),
                       "q_offset = 9223372036854775805");
  opt.q_offset = std::numeric_limits<Index>::max() - 3;  // the largest accepted offset
  CHECK(posenc::attention(q, k, v, opt, posenc::alibi_policy(1)).rows() == 3);
  posenc::attention_shape big;
  big.len_q = 2;
  big.len_k = 2;
  big.dim = 1;
  big.q_offset = std::numeric_limits<Index>::max();
  POSENC_REQUIRE_ERROR(posenc::materialize_bias(posenc::alibi_policy(1), 0, 0, big),
                       "q_offset = 9223372036854775807");
  big.q_offset = 0;
  big.len_q = -1;
  POSENC_REQUIRE_ERROR(posenc::materialize_bias(posenc::alibi_policy(1), 0, 0, big), "len_q = -1");
  big.len_q = 2;
  big.len_k = -4;
  POSENC_REQUIRE_ERROR(
      posenc::materialize_score(posenc::no_position_policy{}, 0, 0, big, rmat<double>(2, 1)),
      "len_k = -4");
  // Per-head policies must be narrowed for a single-head call.
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, {}, posenc::alibi_policy(4)), "heads = 1");
  rmat<double> w;
  POSENC_REQUIRE_ERROR(posenc::attention_with_weights(q, k3, v, w), "k.cols() = 3");
}
