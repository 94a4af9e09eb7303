// Rotary and absolute encodings composed with the kernel in one call: equal to rotating /
// adding by hand first, relative-only for RoPE, gradients by finite differences.

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

TEST_CASE("rotary inside the kernel equals rotating Q and K first", "[compose][rotary]") {
  const Index lq = 6, lk = 15, d = 8, off = 9;
  const auto q = random_matrix(lq, d, 1), k = random_matrix(lk, d, 2), v = random_matrix(lk, 3, 3);
  posenc::rotary_embedding<double> rope(d, -1, 500.0);
  const rmat<double> qr = rope.rotated(q, off, posenc::rope_role::query);
  const rmat<double> kr = rope.rotated(k, Index(0), posenc::rope_role::key);
  posenc::attention_config opt;
  opt.mask.causal = true;
  opt.q_offset = off;
  const posenc::rotary_policy policy(posenc::rotary_embedding<double>(d, -1, 500.0));
  CHECK(max_abs_diff(posenc::attention(q, k, v, opt, policy), posenc::attention(qr, kr, v, opt)) <
        1e-14);
  // float inputs too.
  const rmat<float> outf = posenc::attention(q.cast<float>().eval(), k.cast<float>().eval(),
                                             v.cast<float>().eval(), opt, policy);
  CHECK(max_abs_diff(outf, posenc::attention(qr, kr, v, opt)) < 1e-5);
  // Inputs are not modified.
  CHECK(max_abs_diff(q, random_matrix(lq, d, 1)) == 0.0);
  CHECK(policy.embedding().head_dim() == d);
}

TEST_CASE("rotary inside the kernel at a far query offset allocates no table up to it",
          "[compose][rotary]") {
  // q_offset 2^40: the policy used to reserve cos/sin rows for every position up to the
  // offset (2^40 rows); past the cache limit they are computed on the fly.
  const Index lq = 3, lk = 5, d = 8, off = Index(1) << 40;
  const auto q = random_matrix(lq, d, 11), k = random_matrix(lk, d, 12),
             v = random_matrix(lk, 2, 13);
  posenc::rotary_embedding<double> rope(d);
  const rmat<double> qr = rope.rotated(q, off, posenc::rope_role::query);
  const rmat<double> kr = rope.rotated(k, Index(0), posenc::rope_role::key);
  posenc::attention_config opt;
  opt.q_offset = off;
  const posenc::rotary_policy policy(d);
  CHECK(max_abs_diff(posenc::attention(q, k, v, opt, policy), posenc::attention(qr, kr, v, opt)) <
        1e-14);
  CHECK(policy.embedding().cache().size() <= policy.embedding().options().cache_limit);
}

TEST_CASE("RoPE attention logits depend only on j - i", "[compose][rotary][property]") {
  // The same query vector at position p and the same keys shifted by s give the same
  // weights as at p + s: with every key row equal to the one before it shifted.
  const Index d = 8, n = 5;
  const auto qv = random_matrix(1, d, 4), kv = random_matrix(n, d, 5), v = random_matrix(n, 2, 6);
  const posenc::rotary_policy policy(d);
  auto weights_at = [&](Index shift) {
    rmat<double> k = rmat<double>::Zero(shift + n, d), vv = rmat<double>::Zero(shift + n, 2);
    k.bottomRows(n) = kv;
    vv.bottomRows(n) = v;
    posenc::attention_config opt;
    opt.q_offset = shift + n - 1;
    opt.mask.additive = rmat<double>::Zero(1, shift + n);
    for (Index j = 0; j < shift; ++j)
      opt.mask.additive(0, j) = -std::numeric_limits<double>::infinity();
    rmat<double> w;
    posenc::attention_with_weights(qv, k, vv, w, opt, policy);
    return rmat<double>(w.rightCols(n));
  };
  const auto w0 = weights_at(0);
  CHECK(max_abs_diff(weights_at(7), w0) < 1e-13);
  CHECK(max_abs_diff(weights_at(300), w0) < 1e-12);
}

