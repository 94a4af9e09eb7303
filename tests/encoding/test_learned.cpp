#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <posenc/core/random.hpp>
#include <posenc/encoding/learned.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <random>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using rowmat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using rowmatf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

TEST_CASE("the generator matches the reference bit for bit", "[learned][random][golden]") {
  const auto u = posenc_test::golden_matrix<std::int64_t>("absolute_rng_seed42_u64.npy");
  posenc::random_generator g(42);
  for (Index i = 0; i < u.size(); ++i)
    CHECK(g.next_u64() == static_cast<std::uint64_t>(u.data()[i]));
  const auto z = posenc_test::golden_matrix<double>("absolute_rng_seed42_normal.npy");
  posenc::random_generator h(42);
  for (Index i = 0; i < z.size(); ++i) CHECK(h.normal() == z.data()[i]);  // exact
  // splitmix64's published first output for seed 1234567
  std::uint64_t st = 1234567;
  CHECK(posenc::splitmix64(st) == 6457827717110365317ull);
  // Different seeds differ; uniform() stays in [0, 1).
  posenc::random_generator a(1), b(2);
  CHECK(a.next_u64() != b.next_u64());
  for (int i = 0; i < 1000; ++i) {
    const double x = a.uniform();
    REQUIRE(x >= 0.0);
    REQUIRE(x < 1.0);
  }
}

TEST_CASE("the portable log and normal transform are accurate", "[learned][random]") {
  for (double x : {1e-300, 3e-17, 0.001, 0.1, 0.5, 0.7071, 0.75, 0.999999, 1.0, 2.0, 1e10})
    CHECK(posenc::detail::portable_log(x) == Approx(std::log(x)).epsilon(1e-15).margin(1e-300));
  posenc::random_generator g(3);
  const int n = 200000;
  double sum = 0, sq = 0, fourth = 0;
  for (int i = 0; i < n; ++i) {
    const double z = g.normal(1.0, 0.5);
    sum += z;
    sq += (z - 1.0) * (z - 1.0);
    fourth += std::pow((z - 1.0) / 0.5, 4);
  }
  CHECK(std::abs(sum / n - 1.0) < 0.005);  // ~ 5 sigma of the mean
  CHECK(std::abs(std::sqrt(sq / n) - 0.5) < 0.005);
  CHECK(std::abs(fourth / n - 3.0) < 0.1);  // normal kurtosis
}

TEST_CASE("seeded N(0, 0.02) init: same seed, same table; golden first values",
          "[learned][golden]") {
  const auto golden = posenc_test::golden_matrix<double>("absolute_learned_seed7_8x6.npy");
  const posenc::learned_table<double> d(8, 6, 7);
  CHECK(d.weights() == golden);  // bit for bit
  const posenc::learned_table<float> f(8, 6, 7);
  CHECK(f.weights() == golden.cast<float>());
  CHECK(posenc::learned_table<float>(8, 6, 7).weights() == f.weights());
  CHECK(posenc::learned_table<float>(8, 6, 8).weights() != f.weights());
  CHECK(d.max_len() == 8);
  CHECK(d.dim() == 6);
  CHECK(d.gradient().isZero(0));
  // The spread is the requested one.
  const posenc::learned_table<double> big(512, 64, 99);
  const double mean = big.weights().mean();
  const double sd = std::sqrt((big.weights().array() - mean).square().mean());
  CHECK(std::abs(mean) < 0.001);
  CHECK(std::abs(sd - 0.02) < 0.0005);
  const posenc::learned_table<double> wide(16, 4, 99, 1.5);
  CHECK(wide.weights().cwiseAbs().maxCoeff() > 0.5);
}

