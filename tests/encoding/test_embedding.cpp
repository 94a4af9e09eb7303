#include <cmath>
#include <cstdint>
#include <limits>
#include <posenc/encoding/embedding.hpp>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using rowmat = posenc::row_matrix<double>;
using rowmatf = posenc::row_matrix<float>;
using idmat = Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

std::vector<Index> as_ids(const idmat& m) {
  return std::vector<Index>(m.data(), m.data() + m.size());
}

posenc::embedding_options options(posenc::embedding_scale scale, Index padding, double p,
                                  std::uint64_t seed) {
  posenc::embedding_options o;
  o.scale = scale;
  o.padding_idx = padding;
  o.dropout = p;
  o.dropout_seed = seed;
  return o;
}

// sum(out .* g): its gradient with respect to out is g.
double loss(posenc::embedding_layer<double>& layer, const idmat& ids, Index offset,
            const rowmat& g) {
  layer.seed_dropout(11);  // the same mask for every evaluation
  return layer.forward(ids, offset).cwiseProduct(g).sum();
}

}  // namespace

TEST_CASE("golden: vaswani PE, sqrt(d), padding id, dropout, [B, L] ids", "[embedding][golden]") {
  const idmat ids = posenc_test::golden_matrix<std::int64_t>("embedding_vaswani_ids.npy");
  REQUIRE(ids.rows() == 2);
  posenc::embedding_layer<double> layer(11, 6, 5, posenc::sinusoidal<double>(6),
                                        options(posenc::embedding_scale::sqrt_dim, 0, 0.25, 9));
  const rowmat out = layer.forward(ids, 3);
  CHECK(posenc_test::max_abs_diff(out, posenc_test::golden_matrix("embedding_vaswani_out.npy")) <
        1e-13);
  layer.backward(posenc_test::golden_matrix("embedding_vaswani_grad_out.npy"));
  CHECK(posenc_test::max_abs_diff(layer.token_table().gradient(),
                                  posenc_test::golden_matrix("embedding_vaswani_dtokens.npy")) <
        1e-13);
  layer.eval();
  CHECK(posenc_test::max_abs_diff(layer.forward(ids, 3),
                                  posenc_test::golden_matrix("embedding_vaswani_out_eval.npy")) <
        1e-13);
  // float: the same values within float rounding
  posenc::embedding_layer<float> lf(11, 6, 5, posenc::sinusoidal<float>(6),
                                    options(posenc::embedding_scale::sqrt_dim, 0, 0.25, 9));
  CHECK(posenc_test::max_abs_diff(lf.forward(ids, 3), out) < 2e-6);
}

TEST_CASE("golden: learned positions at an offset, [L] ids, their gradients",
          "[embedding][golden]") {
  const auto ids = as_ids(posenc_test::golden_matrix<std::int64_t>("embedding_learned_ids.npy"));
  REQUIRE(ids.size() == 7);
  posenc::embedding_layer<double> layer(posenc::learned_table<double>(13, 4, 3),
                                        posenc::learned_table<double>(10, 4, 8),
                                        options(posenc::embedding_scale::none, -1, 0.5, 4));
  CHECK(posenc_test::max_abs_diff(layer.forward(ids, 2),
                                  posenc_test::golden_matrix("embedding_learned_out.npy")) < 1e-15);
  layer.backward(posenc_test::golden_matrix("embedding_learned_grad_out.npy"));
  CHECK(posenc_test::max_abs_diff(layer.token_table().gradient(),
                                  posenc_test::golden_matrix("embedding_learned_dtokens.npy")) <
        1e-15);
  REQUIRE(layer.learned_positions() != nullptr);
  CHECK(posenc_test::max_abs_diff(layer.learned_positions()->gradient(),
                                  posenc_test::golden_matrix("embedding_learned_dpositions.npy")) <
        1e-15);
}

