#include <cmath>
#include <posenc/encoding/properties.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <random>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc::sinusoidal_config;
using rowmat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using rowmatf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

TEST_CASE("the classic 10x6 table", "[sinusoidal][golden]") {
  const posenc::sinusoidal<double> enc(6);
  const rowmat t = enc.table(10);
  const auto golden = posenc_test::golden_matrix<double>("absolute_vaswani_10x6.npy");
  CHECK(posenc_test::max_abs_diff(t, golden) < 1e-15);
  // Row 1 to four decimals, as every tutorial prints it.
  const double row1[6] = {0.8415, 0.5403, 0.0464, 0.9989, 0.0022, 1.0000};
  for (int j = 0; j < 6; ++j)
    CHECK(std::round(t(1, j) * 1e4) / 1e4 == Approx(row1[j]).margin(1e-12));
  // Row 0 is [0 1 0 1 0 1].
  for (int j = 0; j < 6; ++j) CHECK(t(0, j) == (j % 2 == 0 ? 0.0 : 1.0));
}

TEST_CASE("vaswani tables match the reference (double and float, bases, offsets)",
          "[sinusoidal][golden]") {
  const auto g32 = posenc_test::golden_matrix<double>("absolute_vaswani_d32.npy");
  CHECK(posenc_test::max_abs_diff(posenc::sinusoidal<double>(32).table(48), g32) < 1e-13);
  CHECK(posenc_test::max_abs_diff(posenc::sinusoidal<float>(32).table(48), g32) < 1e-7);
  const auto gb = posenc_test::golden_matrix<double>("absolute_vaswani_d10_base500_off37.npy");
  const posenc::sinusoidal<double> b500(sinusoidal_config::vaswani(10, 500.0));
  CHECK(posenc_test::max_abs_diff(b500.table(9, 37), gb) < 1e-13);
  // Frequencies: w_i = base^(-2i/d).
  for (Index i = 0; i < 5; ++i)
    CHECK(b500.frequencies()[static_cast<std::size_t>(i)] ==
          Approx(std::pow(500.0, -2.0 * static_cast<double>(i) / 10.0)).epsilon(1e-15));
}

TEST_CASE("float32 is within 1e-6 of float64 up to position 1,000,000",
          "[sinusoidal][golden][accuracy]") {
  const auto pos_m =
      posenc_test::golden_matrix<std::int64_t>("absolute_vaswani_large_positions.npy");
  const auto golden = posenc_test::golden_matrix<double>("absolute_vaswani_large_d64.npy");
  std::vector<Index> pos(static_cast<std::size_t>(pos_m.size()));
  for (Index i = 0; i < pos_m.size(); ++i) pos[static_cast<std::size_t>(i)] = pos_m.data()[i];
  REQUIRE(pos.back() == 1000000);
  const posenc::sinusoidal<float> f(64);
  const posenc::sinusoidal<double> d(64);
  const rowmatf tf = f.at(pos);
  const rowmat td = d.at(pos);
  CHECK(posenc_test::max_abs_diff(td, golden) < 1e-9);  // angle ~1e6: a few ulp of 1e6
  CHECK(posenc_test::max_abs_diff(tf, golden) < 1e-6);
  // The same rows through table(len, offset) (streaming): identical to at().
  const rowmatf tail = f.table(3, 999998);
  CHECK(posenc_test::max_abs_diff(tail, tf.bottomRows(3)) == 0.0);
  // This test can fail: forming the angle p * w in float32 is off by far more than 1e-6.
  const float naive = std::sin(static_cast<float>(999999) * static_cast<float>(f.frequencies()[1]));
  CHECK(std::abs(static_cast<double>(naive) - golden(12, 2)) > 1e-5);
  // A dense sweep near 10^6: every float row is within 1e-6 of the double one.
  const rowmatf sweep_f = f.table(256, 1000000 - 255);
  const rowmat sweep_d = d.table(256, 1000000 - 255);
  CHECK(posenc_test::max_abs_diff(sweep_f, sweep_d) < 1e-6);
}