TEST_CASE("lookup, table and add_to", "[learned][add]") {
  const posenc::learned_table<float> t(20, 8, 1);
  const std::vector<Index> pos = {3, 0, 19, 3};
  const rowmatf rows = t.at(pos);
  for (std::size_t r = 0; r < pos.size(); ++r)
    CHECK(rows.row(static_cast<Index>(r)) == t.weights().row(pos[r]));
  Eigen::Matrix<std::int64_t, 1, Eigen::Dynamic> pv(2);
  pv << 19, 2;
  CHECK(t.at(pv).row(1) == t.weights().row(2));
  CHECK(t.table(5, 15) == t.weights().bottomRows(5));
  CHECK(t.table(0, 20).rows() == 0);

  rowmatf e = rowmatf::Constant(5, 8, 0.5f);
  rowmatf a = e;
  t.add_to(a, 2);
  CHECK(a == rowmatf(e + t.weights().middleRows(2, 5)));
  rowmatf s = e;
  t.add_to(s, 2, posenc::embedding_scale::sqrt_dim);
  CHECK(posenc_test::max_abs_diff(s, rowmatf(std::sqrt(8.0f) * e + t.weights().middleRows(2, 5))) ==
        0.0);
  rowmatf at = e.topRows(4);
  t.add_at(at, pos);
  CHECK(at == rowmatf(e.topRows(4) + rows));
  // [batch, seq, d] view and a column-major matrix
  std::vector<float> buf(2 * 5 * 8, 0.5f);
  t.add_to(posenc::batch_view<float>::contiguous(buf.data(), {2, 5, 8}), 2);
  for (Index b = 0; b < 2; ++b) CHECK(Eigen::Map<rowmatf>(buf.data() + b * 40, 5, 8) == a);
  Eigen::MatrixXf col = e;
  t.add_to(col, 2);
  CHECK(posenc_test::max_abs_diff(col, a) == 0.0);
}

TEST_CASE("randomized shapes: lookup, add and backward agree with naive loops",
          "[learned][random-shapes]") {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 25; ++trial) {
    const Index L = static_cast<Index>(1 + rng() % 40), d = static_cast<Index>(1 + rng() % 33);
    const Index n = static_cast<Index>(rng() % 20);
    posenc::learned_table<float> t(L, d, rng());
    std::vector<Index> pos(static_cast<std::size_t>(n));
    for (auto& p : pos) p = static_cast<Index>(rng() % static_cast<std::uint64_t>(L));
    const rowmatf rows = t.at(pos);
    rowmatf e = rowmatf::Constant(n, d, 0.25f), g = rowmatf::Constant(n, d, 1.0f);
    t.add_at(e, pos);
    t.backward(g, pos);
    rowmatf counts = rowmatf::Zero(L, d);
    for (Index r = 0; r < n; ++r) {
      const Index p = pos[static_cast<std::size_t>(r)];
      for (Index c = 0; c < d; ++c) {
        REQUIRE(rows(r, c) == t.weights()(p, c));
        REQUIRE(e(r, c) == 0.25f + t.weights()(p, c));
        counts(p, c) += 1.0f;
      }
    }
    REQUIRE(t.gradient() == counts);
    const Index off = static_cast<Index>(rng() % static_cast<std::uint64_t>(L));
    rowmatf s = rowmatf::Zero(L - off, d);
    t.add_to(s, off);
    REQUIRE(s == t.weights().bottomRows(L - off));
  }
}

TEST_CASE("backward scatter-adds, repeated positions add up; SGD step", "[learned][grad]") {
  posenc::learned_table<double> t(6, 3, 5);
  rowmat g(4, 3);
  g << 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12;
  t.backward(g, std::vector<Index>{2, 5, 2, 0});
  rowmat expect = rowmat::Zero(6, 3);
  expect.row(2) = g.row(0) + g.row(2);
  expect.row(5) = g.row(1);
  expect.row(0) = g.row(3);
  CHECK(t.gradient() == expect);
  t.backward(g.topRows(2), 3);  // contiguous form: rows 3, 4
  expect.row(3) += g.row(0);
  expect.row(4) += g.row(1);
  CHECK(t.gradient() == expect);
  std::vector<double> gb(2 * 2 * 3, 1.0);
  t.backward(posenc::batch_view<const double>::contiguous(gb.data(), {2, 2, 3}), 4);
  expect.row(4).array() += 2.0;
  expect.row(5).array() += 2.0;
  CHECK(t.gradient() == expect);

  const rowmat before = t.weights();
  t.sgd_step(0.1);
  CHECK(posenc_test::max_abs_diff(t.weights(), rowmat(before - 0.1 * expect)) < 1e-15);
  CHECK(t.gradient() == expect);  // kept until zero_grad
  t.zero_grad();
  CHECK(t.gradient().isZero(0));
  t.sgd_step(0.0);
  CHECK(posenc_test::max_abs_diff(t.weights(), rowmat(before - 0.1 * expect)) == 0.0);
}