TEST_CASE("golden: fairseq PE from its first position, no dropout", "[embedding][golden]") {
  const idmat ids = posenc_test::golden_matrix<std::int64_t>("embedding_fairseq_ids.npy");
  const posenc::sinusoidal<double> pe(posenc::sinusoidal_config::fairseq(8, 1));
  posenc::embedding_layer<double> layer(9, 8, 6, pe);
  const rowmat out = layer.forward(ids, pe.fairseq_first_position());
  CHECK(posenc_test::max_abs_diff(out, posenc_test::golden_matrix("embedding_fairseq_out.npy")) <
        1e-13);
  layer.backward(posenc_test::golden_matrix("embedding_fairseq_grad_out.npy"));
  CHECK(posenc_test::max_abs_diff(layer.token_table().gradient(),
                                  posenc_test::golden_matrix("embedding_fairseq_dtokens.npy")) <
        1e-15);
  // backward adds up: a second one doubles the gradient (up to the order of the sums),
  // zero_grad clears it
  const rowmat once = layer.token_table().gradient();
  layer.backward(posenc_test::golden_matrix("embedding_fairseq_grad_out.npy"));
  CHECK(posenc_test::max_abs_diff(layer.token_table().gradient(), 2 * once) < 1e-15);
  layer.zero_grad();
  CHECK(layer.token_table().gradient().isZero(0));
}

TEST_CASE("eval mode is s * T(id) + PE(offset + t) exactly", "[embedding]") {
  const Index d = 12;
  const float s = static_cast<float>(std::sqrt(12.0));
  Eigen::Matrix<int, 3, 5, Eigen::RowMajor> ids;
  ids << 0, 19, 3, 3, 7, 1, 2, 18, 0, 5, 9, 9, 9, 4, 11;
  const auto expect_exact = [&](const posenc::embedding_layer<float>& layer, const rowmatf& out,
                                const rowmatf& pe, float scale) {
    REQUIRE(out.rows() == 15);
    for (Index b = 0; b < 3; ++b)
      for (Index t = 0; t < 5; ++t)
        for (Index c = 0; c < d; ++c) {
          const float w = layer.token_table().weights()(ids(b, t), c);
          if (pe.size() == 0) {
            CHECK(out(b * 5 + t, c) == scale * w);
            continue;
          }
          // s * T + P rounded twice, or once where the compiler fuses it into an FMA (GCC's
          // default -ffp-contract=fast does with AVX-512 or FMA flags): either is exact
          volatile float product = scale * w;  // volatile: this side is never fused
          const float twice = product + pe(t, c), once = std::fma(scale, w, pe(t, c));
          const float got = out(b * 5 + t, c);
          CHECK((got == twice || got == once));
        }
  };
  const auto opts = options(posenc::embedding_scale::sqrt_dim, -1, 0.5, 1);
  const posenc::sinusoidal<float> sin_pe(d);
  posenc::embedding_layer<float> a(20, d, 1, sin_pe, opts);
  a.eval();
  CHECK_FALSE(a.training());
  expect_exact(a, a.forward(ids, 40), sin_pe.table(5, 40), s);

  const posenc::learned_table<float> wpe(64, d, 2);
  posenc::embedding_layer<float> b(20, d, 1, wpe, opts);
  b.eval();
  expect_exact(b, b.forward(ids, 7), wpe.table(5, 7), s);

  posenc::embedding_layer<float> c(20, d, 1, posenc::no_positions{});
  c.eval();
  expect_exact(c, c.forward(ids), rowmatf(), 1.0f);
  // training mode with p = 0 is the identity too
  posenc::embedding_layer<float> e(20, d, 1, sin_pe);
  CHECK(e.training());
  expect_exact(e, e.forward(ids, 40), sin_pe.table(5, 40), 1.0f);
}