TEST_CASE("fairseq preset: blocked layout, padding row, odd width",
          "[sinusoidal][golden][fairseq]") {
  const posenc::sinusoidal<double> pad(sinusoidal_config::fairseq(10, 1));
  const auto g = posenc_test::golden_matrix<double>("absolute_fairseq_d10_pad1.npy");
  const rowmat t = pad.table(20);
  CHECK(posenc_test::max_abs_diff(t, g) < 1e-13);
  CHECK(t.row(1).isZero(0));
  CHECK(pad.fairseq_first_position() == 2);
  // fairseq's tokens t = 0, 1, ... of an unpadded sentence use rows padding_idx + 1 + t.
  CHECK(posenc_test::max_abs_diff(pad.table(5, pad.fairseq_first_position()), g.middleRows(2, 5)) <
        1e-13);
  // at() also zeroes the padding position.
  CHECK(pad.at(std::vector<Index>{1, 3}).row(0).isZero(0));

  const posenc::sinusoidal<float> odd(sinusoidal_config::fairseq(7));
  const auto g7 = posenc_test::golden_matrix<double>("absolute_fairseq_d7.npy");
  const rowmatf t7 = odd.table(12);
  CHECK(posenc_test::max_abs_diff(t7, g7) < 1e-7);
  CHECK(t7.col(6).isZero(0));
  CHECK(odd.sin_column(2) == 2);
  CHECK(odd.cos_column(2) == 5);
}

TEST_CASE("t2t preset: timing signal, start index, odd width, timescales",
          "[sinusoidal][golden][t2t]") {
  const posenc::sinusoidal<double> t9(sinusoidal_config::t2t(9));
  CHECK(posenc_test::max_abs_diff(t9.table(12, 5), posenc_test::golden_matrix<double>(
                                                       "absolute_t2t_d9_start5.npy")) < 1e-13);
  CHECK(t9.table(12, 5).col(8).isZero(0));
  // d = 3: one frequency (t2t's max(n - 1, 1) guard) and a zero column.
  const posenc::sinusoidal<double> t3(sinusoidal_config::t2t(3));
  CHECK(posenc_test::max_abs_diff(
            t3.table(6), posenc_test::golden_matrix<double>("absolute_t2t_d3.npy")) < 1e-13);
  const posenc::sinusoidal<double> t8(sinusoidal_config::t2t(8, 2.0, 500.0));
  CHECK(posenc_test::max_abs_diff(t8.table(10), posenc_test::golden_matrix<double>(
                                                    "absolute_t2t_d8_min2_max500.npy")) < 1e-13);
  // fairseq and t2t agree when neither pads nor changes the timescales.
  const posenc::sinusoidal<double> fs(sinusoidal_config::fairseq(16));
  const posenc::sinusoidal<double> tt(sinusoidal_config::t2t(16));
  CHECK(posenc_test::max_abs_diff(fs.table(30), tt.table(30)) < 1e-15);
}

TEST_CASE("offsets, shards and arbitrary positions give the full table's rows", "[sinusoidal]") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const Index d = 2 * static_cast<Index>(1 + rng() % 40);
    const Index len = static_cast<Index>(1 + rng() % 50);
    const posenc::sinusoidal<float> enc(d);
    const rowmatf full = enc.table(len + 20);
    const Index off = static_cast<Index>(rng() % 20);
    CHECK(enc.table(len, off) == full.middleRows(off, len));
    std::vector<Index> pos(8);
    for (auto& p : pos) p = static_cast<Index>(rng() % static_cast<std::uint64_t>(len + 20));
    const rowmatf rows = enc.at(pos);
    for (std::size_t r = 0; r < pos.size(); ++r)
      CHECK(rows.row(static_cast<Index>(r)) == full.row(pos[r]));
    Eigen::Matrix<std::int32_t, Eigen::Dynamic, 1> pv(3);
    pv << 0, 4, 2;
    CHECK(enc.at(pv).row(1) == full.row(4));
  }
  // Negative positions follow the formula: sin odd, cos even.
  const posenc::sinusoidal<double> enc(8);
  const rowmat neg = enc.table(1, -5), pos = enc.table(1, 5);
  for (Index i = 0; i < 4; ++i) {
    CHECK(neg(0, 2 * i) == Approx(-pos(0, 2 * i)).margin(1e-15));
    CHECK(neg(0, 2 * i + 1) == Approx(pos(0, 2 * i + 1)).margin(1e-15));
  }
  CHECK(enc.table(0).rows() == 0);
}