TEST_CASE("rotary and absolute break permutation equivariance", "[compose][property]") {
  const Index L = 8, d = 6;
  const auto x = random_matrix(L, d, 7);
  Eigen::VectorXi perm(L);
  for (Index i = 0; i < L; ++i) perm(i) = static_cast<int>((i + 3) % L);
  const Eigen::PermutationMatrix<Eigen::Dynamic> P(perm);
  const rmat<double> px = P * x;
  const posenc::rotary_policy rope(d);
  const posenc::absolute_policy abs(random_matrix(L, d, 8));
  const rmat<double> a = posenc::attention(px, px, px, {}, rope),
                     b = P * posenc::attention(x, x, x, {}, rope);
  CHECK(max_abs_diff(a, b) > 1e-3);
  const rmat<double> c = posenc::attention(px, px, px, {}, abs),
                     e = P * posenc::attention(x, x, x, {}, abs);
  CHECK(max_abs_diff(c, e) > 1e-3);
}

TEST_CASE("absolute policy equals adding the table rows first", "[compose][absolute]") {
  const Index lq = 4, lk = 9, d = 5, off = 3;
  const auto q = random_matrix(lq, d, 9), k = random_matrix(lk, d, 10),
             v = random_matrix(lk, 2, 11);
  const auto table = random_matrix(12, d, 12);
  posenc::attention_config opt;
  opt.q_offset = off;
  const rmat<double> qa = q + table.middleRows(off, lq), ka = k + table.topRows(lk);
  CHECK(max_abs_diff(posenc::attention(q, k, v, opt, posenc::absolute_policy(table)),
                     posenc::attention(qa, ka, v, opt)) < 1e-14);
  opt.q_offset = 9;
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt, posenc::absolute_policy(table)),
                       "max position + 1 = 13");
  opt.q_offset = 0;
  POSENC_REQUIRE_ERROR(
      posenc::attention(q, k, v, opt, posenc::absolute_policy(random_matrix(12, 4, 1))), "dim = 5");
  POSENC_REQUIRE_ERROR(posenc::absolute_policy(rmat<double>(0, 5)), "table.rows() = 0");
  rmat<double> bad = table;
  bad(1, 1) = std::numeric_limits<double>::infinity();
  POSENC_REQUIRE_ERROR(posenc::absolute_policy(bad), "table = non-finite");
  POSENC_REQUIRE_ERROR(posenc::attention(q, k, v, opt, posenc::rotary_policy(6)), "dim = 5");
  posenc::absolute_gradient g{posenc::dmatrix::Zero(3, 5)};
  POSENC_REQUIRE_ERROR(posenc::attention_backward(q, k, v, random_matrix(lq, 2, 1), opt,
                                                  posenc::absolute_policy(table), g),
                       "grad.table.rows() = 3");
}

TEST_CASE("rotary and absolute backward match finite differences", "[compose][backward]") {
  const Index lq = 4, lk = 7, d = 6, dv = 3;
  rmat<double> q = random_matrix(lq, d, 21), k = random_matrix(lk, d, 22),
               v = random_matrix(lk, dv, 23);
  const rmat<double> w = random_matrix(lq, dv, 24);
  posenc::attention_config opt;
  opt.mask.causal = true;
  opt.q_offset = 3;
  {
    const posenc::rotary_policy rope(d, 100.0);
    posenc::no_gradient ng;
    const auto g = posenc::attention_backward(q, k, v, w, opt, rope, ng);
    auto loss = [&] { return posenc::attention(q, k, v, opt, rope).cwiseProduct(w).sum(); };
    CHECK(max_abs_diff(g.dq, numeric_grad(q, loss)) < 1e-8);
    CHECK(max_abs_diff(g.dk, numeric_grad(k, loss)) < 1e-8);
    CHECK(max_abs_diff(g.dv, numeric_grad(v, loss)) < 1e-8);
  }
  {
    rmat<double> table = random_matrix(10, d, 25);
    const posenc::absolute_policy abs(table);
    auto grad = abs.zero_gradient();
    const auto g = posenc::attention_backward(q, k, v, w, opt, abs, grad);
    auto loss = [&] {
      return posenc::attention(q, k, v, opt, posenc::absolute_policy(table)).cwiseProduct(w).sum();
    };
    CHECK(max_abs_diff(g.dq, numeric_grad(q, loss)) < 1e-8);
    CHECK(max_abs_diff(g.dk, numeric_grad(k, loss)) < 1e-8);
    CHECK(max_abs_diff(grad.table, numeric_grad(table, loss)) < 1e-8);
    CHECK(grad.table.norm() > 1e-3);
  }
}