namespace {
// L = 0.5 |E + W[pos] - Y|^2 summed: a non-linear loss of the table.
double loss_of(const posenc::learned_table<double>& t, const rowmat& e,
               const std::vector<Index>& pos, const rowmat& y) {
  rowmat out = e;
  t.add_at(out, pos);
  return 0.5 * (out - y).squaredNorm();
}
}  // namespace

TEST_CASE("finite-difference gradient check", "[learned][grad]") {
  std::mt19937_64 rng(17);
  std::normal_distribution<double> nd;
  posenc::learned_table<double> t(7, 5, 3, 0.5);
  const std::vector<Index> pos = {1, 4, 4, 6, 0, 1, 1};
  rowmat e(7, 5), y(7, 5);
  for (Index k = 0; k < e.size(); ++k) {
    e.data()[k] = nd(rng);
    y.data()[k] = nd(rng);
  }
  rowmat out = e;
  t.add_at(out, pos);
  t.backward(rowmat(out - y), pos);  // dL/dout = out - y
  const rowmat analytic = t.gradient();
  rowmat numeric(7, 5);
  const double h = 1e-5;
  for (Index r = 0; r < 7; ++r)
    for (Index c = 0; c < 5; ++c) {
      const double w0 = t.weights()(r, c);
      t.mutable_weights()(r, c) = w0 + h;
      const double lp = loss_of(t, e, pos, y);
      t.mutable_weights()(r, c) = w0 - h;
      const double lm = loss_of(t, e, pos, y);
      t.mutable_weights()(r, c) = w0;
      numeric(r, c) = (lp - lm) / (2 * h);
    }
  CHECK(posenc_test::max_abs_diff(analytic, numeric) < 1e-7);
  CHECK(analytic.row(2).isZero(0));  // position 2 never used
  CHECK(analytic.row(1).norm() > 0.1);
}

TEST_CASE("toy training: the table learns a target and the loss falls", "[learned][grad]") {
  // Learn the sinusoidal table from random init through lookups at random positions.
  const Index L = 32, d = 8;
  const rowmat target = posenc::sinusoidal<double>(d).table(L);
  posenc::learned_table<double> t(L, d, 123);
  std::mt19937_64 rng(9);
  std::vector<double> losses;
  for (int step = 0; step < 200; ++step) {
    std::vector<Index> pos(16);
    for (auto& p : pos) p = static_cast<Index>(rng() % static_cast<std::uint64_t>(L));
    const rowmat out = t.at(pos);
    rowmat y(16, d);
    for (Index r = 0; r < 16; ++r) y.row(r) = target.row(pos[static_cast<std::size_t>(r)]);
    losses.push_back(0.5 * (out - y).squaredNorm() / 16.0);
    t.zero_grad();
    t.backward(rowmat((out - y) / 16.0), pos);
    t.sgd_step(2.0);
  }
  INFO("first loss " << losses.front() << " last loss " << losses.back());
  CHECK(losses.back() < 0.01 * losses.front());
  CHECK(posenc_test::max_abs_diff(t.weights(), target) < 0.05);
}

TEST_CASE("save/load .npy round trip; load from safetensors by name", "[learned][io][golden]") {
  const posenc::learned_table<float> f(9, 5, 77);
  const std::string path = posenc_test::tmp_path("learned_roundtrip.npy");
  f.save_npy(path);
  CHECK(posenc::learned_table<float>::load_npy(path).weights() == f.weights());
  CHECK(posenc::learned_table<double>::load_npy(path).weights() == f.weights().cast<double>());
  const posenc::learned_table<double> d(4, 3, 5);
  d.save_npy(path);
  CHECK(posenc::learned_table<double>::load_npy(path).weights() == d.weights());

  const std::string st = posenc_test::data_path("absolute_gpt2_tiny.safetensors");
  const auto wpe = posenc::learned_table<float>::load_safetensors(st, "transformer.wpe.weight");
  CHECK(wpe.max_len() == 16);
  CHECK(wpe.dim() == 6);
  CHECK(wpe.weights().cast<double>() ==
        posenc_test::golden_matrix<double>("absolute_gpt2_tiny_wpe.npy"));
  // The reference wrote exactly what the generator gives for seed 2024, rounded to f32.
  CHECK(wpe.weights() == posenc::learned_table<float>(16, 6, 2024).weights());
  const auto bert = posenc::learned_table<double>::load_safetensors(
      st, "bert.embeddings.position_embeddings.weight");
  CHECK(bert.weights() == posenc_test::golden_matrix<double>("absolute_gpt2_tiny_bert_pos.npy"));
  CHECK_THROWS_AS(posenc::learned_table<float>::load_safetensors(st, "transformer.wpe.bias"),
                  posenc::error);
  CHECK_THROWS_AS(posenc::learned_table<float>::load_npy(posenc_test::tmp_path("no_such_file.npy")),
                  posenc::error);
}