TEST_CASE("table_into writes any Eigen lvalue, row- or column-major", "[sinusoidal]") {
  const posenc::sinusoidal<double> enc(12);
  const rowmat ref = enc.table(7, 3);
  Eigen::MatrixXd col(7, 12);
  enc.table_into(col, 3);
  CHECK(posenc_test::max_abs_diff(col, ref) == 0.0);
  rowmat big = rowmat::Constant(10, 20, -1.0);
  enc.table_into(big.block(2, 4, 7, 12), 3);
  CHECK(posenc_test::max_abs_diff(big.block(2, 4, 7, 12), ref) == 0.0);
  CHECK(big(1, 4) == -1.0);
  CHECK(big(2, 3) == -1.0);
  CHECK(big(2, 16) == -1.0);
}

TEST_CASE("add_to: [seq, d], [batch, seq, d], scaling by sqrt(d), views", "[sinusoidal][add]") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> nd;
  const Index d = 16, seq = 9, batch = 3, off = 4;
  const posenc::sinusoidal<float> enc(d);
  const rowmatf pe = enc.table(seq, off);
  rowmatf e(seq, d);
  for (Index k = 0; k < e.size(); ++k) e.data()[k] = static_cast<float>(nd(rng));

  rowmatf plain = e;
  enc.add_to(plain, off);
  CHECK(plain == rowmatf(e + pe));
  rowmatf scaled = e;
  enc.add_to(scaled, off, posenc::embedding_scale::sqrt_dim);
  CHECK(posenc_test::max_abs_diff(scaled, rowmatf(4.0f * e + pe)) == 0.0);
  Eigen::MatrixXf colmajor = e;
  enc.add_to(colmajor, off);
  CHECK(posenc_test::max_abs_diff(colmajor, plain) == 0.0);

  // [batch, seq, d] through a view: every sequence gets the same rows, bit-identical to
  // the [seq, d] path, with and without scaling.
  for (auto sc : {posenc::embedding_scale::none, posenc::embedding_scale::sqrt_dim}) {
    std::vector<float> buf(static_cast<std::size_t>(batch * seq * d));
    for (Index b = 0; b < batch; ++b)
      Eigen::Map<rowmatf>(buf.data() + b * seq * d, seq, d) = e * static_cast<float>(b + 1);
    enc.add_to(posenc::batch_view<float>::contiguous(buf.data(), {batch, seq, d}), off, sc);
    for (Index b = 0; b < batch; ++b) {
      rowmatf single = e * static_cast<float>(b + 1);
      enc.add_to(single, off, sc);
      CHECK(Eigen::Map<rowmatf>(buf.data() + b * seq * d, seq, d) == single);
    }
  }
  // batch of one takes the direct path
  std::vector<float> one(static_cast<std::size_t>(seq * d));
  Eigen::Map<rowmatf>(one.data(), seq, d) = e;
  enc.add_to(posenc::batch_view<float>::contiguous(one.data(), {1, seq, d}), off);
  CHECK(Eigen::Map<rowmatf>(one.data(), seq, d) == plain);
  // a [seq, d] seq_view over a strided buffer (every other column belongs to someone else)
  std::vector<float> wide(static_cast<std::size_t>(seq * 2 * d), 7.0f);
  posenc::seq_view<float> sv(wide.data(), {seq, d}, {2 * d, 2});
  enc.add_to(sv, off);
  for (Index t = 0; t < seq; ++t)
    for (Index j = 0; j < d; ++j) {
      CHECK(sv(t, j) == 7.0f + pe(t, j));
      CHECK(wide[static_cast<std::size_t>(t * 2 * d + 2 * j + 1)] == 7.0f);
    }
}