TEST_CASE("a GPT-2 checkpoint's wte + wpe: x = wte[id] + wpe[t]", "[embedding][io]") {
  const std::string file = posenc_test::data_path("absolute_gpt2_tiny.safetensors");
  const auto wte = posenc::learned_table<float>::load_safetensors(file, "transformer.wte.weight");
  const auto wpe = posenc::learned_table<float>::load_safetensors(file, "transformer.wpe.weight");
  posenc::embedding_layer<float> layer(wte, wpe);
  const std::vector<Index> ids = {9, 0, 4, 4};
  const rowmatf out = layer.forward(ids, 12);
  for (Index t = 0; t < 4; ++t)
    CHECK((out.row(t) -
           (wte.weights().row(ids[static_cast<std::size_t>(t)]) + wpe.weights().row(12 + t)))
              .isZero(0));
  // an Eigen vector is one sequence, like the std::vector
  Eigen::VectorXi v(4);
  v << 9, 0, 4, 4;
  CHECK(layer.forward(v, 12) == out);
  // no ids: an empty [0, d] output
  CHECK(layer.forward(std::vector<Index>{}).rows() == 0);
  CHECK(layer.forward(std::vector<Index>{}).cols() == 6);
}

TEST_CASE("dropout: fraction kept, kept values scaled by 1/(1-p), mean preserved",
          "[embedding][dropout]") {
  const Index d = 64, batch = 16, len = 256;  // 262144 elements
  const double p = 0.3;
  posenc::embedding_layer<float> layer(posenc::learned_table<float>(rowmatf::Ones(8, d)),
                                       posenc::no_positions{},
                                       options(posenc::embedding_scale::none, -1, p, 2024));
  idmat ids(batch, len);
  for (Index k = 0; k < ids.size(); ++k) ids.data()[k] = k % 8;
  const rowmatf out = layer.forward(ids);
  const auto n = static_cast<double>(out.size());
  const double kept = static_cast<double>((out.array() != 0.0f).count()) / n;
  // sigma of the kept fraction: sqrt(p (1 - p) / n) = 9e-4
  CHECK(std::abs(kept - (1 - p)) < 0.0045);
  const float keep = static_cast<float>(1.0 / (1.0 - p));
  CHECK((out.array() == 0.0f || out.array() == keep).all());
  // sigma of the mean: sqrt(p / (1 - p) / n) = 1.3e-3
  CHECK(std::abs(out.cast<double>().mean() - 1.0) < 0.0065);
  // the mask is not a pattern repeated per row: rows differ
  CHECK(out.row(0) != out.row(8));
  // p = 0.9 still keeps about a tenth, each scaled by 10
  posenc::embedding_layer<double> heavy(posenc::learned_table<double>(rowmat::Ones(8, d)),
                                        posenc::no_positions{},
                                        options(posenc::embedding_scale::none, -1, 0.9, 1));
  const rowmat h = heavy.forward(ids);
  CHECK(std::abs(static_cast<double>((h.array() != 0.0).count()) / n - 0.1) < 0.003);
  CHECK(std::abs(h.mean() - 1.0) < 0.03);
}

TEST_CASE("dropout is reproducible: same seed and calls, same masks; eval draws nothing",
          "[embedding][dropout]") {
  const auto opts = options(posenc::embedding_scale::sqrt_dim, -1, 0.5, 77);
  posenc::embedding_layer<float> a(30, 16, 3, posenc::sinusoidal<float>(16), opts);
  posenc::embedding_layer<float> b(30, 16, 3, posenc::sinusoidal<float>(16), opts);
  const std::vector<Index> ids = {1, 5, 29, 0, 7, 7};
  const rowmatf a1 = a.forward(ids), a2 = a.forward(ids, 3);
  CHECK(b.forward(ids) == a1);
  CHECK(b.forward(ids, 3) == a2);
  // successive calls draw new masks
  CHECK(a.forward(ids) != a1);
  // reseeding restarts the sequence
  a.seed_dropout(77);
  CHECK(a.forward(ids) == a1);
  // an eval-mode call in between draws nothing
  a.seed_dropout(77);
  b.seed_dropout(77);
  a.eval();
  const rowmatf e = a.forward(ids);
  a.train();
  CHECK(a.forward(ids) == b.forward(ids));
  // another seed, another mask
  posenc::embedding_layer<float> c(30, 16, 3, posenc::sinusoidal<float>(16),
                                   options(posenc::embedding_scale::sqrt_dim, -1, 0.5, 78));
  CHECK(c.forward(ids) != a1);
  // every kept element is the eval value times 1 / (1 - p) = 2, exactly
  for (Index k = 0; k < a1.size(); ++k)
    CHECK((a1.data()[k] == 0.0f || a1.data()[k] == 2.0f * e.data()[k]));
}

