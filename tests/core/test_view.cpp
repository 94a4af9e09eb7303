#include <posenc/core/view.hpp>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;

TEST_CASE("contiguous views index row-major", "[core][view]") {
  std::vector<float> buf(2 * 3 * 4);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i);
  auto v = posenc::strided_view<float, 3>::contiguous(buf.data(), {2, 3, 4});
  CHECK(v.size() == 24);
  CHECK(v.inner_contiguous());
  CHECK(v(1, 2, 3) == 23.0f);
  CHECK(v(1, 0, 2) == 14.0f);
  CHECK(v.vector(1, 1)(2) == 18.0f);
  posenc::strided_view<const float, 3> c = v;  // const conversion
  CHECK(c(0, 1, 1) == 5.0f);
}

TEST_CASE("bshd and bhsd views agree on logical indices", "[core][view]") {
  const Index B = 2, S = 5, H = 3, D = 4;
  std::vector<double> bshd(static_cast<std::size_t>(B * S * H * D)), bhsd(bshd.size());
  for (Index b = 0; b < B; ++b)
    for (Index s = 0; s < S; ++s)
      for (Index h = 0; h < H; ++h)
        for (Index d = 0; d < D; ++d) {
          const double val = 1000.0 * b + 100.0 * s + 10.0 * h + d;
          bshd[static_cast<std::size_t>(((b * S + s) * H + h) * D + d)] = val;
          bhsd[static_cast<std::size_t>(((b * H + h) * S + s) * D + d)] = val;
        }
  auto x = posenc::view_bshd(bshd.data(), B, S, H, D);
  auto y = posenc::view_bhsd(bhsd.data(), B, H, S, D);
  for (Index b = 0; b < B; ++b)
    for (Index s = 0; s < S; ++s)
      for (Index h = 0; h < H; ++h)
        for (Index d = 0; d < D; ++d) REQUIRE(x(b, s, h, d) == y(b, s, h, d));
  CHECK(y.extent(1) == S);
  CHECK(y.extent(2) == H);
}

TEST_CASE("view_of follows Eigen storage order and blocks", "[core][view]") {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r(4, 6);
  Eigen::MatrixXf c(4, 6);
  for (Index i = 0; i < 4; ++i)
    for (Index j = 0; j < 6; ++j) r(i, j) = c(i, j) = static_cast<float>(10 * i + j);
  auto vr = posenc::view_of(r);
  auto vc = posenc::view_of(c);
  auto vb = posenc::view_of(r.block(1, 2, 2, 3));
  for (Index i = 0; i < 4; ++i)
    for (Index j = 0; j < 6; ++j) {
      CHECK(vr(i, j) == r(i, j));
      CHECK(vc(i, j) == c(i, j));
    }
  CHECK(vb.extent(0) == 2);
  CHECK(vb(1, 2) == r(2, 4));
  auto heads = posenc::split_heads(vr, 3);
  CHECK(heads.extent(1) == 3);
  CHECK(heads(2, 1, 1) == r(2, 3));
}

TEST_CASE("views reject bad shapes with posenc::error", "[core][view][error]") {
  float x = 0;
  POSENC_REQUIRE_ERROR((posenc::strided_view<float, 2>(&x, {-1, 2}, {2, 1})), "extent[0] = -1");
  POSENC_REQUIRE_ERROR((posenc::strided_view<float, 2>(nullptr, {1, 2}, {2, 1})), "data");
  Eigen::Matrix<float, 2, 6, Eigen::RowMajor> m;
  POSENC_REQUIRE_ERROR(posenc::split_heads(posenc::view_of(m), 4), "dim = 6");
  POSENC_REQUIRE_ERROR(posenc::split_heads(posenc::view_of(m), 0), "heads = 0");
  CHECK_NOTHROW(posenc::strided_view<float, 2>(nullptr, {0, 2}, {2, 1}));
}

TEST_CASE("posenc::error is an std::invalid_argument naming parameter and value", "[core][error]") {
  try {
    posenc::detail::fail("sinusoidal", "dim", 7, "must be even");
    FAIL("no throw");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "posenc::sinusoidal: dim = 7: must be even");
  }
}
