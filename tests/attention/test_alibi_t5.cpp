// ALiBi slopes and bias, T5 buckets and bias: goldens, every head count 1..96,
// relative-only dependence, query offsets, error paths.

#include <cmath>
#include <limits>
#include <posenc/encoding/alibi.hpp>
#include <posenc/encoding/t5_bias.hpp>
#include <vector>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc_test::golden_matrix;
using posenc_test::max_abs_diff;

namespace {

// The paper's construction as a recursion over lists, independent of the library's
// closed form: start = 2^(-8/n), slopes = start^(h+1) for a power of two; otherwise
// slopes(c) followed by every other slope of slopes(2c).
std::vector<double> recursive_slopes(int n) {
  int c = 1;
  while (c * 2 <= n) c *= 2;
  if (c == n) {
    std::vector<double> s;
    const double start = std::pow(2.0, -8.0 / n);
    double m = start;
    for (int h = 0; h < n; ++h, m *= start) s.push_back(m);
    return s;
  }
  std::vector<double> s = recursive_slopes(c);
  const std::vector<double> twice = recursive_slopes(2 * c);
  for (int i = 0; static_cast<int>(s.size()) < n; i += 2)
    s.push_back(twice[static_cast<std::size_t>(i)]);
  return s;
}

}  // namespace

TEST_CASE("ALiBi slopes match the reference for 8, 12, 16, 20 heads", "[alibi][golden]") {
  for (int n : {8, 12, 16, 20}) {
    const auto want = golden_matrix<double>("attention_alibi_slopes_" + std::to_string(n) + ".npy");
    const auto got = posenc::alibi_slopes(n);
    REQUIRE(static_cast<Index>(got.size()) == want.cols());
    for (int h = 0; h < n; ++h) {
      INFO("heads " << n << " head " << h);
      CHECK(std::abs(got[static_cast<std::size_t>(h)] - want(0, h)) <=
            4e-15 * want(0, h));  // the reference multiplies repeatedly: a few ulps
    }
  }
  // The paper's figure: 8 heads give 1/2, 1/4, ..., 1/256.
  const auto s8 = posenc::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) CHECK(s8[static_cast<std::size_t>(h)] == std::ldexp(1.0, -(h + 1)));
}

TEST_CASE("ALiBi slopes for every head count 1..96", "[alibi]") {
  for (int n = 1; n <= 96; ++n) {
    INFO("heads " << n);
    const auto got = posenc::alibi_slopes(n);
    const auto want = recursive_slopes(n);
    REQUIRE(got.size() == static_cast<std::size_t>(n));
    for (int h = 0; h < n; ++h)
      CHECK(std::abs(got[static_cast<std::size_t>(h)] - want[static_cast<std::size_t>(h)]) <=
            1e-14 * want[static_cast<std::size_t>(h)]);
    // All in (0, 1), all distinct.
    for (int h = 0; h < n; ++h) {
      CHECK(got[static_cast<std::size_t>(h)] > 0.0);
      CHECK(got[static_cast<std::size_t>(h)] < 1.0);
      for (int g = 0; g < h; ++g)
        CHECK(got[static_cast<std::size_t>(g)] != got[static_cast<std::size_t>(h)]);
    }
    // llama.cpp's max_bias = 8 is the paper's schedule; another max_bias rescales the
    // exponent: m(b) = m(8)^(b/8).
    const auto m8 = posenc::alibi_slopes_max_bias(n, 8.0);
    const auto m4 = posenc::alibi_slopes_max_bias(n, 4.0);
    for (int h = 0; h < n; ++h) {
      CHECK(m8[static_cast<std::size_t>(h)] == got[static_cast<std::size_t>(h)]);
      CHECK(std::abs(m4[static_cast<std::size_t>(h)] -
                     std::sqrt(got[static_cast<std::size_t>(h)])) <= 1e-15);
    }
  }
  // ggml for 12 heads: n_head_log2 = 8, m0 = 2^-1, m1 = 2^-0.5; head 8 = m1^1, head 11 = m1^7.
  const auto s12 = posenc::alibi_slopes_max_bias(12, 8.0);
  CHECK(std::abs(s12[8] - std::pow(2.0, -0.5)) < 1e-16);
  CHECK(std::abs(s12[11] - std::pow(std::pow(2.0, -0.5), 7)) < 1e-16);
}