TEST_CASE("padding index: zero-initialised, no gradient, unchanged by SGD", "[embedding]") {
  posenc::embedding_layer<double> layer(10, 4, 1, posenc::learned_table<double>(8, 4, 2),
                                        options(posenc::embedding_scale::sqrt_dim, 2, 0.0, 0));
  CHECK(layer.token_table().weights().row(2).isZero(0));
  CHECK_FALSE(layer.token_table().weights().row(3).isZero(0));
  const std::vector<Index> ids = {2, 3, 2, 9};
  const rowmat out = layer.forward(ids);
  // the padding token still gets its position (x = s * 0 + W(t))
  CHECK(out.row(0) == layer.learned_positions()->weights().row(0));
  layer.backward(rowmat::Ones(4, 4));
  CHECK(layer.token_table().gradient().row(2).isZero(0));
  CHECK(layer.token_table().gradient()(3, 0) == Approx(2.0));  // s = sqrt(4)
  CHECK(layer.learned_positions()->gradient().row(0) == Eigen::RowVector4d::Ones());
  layer.sgd_step(0.5);
  CHECK(layer.token_table().weights().row(2).isZero(0));
  // a loaded table keeps its padding row (as torch's from_pretrained)
  const posenc::learned_table<double> loaded(rowmat::Constant(5, 4, 0.5));
  posenc::embedding_layer<double> l2(loaded, posenc::no_positions{},
                                     options(posenc::embedding_scale::none, 0, 0.0, 0));
  CHECK(l2.token_table().weights().row(0) == loaded.weights().row(0));
}

TEST_CASE("backward matches finite differences through dropout and sqrt(d)",
          "[embedding][gradient]") {
  const Index d = 4;
  posenc::embedding_layer<double> layer(7, d, 21, posenc::learned_table<double>(6, d, 22),
                                        options(posenc::embedding_scale::sqrt_dim, 1, 0.4, 11));
  idmat ids(2, 3);
  ids << 0, 1, 3, 3, 6, 1;  // repeated ids, the padding id 1
  const Index offset = 2;
  rowmat g(6, d);
  for (Index k = 0; k < g.size(); ++k) g.data()[k] = std::sin(0.7 * static_cast<double>(k) + 0.2);
  layer.zero_grad();
  loss(layer, ids, offset, g);
  layer.backward(g);
  const rowmat dtok = layer.token_table().gradient();
  const rowmat dpos = layer.learned_positions()->gradient();
  REQUIRE_FALSE(dtok.isZero(0));
  REQUIRE_FALSE(dpos.isZero(0));

  const double h = 1e-6;
  const auto fd = [&](double& w) {
    const double w0 = w;
    w = w0 + h;
    const double up = loss(layer, ids, offset, g);
    w = w0 - h;
    const double down = loss(layer, ids, offset, g);
    w = w0;
    return (up - down) / (2 * h);
  };
  auto tokens = layer.token_table().mutable_weights();
  for (Index r = 0; r < tokens.rows(); ++r)
    for (Index c = 0; c < d; ++c) {
      if (r == 1) continue;  // the padding row: no gradient by definition, checked below
      INFO("token row " << r << " col " << c);
      CHECK(std::abs(fd(tokens(r, c)) - dtok(r, c)) < 1e-8);
    }
  CHECK(dtok.row(1).isZero(0));
  auto positions = layer.learned_positions()->mutable_weights();
  for (Index r = 0; r < positions.rows(); ++r)
    for (Index c = 0; c < d; ++c) {
      INFO("position row " << r << " col " << c);
      CHECK(std::abs(fd(positions(r, c)) - dpos(r, c)) < 1e-8);
    }
  // rows outside offset .. offset + L - 1 get nothing
  CHECK(dpos.topRows(2).isZero(0));
  CHECK(dpos.row(5).isZero(0));
}

