// Backward pass: dQ, dK, dV and the T5 table gradient against central finite differences
// in double, for every mask kind, ALiBi, T5 and grouped-query heads; plus a toy training
// run of a T5 table.

#include <functional>
#include <posenc/attention.hpp>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;
using posenc_test::max_abs_diff;
using posenc_test::numeric_grad;
using posenc_test::random_matrix;
using posenc_test::rmat;

namespace {

/// L = sum(out ∘ W) for a fixed random W, so dL/dout = W.
double weighted_sum(const rmat<double>& out, const rmat<double>& w) {
  return out.cwiseProduct(w).sum();
}

template <class Policy>
posenc::no_gradient make_grad(const Policy&) {
  return {};
}
posenc::t5_bias_gradient make_grad(const posenc::t5_bias_policy& p) { return p.zero_gradient(); }

template <class Policy>
void check_single(const Policy& policy, const posenc::attention_config& opt, Index lq, Index lk,
                  Index d, Index dv) {
  rmat<double> q = random_matrix(lq, d, 1) * 1.5, k = random_matrix(lk, d, 2) * 1.5,
               v = random_matrix(lk, dv, 3);
  const rmat<double> w = random_matrix(lq, dv, 4);
  auto grad = make_grad(policy);
  const auto g = posenc::attention_backward(q, k, v, w, opt, policy, grad);
  auto loss = [&] { return weighted_sum(posenc::attention(q, k, v, opt, policy), w); };
  CHECK(max_abs_diff(g.dq, numeric_grad(q, loss)) < 1e-8);
  CHECK(max_abs_diff(g.dk, numeric_grad(k, loss)) < 1e-8);
  CHECK(max_abs_diff(g.dv, numeric_grad(v, loss)) < 1e-8);
  // The gradient is not trivially zero.
  CHECK(g.dq.norm() > 1e-3);
  CHECK(g.dk.norm() > 1e-3);
}

}  // namespace

TEST_CASE("attention backward matches finite differences", "[backward]") {
  posenc::attention_config opt;
  SECTION("no positions, no mask") { check_single(posenc::no_position_policy{}, opt, 5, 7, 4, 3); }
  SECTION("causal with an offset") {
    opt.mask.causal = true;
    opt.q_offset = 2;
    check_single(posenc::no_position_policy{}, opt, 5, 7, 4, 3);
  }
  SECTION("padding, boolean and additive masks with a fully masked row") {
    opt.mask.key_lengths = {6};
    opt.mask.allowed = posenc::bool_mask::Constant(5, 7, true);
    opt.mask.allowed.row(2).setConstant(false);
    opt.mask.allowed(0, 1) = false;
    opt.mask.additive = random_matrix(5, 7, 9);
    opt.mask.additive(3, 0) = -std::numeric_limits<double>::infinity();
    check_single(posenc::no_position_policy{}, opt, 5, 7, 4, 3);
  }
  SECTION("ALiBi causal and symmetric") {
    opt.mask.causal = true;
    opt.q_offset = 1;
    check_single(posenc::alibi_policy(3).only_head(0), opt, 4, 6, 3, 2);
    check_single(posenc::alibi_policy(3, posenc::alibi_form::symmetric).only_head(2), {}, 4, 6, 3,
                 2);
  }
  SECTION("T5 bias, scale 1") {
    opt.scale = 1.0;
    check_single(posenc::t5_bias_policy(random_matrix(8, 1, 5), {8, 20, true}), opt, 4, 9, 3, 2);
  }
}

TEST_CASE("T5 table gradient matches finite differences, multi-head with GQA", "[backward][t5]") {
  const Index H = 4, Hkv = 2, d = 3, dv = 2, lq = 6, lk = 9;
  rmat<double> q = random_matrix(lq, H * d, 11), k = random_matrix(lk, Hkv * d, 12),
               v = random_matrix(lk, Hkv * dv, 13), table = random_matrix(8, H, 14);
  const rmat<double> w = random_matrix(lq, H * dv, 15);
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    posenc::attention_config opt;
    opt.scale = 1.0;
    opt.mask.causal = causal;
    opt.q_offset = 3;
    const posenc::t5_bucket_config cfg{8, 20, !causal};
    const posenc::t5_bias_policy policy(table, cfg);
    auto grad = policy.zero_gradient();
    const auto g = posenc::multi_head_attention_backward(q, k, v, w, H, Hkv, opt, policy, grad);
    auto loss = [&] {
      return weighted_sum(
          posenc::multi_head_attention(q, k, v, H, Hkv, opt, posenc::t5_bias_policy(table, cfg)),
          w);
    };
    CHECK(max_abs_diff(g.dq, numeric_grad(q, loss)) < 1e-8);
    CHECK(max_abs_diff(g.dk, numeric_grad(k, loss)) < 1e-8);
    CHECK(max_abs_diff(g.dv, numeric_grad(v, loss)) < 1e-8);
    CHECK(max_abs_diff(grad.table, numeric_grad(table, loss)) < 1e-8);
    CHECK(grad.table.norm() > 1e-3);
    // Accumulation is additive: a second backward doubles the gradient.
    const rmat<double> once = grad.table;
    posenc::multi_head_attention_backward(q, k, v, w, H, Hkv, opt, policy, grad);
    CHECK(max_abs_diff(grad.table, 2.0 * once) < 1e-14);
  }
}