TEST_CASE("ALiBi bias: causal and symmetric forms, query offset, relative only", "[alibi]") {
  const Index H = 5, Lq = 4, Lk = 9, off = 3;
  const auto slopes = posenc::alibi_slopes(H);
  const posenc::dmatrix causal = posenc::alibi_bias(H, Lq, Lk, off);
  const posenc::dmatrix sym = posenc::alibi_bias(H, Lq, Lk, off, posenc::alibi_form::symmetric);
  for (Index h = 0; h < H; ++h)
    for (Index i = 0; i < Lq; ++i)
      for (Index j = 0; j < Lk; ++j) {
        const double m = slopes[static_cast<std::size_t>(h)],
                     rel = static_cast<double>(j - (off + i));
        CHECK(causal(h * Lq + i, j) == m * rel);
        CHECK(sym(h * Lq + i, j) == -m * std::abs(rel));
      }
  // Depends only on j - i: a shift of both positions changes nothing.
  posenc::attention_shape s;
  s.heads = H;
  s.len_q = 6;
  s.len_k = 12;
  s.dim = 1;
  for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
    const posenc::alibi_policy p(H, form);
    for (Index h = 0; h < H; ++h) {
      const auto b = posenc::materialize_bias(p, 0, h, s);
      for (Index i = 1; i < 6; ++i)
        for (Index j = 1; j < 12; ++j) CHECK(b(i, j) == b(i - 1, j - 1));
    }
  }
  // from_max_bias and only_head.
  const auto p = posenc::alibi_policy::from_max_bias(12, 8.0).only_head(9);
  CHECK(p.heads() == 1);
  CHECK(p.slopes()[0] == posenc::alibi_slopes(12)[9]);
}

TEST_CASE("ALiBi errors name the parameter", "[alibi][errors]") {
  POSENC_REQUIRE_ERROR(posenc::alibi_slopes(0), "heads = 0");
  POSENC_REQUIRE_ERROR(posenc::alibi_slopes_max_bias(4, 0.0), "max_bias = 0");
  POSENC_REQUIRE_ERROR(posenc::alibi_slopes_max_bias(4, -1.0), "max_bias = -1");
  POSENC_REQUIRE_ERROR(posenc::alibi_policy(std::vector<double>{}, posenc::alibi_form::causal),
                       "slopes.size() = 0");
  POSENC_REQUIRE_ERROR(
      posenc::alibi_policy(std::vector<double>{std::nan("")}, posenc::alibi_form::causal),
      "slope = nan");
  POSENC_REQUIRE_ERROR(posenc::alibi_policy(4).only_head(4), "h = 4");
  POSENC_REQUIRE_ERROR(posenc::alibi_bias(2, -1, 3), "len_q = -1");
  POSENC_REQUIRE_ERROR(posenc::alibi_bias(2, 1, -3), "len_k = -3");
  POSENC_REQUIRE_ERROR(posenc::alibi_bias(2, 1, 3, -1), "q_offset = -1");
  const Index max = std::numeric_limits<Index>::max();
  POSENC_REQUIRE_ERROR(posenc::alibi_bias(2, 3, 3, max - 1), "q_offset = 9223372036854775806");
  CHECK(posenc::alibi_bias(2, 3, 3, max - 3).allFinite());
}

TEST_CASE("T5 buckets match the reference over -300..300", "[t5][golden]") {
  struct cfg {
    const char* file;
    posenc::t5_bucket_config c;
  };
  for (const cfg& t : {cfg{"attention_t5_buckets_bidir.npy", {32, 128, true}},
                       cfg{"attention_t5_buckets_unidir.npy", {32, 128, false}},
                       cfg{"attention_t5_buckets_b16_d40_bidir.npy", {16, 40, true}}}) {
    const auto want = golden_matrix<std::int64_t>(t.file);
    REQUIRE(want.cols() == 601);
    for (Index r = -300; r <= 300; ++r) {
      INFO(t.file << " relative " << r);
      CHECK(posenc::t5_bucket(r, t.c) == want(0, r + 300));
    }
  }
}

TEST_CASE("T5 bucket structure", "[t5]") {
  const posenc::t5_bucket_config bi{32, 128, true}, uni{32, 128, false};
  // Exact buckets near zero, keys after the query in the upper half (bidirectional).
  for (Index r = 0; r < 8; ++r) {
    CHECK(posenc::t5_bucket(-r, bi) == r);
    if (r > 0) CHECK(posenc::t5_bucket(r, bi) == 16 + r);
  }
  // Unidirectional: future keys are distance 0; 16 exact buckets.
  for (Index r = 0; r < 300; ++r) CHECK(posenc::t5_bucket(r, uni) == 0);
  for (Index r = 0; r < 16; ++r) CHECK(posenc::t5_bucket(-r, uni) == r);
  // Monotone in the distance and capped at the last bucket, even for huge distances.
  Index prev = 0;
  for (Index r = 0; r < 5000; ++r) {
    const Index b = posenc::t5_bucket(-r, uni);
    CHECK(b >= prev);
    prev = b;
  }
  CHECK(posenc::t5_bucket(-112, uni) == 30);  // 16·8^(15/16) = 112.4: the last bucket starts at 113
  CHECK(posenc::t5_bucket(-113, uni) == 31);
  CHECK(posenc::t5_bucket(-(Index(1) << 60), uni) == 31);
  CHECK(posenc::t5_bucket(Index(1) << 60, bi) == 31);
  CHECK(posenc::t5_bucket(-(Index(1) << 60), bi) == 15);
  // The bucket matrix with a query offset is the bucket of key - query.
  const auto m = posenc::t5_buckets(3, 7, bi, 4);
  for (Index i = 0; i < 3; ++i)
    for (Index j = 0; j < 7; ++j) CHECK(m(i, j) == posenc::t5_bucket(j - (4 + i), bi));
}

