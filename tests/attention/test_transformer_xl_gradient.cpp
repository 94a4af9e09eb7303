// Gradients of Transformer-XL relative attention (u, v, W_R and the inputs): goldens from
// tests/reference/relative.py, and central finite differences in double.

#include <posenc/attention/backward.hpp>
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
using posenc_test::numeric_gradient;

namespace {

dmat g(const std::string& c, const std::string& what) {
  return posenc_test::golden_matrix<double>("relative_txl_" + c + "_" + what + ".npy");
}

}  // namespace

TEST_CASE("transformer-xl gradients match the numpy reference",
          "[attention][txl][gradient][golden]") {
  SECTION("two heads, W_R, memory of 3, causal") {
    const dmat q = g("mem", "q"), k = g("mem", "k"), v = g("mem", "v");
    posenc::transformer_xl_policy<double> xl(2, 4, 6);
    xl.u() = g("mem", "u");
    xl.v() = g("mem", "vbias");
    xl.w_r() = g("mem", "w_r");
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = 3;
    auto grad = xl.zero_gradient();
    const auto d =
        posenc::multi_head_attention_backward(q, k, v, g("mem", "dout"), 2, 2, opt, xl, grad);
    CHECK(posenc_test::max_abs_diff(d.dq, g("mem", "dq")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(d.dk, g("mem", "dk")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(d.dv, g("mem", "dv")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(grad.u, g("mem", "du")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(grad.v, g("mem", "dvbias")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(grad.w_r, g("mem", "dw_r")) < 1e-12);
  }
  SECTION("one head, P = R, bidirectional") {
    const dmat q = g("bi", "q"), k = g("bi", "k"), v = g("bi", "v");
    posenc::transformer_xl_policy<double> xl(1, 4);
    xl.u() = g("bi", "u");
    xl.v() = g("bi", "vbias");
    auto grad = xl.zero_gradient();
    const auto d = posenc::attention_backward(q, k, v, g("bi", "dout"), {}, xl, grad);
    CHECK(posenc_test::max_abs_diff(d.dq, g("bi", "dq")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(d.dk, g("bi", "dk")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(d.dv, g("bi", "dv")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(grad.u, g("bi", "du")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(grad.v, g("bi", "dvbias")) < 1e-12);
    CHECK(grad.w_r.size() == 0);
  }
}

TEST_CASE("transformer-xl u, v, W_R gradients agree with finite differences",
          "[attention][txl][gradient]") {
  std::mt19937 gen(41);
  const Index lq = 4, mem = 3, lk = lq + mem, heads = 2, kv_heads = 1, d = 4;
  for (Index d_r : {0, 6})
    for (bool causal : {false, true}) {
      INFO("d_R " << d_r << " causal " << causal);
      posenc::transformer_xl_policy<double> xl(heads, d, d_r);
      xl.u() = normal_matrix(heads, d, gen);
      xl.v() = normal_matrix(heads, d, gen);
      if (d_r > 0) xl.w_r() = 0.5 * normal_matrix(d_r, heads * d, gen);
      dmat q = normal_matrix(lq, heads * d, gen), k = normal_matrix(lk, kv_heads * d, gen),
           v = normal_matrix(lk, kv_heads * 3, gen);
      const dmat dout = normal_matrix(lq, heads * 3, gen);
      posenc::attention_config opt;
      opt.mask.causal = causal;
      opt.q_offset = mem;
      auto grad = xl.zero_gradient();
      const auto d_in =
          posenc::multi_head_attention_backward(q, k, v, dout, heads, kv_heads, opt, xl, grad);
      const auto f = [&] {
        return posenc::multi_head_attention(q, k, v, heads, kv_heads, opt, xl);
      };
      CHECK(posenc_test::max_abs_diff(grad.u, numeric_gradient(xl.u(), dout, f)) < 1e-8);
      CHECK(posenc_test::max_abs_diff(grad.v, numeric_gradient(xl.v(), dout, f)) < 1e-8);
      if (d_r > 0) {
        CHECK(posenc_test::max_abs_diff(grad.w_r, numeric_gradient(xl.w_r(), dout, f)) < 1e-8);
        CHECK(grad.w_r.norm() > 1e-3);
      }
      CHECK(posenc_test::max_abs_diff(d_in.dq, numeric_gradient(q, dout, f)) < 1e-8);
      CHECK(posenc_test::max_abs_diff(d_in.dk, numeric_gradient(k, dout, f)) < 1e-8);
      CHECK(posenc_test::max_abs_diff(d_in.dv, numeric_gradient(v, dout, f)) < 1e-8);
      CHECK(grad.u.norm() > 1e-3);
      CHECK(grad.v.norm() > 1e-3);
    }
}

TEST_CASE("transformer-xl parameters train: SGD lowers a regression loss",
          "[attention][txl][gradient]") {
  std::mt19937 gen(42);
  const Index l = 6, heads = 2, d = 4;
  posenc::transformer_xl_policy<double> teacher(heads, d, 4), student(heads, d, 4);
  teacher.u() = normal_matrix(heads, d, gen);
  teacher.v() = normal_matrix(heads, d, gen);
  teacher.w_r() = normal_matrix(4, heads * d, gen);
  student.w_r() = 0.1 * normal_matrix(4, heads * d, gen);
  const dmat q = normal_matrix(l, heads * d, gen), k = normal_matrix(l, heads * d, gen),
             v = normal_matrix(l, heads * d, gen);
  posenc::attention_config opt;
  opt.mask.causal = true;
  const dmat target = posenc::multi_head_attention(q, k, v, heads, heads, opt, teacher);
  const auto loss = [&](dmat* dout) {
    const dmat diff = posenc::multi_head_attention(q, k, v, heads, heads, opt, student) - target;
    if (dout) *dout = diff;
    return 0.5 * diff.squaredNorm();
  };
  const double first = loss(nullptr);
  for (int step = 0; step < 100; ++step) {
    dmat dout;
    loss(&dout);
    auto grad = student.zero_gradient();
    posenc::multi_head_attention_backward(q, k, v, dout, heads, heads, opt, student, grad);
    student.sgd_step(grad, 0.2);
  }
  const double last = loss(nullptr);
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.1 * first);
}

TEST_CASE("transformer-xl backward rejects a gradient of the wrong shape",
          "[attention][txl][error]") {
  posenc::transformer_xl_policy<double> xl(1, 2, 4);
  const dmat x = dmat::Ones(3, 2);
  auto grad = xl.zero_gradient();
  grad.w_r.resize(4, 1);
  POSENC_REQUIRE_ERROR(posenc::attention_backward(x, x, x, x, {}, xl, grad),
                       "gradient.w_r.rows() = 4");
  grad = xl.zero_gradient();
  grad.u.resize(2, 2);
  POSENC_REQUIRE_ERROR(posenc::attention_backward(x, x, x, x, {}, xl, grad),
                       "gradient.u.rows() = 2");
}