TEST_CASE("interpolation to a new max_len keeps the endpoints (align_corners)",
          "[learned][golden]") {
  const posenc::learned_table<double> t(8, 6, 7);
  const posenc::learned_table<double> up = t.interpolated(13);
  CHECK(posenc_test::max_abs_diff(
            up.weights(),
            posenc_test::golden_matrix<double>("absolute_learned_seed7_interp13.npy")) < 1e-15);
  const posenc::learned_table<double> down = t.interpolated(5);
  CHECK(posenc_test::max_abs_diff(
            down.weights(),
            posenc_test::golden_matrix<double>("absolute_learned_seed7_interp5.npy")) < 1e-15);
  for (const auto* r : {&up, &down}) {
    CHECK(r->weights().row(0) == t.weights().row(0));  // exact endpoints
    CHECK(r->weights().bottomRows(1) == t.weights().bottomRows(1));
  }
  // 8 -> 15 puts every old row on a new even row, bit for bit, and midpoints between.
  const posenc::learned_table<float> tf(8, 6, 7);
  const posenc::learned_table<float> x = tf.interpolated(15);
  for (Index i = 0; i < 8; ++i) CHECK(x.weights().row(2 * i) == tf.weights().row(i));
  CHECK(posenc_test::max_abs_diff(x.weights().row(3),
                                  rowmatf(0.5f * (tf.weights().row(1) + tf.weights().row(2)))) <
        1e-8);
  CHECK(t.interpolated(8).weights() == t.weights());
  CHECK(t.interpolated(1).weights() == t.weights().topRows(1));
  const posenc::learned_table<double> one(1, 4, 2);
  const auto rep = one.interpolated(3);
  for (Index j = 0; j < 3; ++j) CHECK(rep.weights().row(j) == one.weights().row(0));
  CHECK(up.gradient().isZero(0));
}

TEST_CASE("learned errors name the parameter and both numbers", "[learned][error]") {
  using T = posenc::learned_table<float>;
  POSENC_REQUIRE_ERROR(T(0, 4, 1), "max_len = 0");
  POSENC_REQUIRE_ERROR(T(4, -1, 1), "dim = -1");
  POSENC_REQUIRE_ERROR(T(4, 4, 1, -0.5), "stddev = -0.5");
  POSENC_REQUIRE_ERROR(T(4, 4, 1, std::nan("")), "stddev = nan");
  rowmatf nanw = rowmatf::Zero(3, 2);
  nanw(1, 1) = std::nanf("");
  POSENC_REQUIRE_ERROR(T(nanw), "weights[1, 1] = nan");
  POSENC_REQUIRE_ERROR(T(rowmatf(0, 3)), "max_len = 0");

  T t(5, 4, 1);
  POSENC_REQUIRE_ERROR(t.at(std::vector<Index>{0, 5}), "positions[1] = 5");
  POSENC_REQUIRE_ERROR(t.at(std::vector<Index>{0, 5}), "max_len = 5");
  POSENC_REQUIRE_ERROR(t.at(std::vector<Index>{-1}), "positions[0] = -1");
  Eigen::Matrix<int, 2, 2> m;
  m.setZero();
  POSENC_REQUIRE_ERROR(t.at(m), "positions.rows = 2");
  POSENC_REQUIRE_ERROR(t.table(3, 3), "offset + len = 6");
  POSENC_REQUIRE_ERROR(t.table(3, 3), "max_len = 5");
  POSENC_REQUIRE_ERROR(t.table(-1), "len = -1");
  POSENC_REQUIRE_ERROR(t.table(1, -2), "offset = -2");
  rowmatf e(4, 4), wrong(2, 3);
  POSENC_REQUIRE_ERROR(t.add_to(e, 2), "offset + len = 6");
  POSENC_REQUIRE_ERROR(t.add_to(wrong), "cols = 3");
  std::vector<float> buf(2 * 6 * 4);
  POSENC_REQUIRE_ERROR(t.add_to(posenc::batch_view<float>::contiguous(buf.data(), {2, 6, 4})),
                       "offset + len = 6");
  POSENC_REQUIRE_ERROR(t.add_at(e, std::vector<Index>{0, 1}), "rows = 4");
  POSENC_REQUIRE_ERROR(t.add_at(e, std::vector<Index>{0, 1, 2, 9}), "positions[3] = 9");
  POSENC_REQUIRE_ERROR(t.backward(e, std::vector<Index>{0, 1, 2, 7}), "positions[3] = 7");
  POSENC_REQUIRE_ERROR(t.backward(wrong, std::vector<Index>{0, 1}), "cols = 3");
  POSENC_REQUIRE_ERROR(t.backward(e, 3), "offset + len = 7");
  POSENC_REQUIRE_ERROR(
      t.backward(posenc::batch_view<const float>::contiguous(buf.data(), {2, 6, 4}), 0),
      "offset + len = 6");
  POSENC_REQUIRE_ERROR(t.sgd_step(-1.0), "learning_rate = -1");
  POSENC_REQUIRE_ERROR(t.interpolated(0), "new_len = 0");
  CHECK(t.gradient().isZero(0));  // failed calls changed nothing
}

