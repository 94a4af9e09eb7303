// Gradients of attention with Shaw et al. relative tables: goldens from
// tests/reference/relative.py, and central finite differences in double.

#include <posenc/attention/backward.hpp>
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
using posenc_test::numeric_gradient;

namespace {

dmat g(const std::string& c, const std::string& what) {
  return posenc_test::golden_matrix<double>("relative_" + c + "_" + what + ".npy");
}

}  // namespace

TEST_CASE("shaw gradients match the numpy reference", "[attention][shaw][gradient][golden]") {
  struct golden_case {
    const char* name;
    posenc::shaw_clip clip;
    bool causal;
    Index q_offset;
  };
  for (const golden_case& c :
       {golden_case{"shaw_sym", posenc::shaw_clip::symmetric(2), false, 0},
        golden_case{"shaw_asym", posenc::shaw_clip::asymmetric(3, 1), true, 2}}) {
    INFO(c.name);
    const dmat q = g(c.name, "q"), k = g(c.name, "k"), v = g(c.name, "v");
    posenc::shaw_policy<double> shaw(c.clip, q.cols(), v.cols());
    shaw.key_tables() = g(c.name, "ak");
    shaw.value_tables() = g(c.name, "av");
    posenc::attention_config opt;
    opt.mask.causal = c.causal;
    opt.q_offset = c.q_offset;
    auto grad = shaw.zero_gradient();
    const auto d = posenc::attention_backward(q, k, v, g(c.name, "dout"), opt, shaw, grad);
    CHECK(posenc_test::max_abs_diff(d.dq, g(c.name, "dq")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(d.dk, g(c.name, "dk")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(d.dv, g(c.name, "dv")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(grad.key, g(c.name, "dak")) < 1e-12);
    CHECK(posenc_test::max_abs_diff(grad.value, g(c.name, "dav")) < 1e-12);
  }
}

TEST_CASE("shaw table gradients agree with finite differences", "[attention][shaw][gradient]") {
  std::mt19937 gen(31);
  const Index lq = 5, lk = 8, heads = 4, kv_heads = 2, d = 3, dv = 2;
  const auto clip = posenc::shaw_clip::asymmetric(2, 1);
  for (Index tables : {Index(1), heads})
    for (bool causal : {false, true}) {
      INFO("tables " << tables << " causal " << causal);
      posenc::shaw_policy<double> shaw(clip, d, dv, tables);
      shaw.key_tables() = normal_matrix(tables * clip.rows(), d, gen);
      shaw.value_tables() = normal_matrix(tables * clip.rows(), dv, gen);
      dmat q = normal_matrix(lq, heads * d, gen), k = normal_matrix(lk, kv_heads * d, gen),
           v = normal_matrix(lk, kv_heads * dv, gen);
      const dmat dout = normal_matrix(lq, heads * dv, gen);
      posenc::attention_config opt;
      opt.mask.causal = causal;
      opt.q_offset = 3;
      auto grad = shaw.zero_gradient();
      const auto d_in =
          posenc::multi_head_attention_backward(q, k, v, dout, heads, kv_heads, opt, shaw, grad);
      const auto f = [&] {
        return posenc::multi_head_attention(q, k, v, heads, kv_heads, opt, shaw);
      };
      CHECK(posenc_test::max_abs_diff(grad.key, numeric_gradient(shaw.key_tables(), dout, f)) <
            1e-8);
      CHECK(posenc_test::max_abs_diff(grad.value, numeric_gradient(shaw.value_tables(), dout, f)) <
            1e-8);
      CHECK(posenc_test::max_abs_diff(d_in.dq, numeric_gradient(q, dout, f)) < 1e-8);
      CHECK(posenc_test::max_abs_diff(d_in.dk, numeric_gradient(k, dout, f)) < 1e-8);
      CHECK(posenc_test::max_abs_diff(d_in.dv, numeric_gradient(v, dout, f)) < 1e-8);
      // The gradient is not trivially zero.
      CHECK(grad.key.norm() > 1e-3);
      CHECK(grad.value.norm() > 1e-3);
    }
}

TEST_CASE("shaw tables train: SGD lowers a regression loss", "[attention][shaw][gradient]") {
  // Learn tables that make attention reproduce the output of a teacher's tables.
  std::mt19937 gen(32);
  const Index l = 6, d = 4, dv = 3;
  const auto clip = posenc::shaw_clip::symmetric(2);
  posenc::shaw_policy<double> teacher(clip, d, dv), student(clip, d, dv);
  teacher.key_tables() = normal_matrix(clip.rows(), d, gen);
  teacher.value_tables() = normal_matrix(clip.rows(), dv, gen);
  const dmat q = normal_matrix(l, d, gen), k = normal_matrix(l, d, gen),
             v = normal_matrix(l, dv, gen);
  const dmat target = posenc::attention(q, k, v, {}, teacher);
  const auto loss = [&](dmat* dout) {
    const dmat diff = posenc::attention(q, k, v, {}, student) - target;
    if (dout) *dout = diff;  // d(0.5 |diff|^2) / d(out)
    return 0.5 * diff.squaredNorm();
  };
  const double first = loss(nullptr);
  for (int step = 0; step < 100; ++step) {
    dmat dout;
    loss(&dout);
    auto grad = student.zero_gradient();
    posenc::attention_backward(q, k, v, dout, {}, student, grad);
    student.sgd_step(grad, 0.5);
  }
  const double last = loss(nullptr);
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.01 * first);
}

TEST_CASE("shaw backward rejects a gradient of the wrong shape", "[attention][shaw][error]") {
  posenc::shaw_policy<double> shaw(posenc::shaw_clip::symmetric(1), 2, 2);
  const dmat x = dmat::Ones(3, 2);
  auto grad = shaw.zero_gradient();
  grad.key.resize(2, 2);
  POSENC_REQUIRE_ERROR(posenc::attention_backward(x, x, x, x, {}, shaw, grad),
                       "gradient.key.rows() = 2");
  grad = shaw.zero_gradient();
  grad.value.resize(3, 1);
  POSENC_REQUIRE_ERROR(posenc::attention_backward(x, x, x, x, {}, shaw, grad),
                       "gradient.value.rows() = 3");
}
