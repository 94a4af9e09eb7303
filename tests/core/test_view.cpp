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

namespace {
/// Whether two views share an element, by brute force over both views' elements.
template <class A, class B>
bool brute_overlap(const posenc::strided_view<A, 4>& a, const posenc::strided_view<B, 4>& b) {
  std::vector<const void*> xs;
  for (Index i = 0; i < a.extent(0); ++i)
    for (Index j = 0; j < a.extent(1); ++j)
      for (Index k = 0; k < a.extent(2); ++k)
        for (Index l = 0; l < a.extent(3); ++l) xs.push_back(&a(i, j, k, l));
  for (Index i = 0; i < b.extent(0); ++i)
    for (Index j = 0; j < b.extent(1); ++j)
      for (Index k = 0; k < b.extent(2); ++k)
        for (Index l = 0; l < b.extent(3); ++l)
          for (const void* x : xs)
            if (x == &b(i, j, k, l)) return true;
  return false;
}
}  // namespace

TEST_CASE("views_overlap is exact on the layouts of docs/layouts.md", "[core][view]") {
  std::vector<float> buf(4096);
  float* p = buf.data();
  std::vector<float> other(64);
  using V = posenc::strided_view<float, 4>;
  // [B, L, H, D] views over one buffer: column blocks of fused rows, shifted copies,
  // [B, H, L, D] permutations, strided dims and reversed axes
  const std::vector<V> views = {
      posenc::view_bshd(p, 2, 3, 4, 8),
      V(p + 16, {2, 3, 2, 8}, {192, 64, 8, 1}),  // heads 2-3 of rows 64 apart
      V(p + 32, {2, 3, 2, 8}, {192, 64, 8, 1}),  // heads 4-5: meets the first
      V(p + 48, {2, 3, 2, 8}, {192, 64, 8, 1}),  // heads 6-7 of the 64-wide rows
      V(p + 4, {2, 3, 2, 8}, {192, 64, 8, 1}),   // half a head off the first
      posenc::view_bhsd(p + 1000, 2, 4, 3, 8),
      V(p + 1001, {2, 3, 4, 8}, {96, 8, 24, 2}),        // dims two apart, odd offset
      V(p + 1000, {2, 3, 4, 8}, {192, 16, 48, 2}),      // dims two apart, even offset
      V(p + 2000 + 63, {1, 2, 4, 8}, {0, -32, 8, -1}),  // reversed dims and tokens
      V(p + 3000, {1, 5, 1, 8}, {0, 8, 0, 1}),          // one head, broadcast axes
      posenc::view_bshd(other.data(), 1, 2, 4, 8),      // another buffer
  };
  int meeting = 0, apart = 0;
  for (std::size_t i = 0; i < views.size(); ++i)
    for (std::size_t j = 0; j < views.size(); ++j) {
      INFO("views " << i << " and " << j);
      const bool want = brute_overlap(views[i], views[j]);
      CHECK(posenc::views_overlap(views[i], views[j]) == want);
      (want ? meeting : apart)++;
    }
  CHECK(meeting > int(views.size()));  // both answers occur
  CHECK(apart > int(views.size()));
  // an empty view shares nothing
  CHECK_FALSE(posenc::views_overlap(V(p, {1, 0, 4, 8}, {0, 32, 8, 1}), views[0]));
}

TEST_CASE("matrix_input reads matrices in place and evaluates expressions once", "[core][view]") {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> m(3, 4);
  m.setRandom();
  Eigen::MatrixXf col = m;
  const posenc::matrix_input<decltype(m)> a(m);
  STATIC_REQUIRE(posenc::matrix_input<decltype(m)>::in_place);
  CHECK(a.view().data() == m.data());
  const posenc::matrix_input<Eigen::MatrixXf> b(col);  // column-major: its own strides
  CHECK(b.view().data() == col.data());
  CHECK(b.view().stride(0) == 1);
  CHECK(b.view()(2, 3) == m(2, 3));
  const auto blk = m.block(1, 1, 2, 2);
  const posenc::matrix_input<std::decay_t<decltype(blk)>> c(blk);
  CHECK(c.view().data() == &m(1, 1));
  CHECK(c.view().stride(0) == 4);
  const auto sum = m + m;  // no storage: evaluated into the object
  const posenc::matrix_input<std::decay_t<decltype(sum)>> d(sum);
  STATIC_REQUIRE_FALSE(posenc::matrix_input<std::decay_t<decltype(sum)>>::in_place);
  CHECK(d.view()(1, 2) == 2 * m(1, 2));
}