TEST_CASE("learned: sizes past max_elements are refused before allocating", "[learned][error]") {
  using T = posenc::learned_table<float>;
  constexpr Index kmax = std::numeric_limits<Index>::max();
  STATIC_REQUIRE(T::max_elements == (Index(1) << 31));
  STATIC_REQUIRE(T::max_elements == posenc::limits::max_elements);
  // max_len * dim would overflow an Index (this used to throw std::bad_alloc)
  POSENC_REQUIRE_ERROR(T(kmax, 4, 1), "max_len = 9223372036854775807");
  POSENC_REQUIRE_ERROR(T(kmax, 4, 1), "must be <= 536870912 for dim = 4");
  POSENC_REQUIRE_ERROR(T(4, kmax, 1), "dim = 9223372036854775807");
  POSENC_REQUIRE_ERROR(T(kmax, kmax, 1), "dim = 9223372036854775807");
  // just past the limit, for a width that divides it and one that does not
  POSENC_REQUIRE_ERROR(T((Index(1) << 29) + 1, 4, 1), "max_len = 536870913");
  POSENC_REQUIRE_ERROR(T(Index(1) << 30, 3, 1), "max_len = 1073741824");
  POSENC_REQUIRE_ERROR(T((Index(1) << 31) + 1, 1, 1), "max_len = 2147483649");
  POSENC_REQUIRE_ERROR(T(1, (Index(1) << 31) + 1, 1), "dim = 2147483649");
  // 2^36 sat exactly at the former limit and gave std::bad_alloc (issue 25)
  POSENC_REQUIRE_ERROR(T(Index(1) << 18, Index(1) << 18, 1), "max_len = 262144");
  const T t(3, 4, 7);
  POSENC_REQUIRE_ERROR(t.interpolated(kmax), "new_len = 9223372036854775807");
  POSENC_REQUIRE_ERROR(t.interpolated((Index(1) << 29) + 1), "new_len = 536870913");
  // the stepped interpolation positions equal the exact j (L - 1) / (N - 1)
  const T src(7, 2, 3);
  for (const Index n : {1, 2, 3, 5, 7, 8, 13, 40}) {
    const T r = src.interpolated(n);
    for (Index j = 0; j < n; ++j) {
      const double x = n == 1 ? 0.0 : double(j) * 6.0 / double(n - 1);
      const auto lo = static_cast<Index>(std::floor(x));
      const double f = x - double(lo);
      for (Index c = 0; c < 2; ++c) {
        const double want = lo >= 6 ? double(src.weights()(6, c))
                                    : (1.0 - f) * double(src.weights()(lo, c)) +
                                          f * double(src.weights()(lo + 1, c));
        CHECK(std::abs(double(r.weights()(j, c)) - want) <= 1e-6);
      }
    }
  }
}