TEST_CASE("property: PE(p + k) = T_k PE(p) to 1e-12 for p <= 1000, k <= 100",
          "[sinusoidal][property]") {
  for (auto cfg : {sinusoidal_config::vaswani(64), sinusoidal_config::fairseq(33),
                   sinusoidal_config::t2t(20, 1.0, 1000.0)}) {
    const posenc::sinusoidal<double> enc(cfg);
    const rowmat table = enc.table(1101);
    double worst = 0;
    for (Index k : {0, 1, 2, 7, 50, 99, 100}) {
      const posenc::property_matrix tk = posenc::offset_rotation(enc, k);
      const rowmat shifted = table.topRows(1001) * tk.transpose();
      worst = std::max(worst, posenc_test::max_abs_diff(shifted, table.middleRows(k, 1001)));
      // T_k is orthogonal and T_{-k} = T_k^T
      CHECK((tk * tk.transpose() - posenc::property_matrix::Identity(enc.dim(), enc.dim()))
                .cwiseAbs()
                .maxCoeff() < 1e-14);
      CHECK(posenc_test::max_abs_diff(posenc::offset_rotation(enc, -k), tk.transpose()) < 1e-15);
    }
    INFO("preset " << posenc::to_string(cfg.preset) << " worst " << worst);
    CHECK(worst < 1e-12);
  }
  // T_k is not the identity for k != 0: a wrong T would make the check above fail.
  const posenc::sinusoidal<double> enc(8);
  CHECK(posenc_test::max_abs_diff(enc.table(1, 3) * posenc::offset_rotation(enc, 1).transpose(),
                                  enc.table(1, 3)) > 0.1);
}

TEST_CASE("property: dot product depends on the offset only", "[sinusoidal][property]") {
  const posenc::sinusoidal<double> enc(64);
  const rowmat table = enc.table(400);
  const Eigen::VectorXd closed = posenc::offset_dot_products(enc, 100);
  CHECK(closed(0) == Approx(32.0).epsilon(1e-14));  // |PE(p)|^2 = d/2
  for (Index start : {0, 17, 250}) {
    const Eigen::VectorXd f = posenc::offset_dot_products(table, start, 100);
    CHECK((f - closed).cwiseAbs().maxCoeff() < 1e-11);
  }
  // symmetric in k, decays from the maximum at k = 0
  for (Index k = 1; k <= 100; ++k) CHECK(closed(k) < closed(0));
  const Eigen::VectorXd back = posenc::offset_dot_products(table, 300, 0);
  CHECK(back(0) == Approx(32.0).epsilon(1e-13));
}

TEST_CASE("property: cosine similarity and minimum pairwise distance", "[sinusoidal][property]") {
  const posenc::sinusoidal<double> enc(16);
  const rowmat table = enc.table(50);
  const posenc::property_matrix s = posenc::cosine_similarity(table);
  REQUIRE(s.rows() == 50);
  CHECK(s.diagonal().isOnes(1e-14));
  CHECK((s - s.transpose()).cwiseAbs().maxCoeff() < 1e-15);
  CHECK(s(3, 10) == Approx(table.row(3).dot(table.row(10)) / 8.0).epsilon(1e-13));  // |PE|^2 = 8
  CHECK(s.cwiseAbs().maxCoeff() <= 1.0 + 1e-14);
  // Similarity depends on |i - j| only (a Toeplitz matrix).
  for (Index i = 0; i + 5 < 50; ++i) CHECK(s(i, i + 5) == Approx(s(0, 5)).margin(1e-13));
  // A zero row (fairseq's padding) has similarity 0.
  const posenc::sinusoidal<double> fpad(sinusoidal_config::fairseq(8, 0));
  CHECK(posenc::cosine_similarity(fpad.table(4)).row(0).isZero(0));

  // All rows are equidistant from their neighbours (|PE(p) - PE(p+1)| is the same for all
  // p), and the minimum over pairs is attained by neighbours.
  const posenc::closest_pair cp = posenc::min_pairwise_distance(table);
  const double neighbour = (table.row(0) - table.row(1)).norm();
  CHECK(cp.distance == Approx(neighbour).epsilon(1e-12));
  CHECK(cp.second == cp.first + 1);
  double brute = 1e300;
  for (Index i = 0; i < 50; ++i)
    for (Index j = i + 1; j < 50; ++j)
      brute = std::min(brute, (table.row(i) - table.row(j)).norm());
  CHECK(cp.distance == Approx(brute).epsilon(1e-12));
  // A duplicated row is found at distance 0.
  rowmat dup = table.topRows(6);
  dup.row(4) = dup.row(1);
  const posenc::closest_pair z = posenc::min_pairwise_distance(dup);
  CHECK(z.distance == 0.0);
  CHECK(z.first == 1);
  CHECK(z.second == 4);
}