TEST_CASE("a T5 table learns a relative pattern", "[backward][t5]") {
  // Target: attend to the previous token. Values are one-hot positions, so the output row
  // i is the attention distribution; the loss pulls it towards e_{i-1}.
  const Index L = 12, d = 2;
  const rmat<double> q = rmat<double>::Zero(L, d), k = rmat<double>::Zero(L, d);
  const rmat<double> v = rmat<double>::Identity(L, L);
  rmat<double> target = rmat<double>::Zero(L, L);
  for (Index i = 0; i < L; ++i) target(i, i > 0 ? i - 1 : 0) = 1.0;
  posenc::attention_config opt;
  opt.scale = 1.0;
  opt.mask.causal = true;
  posenc::t5_bias_policy policy(rmat<double>::Zero(8, 1), {8, 16, false});
  auto loss_of = [&] {
    const auto out = posenc::attention(q, k, v, opt, policy);
    return 0.5 * (out - target).squaredNorm();
  };
  const double first = loss_of();
  for (int step = 0; step < 200; ++step) {
    const auto out = posenc::attention(q, k, v, opt, policy);
    auto grad = policy.zero_gradient();
    posenc::attention_backward(q, k, v, (out - target).eval(), opt, policy, grad);
    policy.table() -= 0.5 * grad.table;
  }
  const double last = loss_of();
  CHECK(last < 0.2 * first);
  // Bucket 1 (distance 1) ends with the largest bias.
  Index best = 0;
  policy.table().col(0).maxCoeff(&best);
  CHECK(best == 1);
}

TEST_CASE("backward validates its arguments", "[backward][errors]") {
  const auto q = random_matrix(3, 4, 1), k = random_matrix(5, 4, 2), v = random_matrix(5, 2, 3);
  POSENC_REQUIRE_ERROR(posenc::attention_backward(q, k, v, random_matrix(2, 2, 4)),
                       "dout.rows() = 2");
  POSENC_REQUIRE_ERROR(posenc::attention_backward(q, k, v, random_matrix(3, 3, 4)),
                       "dout.cols() = 3");
  POSENC_REQUIRE_ERROR(
      posenc::attention_backward(q, random_matrix(5, 3, 2), v, random_matrix(3, 2, 4)),
      "k.cols() = 3");
  const posenc::t5_bias_policy t5(random_matrix(8, 1, 5), {8, 20, true});
  posenc::t5_bias_gradient bad{posenc::dmatrix::Zero(7, 1)};
  POSENC_REQUIRE_ERROR(posenc::attention_backward(q, k, v, random_matrix(3, 2, 4), {}, t5, bad),
                       "grad.table.rows() = 7");
  auto g = t5.zero_gradient();
  const auto qm = random_matrix(3, 8, 1), km = random_matrix(5, 8, 2), vm = random_matrix(5, 4, 3);
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, vm, random_matrix(3, 4, 4), 2, 2, {}, t5, g),
      "heads = 2");
  posenc::no_gradient ng;
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, vm, random_matrix(3, 4, 4), 2, 3, {},
                                            posenc::no_position_policy{}, ng),
      "k.cols() = 8");
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, vm, random_matrix(3, 5, 4), 2, 2, {},
                                            posenc::no_position_policy{}, ng),
      "dout.cols() = 5");
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, vm, random_matrix(3, 4, 4), 0, 2, {},
                                            posenc::no_position_policy{}, ng),
      "heads = 0");
  // The packed-head checks shared with multi_head_attention (detail::check_packed_heads).
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, vm, random_matrix(3, 4, 4), 2, 0, {},
                                            posenc::no_position_policy{}, ng),
      "kv_heads = 0");
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, vm, random_matrix(3, 4, 4), 3, 2, {},
                                            posenc::no_position_policy{}, ng),
      "q.cols() = 8");
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, random_matrix(5, 5, 3), random_matrix(3, 4, 4),
                                            2, 2, {}, posenc::no_position_policy{}, ng),
      "v.cols() = 5");
  POSENC_REQUIRE_ERROR(
      posenc::multi_head_attention_backward(qm, km, random_matrix(6, 4, 3), random_matrix(3, 4, 4),
                                            2, 2, {}, posenc::no_position_policy{}, ng),
      "v.rows() = 6");
}