TEST_CASE("errors name the parameter and its value", "[embedding][errors]") {
  posenc::embedding_layer<float> layer(10, 4, 1, posenc::learned_table<float>(8, 4, 2));
  POSENC_REQUIRE_ERROR(layer.backward(rowmatf::Zero(1, 4)), "forward calls");
  POSENC_REQUIRE_ERROR(layer.forward(std::vector<Index>{1, 2, 3, 10}), "token_ids[3] = 10");
  POSENC_REQUIRE_ERROR(layer.forward(std::vector<Index>{-1}), "token_ids[0] = -1");
  idmat ids(2, 3);
  ids << 0, 1, 2, 3, 4, -7;
  POSENC_REQUIRE_ERROR(layer.forward(ids), "token_ids[1, 2] = -7");
  ids(1, 2) = 5;
  POSENC_REQUIRE_ERROR(layer.forward(ids, 6), "offset + len = 9");
  POSENC_REQUIRE_ERROR(layer.forward(ids, -1), "offset = -1");
  CHECK(layer.forward(ids, 5).rows() == 6);  // positions 5 .. 7: the last rows of the table
  POSENC_REQUIRE_ERROR(layer.backward(rowmatf::Zero(5, 4)), "grad_output.rows = 5");
  POSENC_REQUIRE_ERROR(layer.backward(rowmatf::Zero(6, 3)), "grad_output.cols = 3");

  posenc::embedding_layer<float> sin_layer(10, 4, 1, posenc::sinusoidal<float>(4));
  POSENC_REQUIRE_ERROR(sin_layer.forward(std::vector<Index>{1, 2}, posenc::sinusoidal_max_position),
                       "offset + len - 1");

  using opt = posenc::embedding_options;
  const auto with = [](double p, Index pad) {
    opt o;
    o.dropout = p;
    o.padding_idx = pad;
    return o;
  };
  const auto make = [](const opt& o) {
    return posenc::embedding_layer<float>(10, 4, 1, posenc::no_positions{}, o);
  };
  POSENC_REQUIRE_ERROR(make(with(1.0, -1)), "options.dropout = 1");
  POSENC_REQUIRE_ERROR(make(with(-0.1, -1)), "options.dropout = -0.1");
  POSENC_REQUIRE_ERROR(make(with(std::numeric_limits<double>::quiet_NaN(), -1)), "options.dropout");
  POSENC_REQUIRE_ERROR(make(with(0.0, 10)), "options.padding_idx = 10");
  POSENC_REQUIRE_ERROR(make(with(0.0, -2)), "options.padding_idx = -2");
  POSENC_REQUIRE_ERROR(posenc::embedding_layer<float>(10, 4, 1, posenc::sinusoidal<float>(6)),
                       "positions.dim = 6");
  POSENC_REQUIRE_ERROR(
      posenc::embedding_layer<float>(10, 4, 1, posenc::learned_table<float>(8, 5, 2)),
      "positions.dim = 5");
  POSENC_REQUIRE_ERROR(posenc::embedding_layer<float>(0, 4, 1), "vocab = 0");
  POSENC_REQUIRE_ERROR(posenc::embedding_layer<float>(10, 0, 1), "dim = 0");
}