TEST_CASE("T5 bias policy depends only on j - i and reads the table", "[t5]") {
  const auto table = posenc_test::random_matrix(32, 3, 77);
  const posenc::t5_bias_policy p(table, {32, 128, true});
  posenc::attention_shape s;
  s.heads = 3;
  s.len_q = 10;
  s.len_k = 40;
  s.dim = 1;
  s.q_offset = 5;
  for (Index h = 0; h < 3; ++h) {
    const auto b = posenc::materialize_bias(p, 0, h, s);
    for (Index i = 0; i < 10; ++i)
      for (Index j = 0; j < 40; ++j) {
        CHECK(b(i, j) == table(posenc::t5_bucket(j - (5 + i), p.config()), h));
        if (i > 0 && j > 0) CHECK(b(i, j) == b(i - 1, j - 1));
      }
  }
  // A far query offset (a long KV cache) costs nothing extra and stays exact.
  s.q_offset = Index(1) << 40;
  s.len_q = 2;
  s.len_k = 3;
  for (Index h = 0; h < 3; ++h) {
    const auto b = posenc::materialize_bias(p, 0, h, s);
    for (Index i = 0; i < 2; ++i)
      for (Index j = 0; j < 3; ++j)
        CHECK(b(i, j) == table(posenc::t5_bucket(j - (s.q_offset + i), p.config()), h));
  }
  const auto one = p.only_head(2);
  CHECK(one.heads() == 1);
  CHECK(max_abs_diff(one.table(), table.col(2)) == 0.0);
}

TEST_CASE("T5 errors name the parameter", "[t5][errors]") {
  POSENC_REQUIRE_ERROR(posenc::t5_bucket(0, {3, 128, true}), "num_buckets = 3");
  POSENC_REQUIRE_ERROR(posenc::t5_bucket(0, {1, 128, false}), "num_buckets = 1");
  POSENC_REQUIRE_ERROR(posenc::t5_bucket(0, {32, 8, true}), "max_distance = 8");
  POSENC_REQUIRE_ERROR(posenc::t5_bucket(0, {32, 16, false}), "max_distance = 16");
  POSENC_REQUIRE_ERROR(posenc::t5_buckets(-1, 2, {}), "len_q = -1");
  POSENC_REQUIRE_ERROR(posenc::t5_buckets(1, -2, {}), "len_k = -2");
  POSENC_REQUIRE_ERROR(posenc::t5_buckets(1, 2, {}, -3), "q_offset = -3");
  // Positions q_offset + i must be representable (no wrapped, negative bucket indices).
  const Index max = std::numeric_limits<Index>::max();
  POSENC_REQUIRE_ERROR(posenc::t5_buckets(3, 5, {}, max), "q_offset = 9223372036854775807");
  POSENC_REQUIRE_ERROR(posenc::t5_buckets(3, 5, {}, max - 2), "q_offset = 9223372036854775805");
  const auto far = posenc::t5_buckets(3, 5, {}, max - 3);
  CHECK(far.minCoeff() >= 0);
  CHECK(far.maxCoeff() < 32);
  const auto table = posenc_test::random_matrix(32, 2, 1);
  POSENC_REQUIRE_ERROR(posenc::t5_bias_policy(table, {16, 128, true}), "table.rows() = 32");
  const posenc_test::rmat<double> empty(32, 0);
  POSENC_REQUIRE_ERROR(posenc::t5_bias_policy(empty, {}), "table.cols() = 0");
  const posenc::t5_bias_policy p(table, {});
  POSENC_REQUIRE_ERROR(p.only_head(2), "h = 2");
  posenc::t5_bias_gradient g{posenc::dmatrix::Zero(31, 2)};
  POSENC_REQUIRE_ERROR(p.check_gradient(g), "grad.table.rows() = 31");
  g.table = posenc::dmatrix::Zero(32, 3);
  POSENC_REQUIRE_ERROR(p.check_gradient(g), "grad.table.cols() = 3");
}