TEST_CASE("sinusoidal errors name the parameter and its value", "[sinusoidal][error]") {
  using S = posenc::sinusoidal<float>;
  POSENC_REQUIRE_ERROR(S(7), "dim = 7");
  POSENC_REQUIRE_ERROR(S(0), "dim = 0");
  POSENC_REQUIRE_ERROR(S(-4), "dim = -4");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::fairseq(3)), "dim = 3");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::t2t(0)), "dim = 0");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::vaswani(8, 1.0)), "base = 1");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::vaswani(8, -3.0)), "base = -3");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::vaswani(8, std::nan(""))), "base = nan");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::fairseq(8, -2)), "padding_idx = -2");
  sinusoidal_config bad_pad = sinusoidal_config::vaswani(8);
  bad_pad.padding_idx = 1;
  POSENC_REQUIRE_ERROR(S(bad_pad), "padding_idx = 1");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::t2t(8, 0.0, 10.0)), "min_timescale = 0");
  POSENC_REQUIRE_ERROR(S(sinusoidal_config::t2t(8, 5.0, 2.0)), "max_timescale = 2");

  const S enc(8);
  POSENC_REQUIRE_ERROR(enc.table(-1), "len = -1");
  const Index huge = Index{1} << 60;
  POSENC_REQUIRE_ERROR(enc.table(1, huge), "offset = 1152921504606846976");
  POSENC_REQUIRE_ERROR(enc.table(10, posenc::sinusoidal_max_position),
                       "offset + len - 1 = 9007199254741001");
  POSENC_REQUIRE_ERROR(enc.at(std::vector<Index>{1, -huge}), "positions[1] = -1152921504606846976");
  Eigen::Matrix<Index, 2, 2> not_vector;
  not_vector.setZero();
  POSENC_REQUIRE_ERROR(enc.at(not_vector), "positions.rows = 2");
  rowmatf wrong(3, 6);
  POSENC_REQUIRE_ERROR(enc.add_to(wrong), "embeddings.cols = 6");
  POSENC_REQUIRE_ERROR(enc.table_into(wrong), "embeddings.cols = 6");
  std::vector<float> buf(2 * 3 * 5);
  POSENC_REQUIRE_ERROR(enc.add_to(posenc::batch_view<float>::contiguous(buf.data(), {2, 3, 5})),
                       "embeddings.cols = 5");
  rowmatf ok(3, 8);
  POSENC_REQUIRE_ERROR(enc.add_to(ok, huge), "offset = 1152921504606846976");
  POSENC_REQUIRE_ERROR(posenc::offset_rotation(enc, huge), "k = 1152921504606846976");
  POSENC_REQUIRE_ERROR(posenc::offset_dot_products(enc, -1), "max_offset = -1");
  POSENC_REQUIRE_ERROR(posenc::offset_dot_products(ok, 3, 0), "start = 3");
  POSENC_REQUIRE_ERROR(posenc::offset_dot_products(ok, 1, 2), "max_offset = 2");
  POSENC_REQUIRE_ERROR(posenc::min_pairwise_distance(rowmatf(1, 8)), "rows = 1");
}
