// The packet layer on every compiled SIMD backend: partial memory access stays inside the
// lanes asked for, arithmetic is IEEE (fmadd fused), the shuffles put lanes where documented.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <posenc/attention/flash.hpp>  // the lane kernel's exp2_nonpositive
#include <posenc/backend/simd/avx2.hpp>
#include <posenc/backend/simd/avx512.hpp>
#include <posenc/backend/simd/neon.hpp>
#include <type_traits>
#include <vector>

#include "backends.hpp"
#include "support/catch.hpp"

namespace {

template <class T, class B>
void check_packet_ops() {
  using P = posenc::simd::packet<T, B>;
  constexpr int W = P::size;
  INFO("backend " << B::name() << ", " << sizeof(T) * 8 << "-bit lanes");
  // load_partial / store_partial at the very end of a heap block of exactly n values, so
  // ASan reports any access past lane n - 1
  for (int n = 0; n <= W; ++n) {
    std::unique_ptr<T[]> src(new T[static_cast<std::size_t>(n)]);
    for (int i = 0; i < n; ++i) src[static_cast<std::size_t>(i)] = T(i + 1);
    const P p = P::load_partial(src.get(), n);
    T lanes[W];
    p.store(lanes);
    for (int i = 0; i < W; ++i) CHECK(lanes[i] == (i < n ? T(i + 1) : T(0)));
    std::unique_ptr<T[]> dst(new T[static_cast<std::size_t>(n)]);
    for (int i = 0; i < n; ++i) dst[static_cast<std::size_t>(i)] = T(-7);
    P::broadcast(T(3)).store_partial(dst.get(), n);
    for (int i = 0; i < n; ++i) CHECK(dst[static_cast<std::size_t>(i)] == T(3));
  }
  // store_partial leaves the lanes past n untouched
  T buf[W];
  for (int i = 0; i < W; ++i) buf[i] = T(-1);
  P::broadcast(T(5)).store_partial(buf, W / 2);
  for (int i = 0; i < W; ++i) CHECK(buf[i] == (i < W / 2 ? T(5) : T(-1)));

  T a[W], b[W], c[W], out[W];
  for (int i = 0; i < W; ++i) {
    a[i] = T(1) + T(i) * std::numeric_limits<T>::epsilon();
    b[i] = T(1) - T(i) * std::numeric_limits<T>::epsilon();
    c[i] = T(-1);
  }
  const P pa = P::load(a), pb = P::load(b), pc = P::load(c);
  (pa + pb).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == a[i] + b[i]);
  (pa - pb).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == a[i] - b[i]);
  (pa * pb).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == a[i] * b[i]);
  // fused: a*b - 1 = -(i eps)^2 is exact only without the intermediate rounding
  fmadd(pa, pb, pc).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == std::fma(a[i], b[i], c[i]));
  fnmadd(pa, pb, P::broadcast(T(1))).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == std::fma(-a[i], b[i], T(1)));
  CHECK(std::fma(a[W - 1], b[W - 1], c[W - 1]) !=
        a[W - 1] * b[W - 1] + c[W - 1]);  // the test bites
  P::zero().store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == T(0));

  for (int i = 0; i < W; ++i) a[i] = T(i);
  swap_pairs(P::load(a)).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == T(i ^ 1));

  // max/min lane-wise; reductions over every lane (the extreme in each position in turn)
  for (int i = 0; i < W; ++i) {
    a[i] = T(i % 3) - T(1);
    b[i] = T(1) - T(i % 2);
  }
  max(P::load(a), P::load(b)).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == std::max(a[i], b[i]));
  min(P::load(a), P::load(b)).store(out);
  for (int i = 0; i < W; ++i) CHECK(out[i] == std::min(a[i], b[i]));
  for (int k = 0; k < W; ++k) {
    for (int i = 0; i < W; ++i) a[i] = T(i == k ? 100 : -i) + T(0.25);
    T sum = 0;
    for (int i = 0; i < W; ++i) sum += a[i];  // exact: small integers plus quarters
    CHECK(reduce_max(P::load(a)) == T(100.25));
    CHECK(reduce_add(P::load(a)) == sum);
  }
  if constexpr (std::is_same_v<T, float>) {
    // reduce_add_each: lane c is packet c's sum (exact: distinct powers of two per lane
    // and packet, so a lane summed into the wrong output, or twice, shows)
    P v[W];
    T want[W];
    for (int c = 0; c < W; ++c) {
      want[c] = 0;
      for (int i = 0; i < W; ++i) {
        a[i] = std::ldexp(T(1), i) + T(c) * T(65536);
        want[c] += a[i];
      }
      v[c] = P::load(a);
    }
    reduce_add_each(v).store(out);
    for (int c = 0; c < W; ++c) CHECK(out[c] == want[c]);
  }
}

template <class B>
void check_conversions() {
  using PD = posenc::simd::packet<double, B>;
  constexpr int W = PD::size;
  INFO("backend " << B::name());
  double s[W], c[W];
  for (int i = 0; i < W; ++i) {
    s[i] = 0.1 * (i + 1);  // not representable in float: rounding is exercised
    c[i] = -1.0 / (i + 3.0);
  }
  double di[2 * W];
  float fi[2 * W], fc[W];
  store_interleaved(di, PD::load(s), PD::load(c));
  store_interleaved(fi, PD::load(s), PD::load(c));
  store_cvt(fc, PD::load(s));
  for (int i = 0; i < W; ++i) {
    CHECK(di[2 * i] == s[i]);
    CHECK(di[2 * i + 1] == c[i]);
    CHECK(fi[2 * i] == static_cast<float>(s[i]));
    CHECK(fi[2 * i + 1] == static_cast<float>(c[i]));
    CHECK(fc[i] == static_cast<float>(s[i]));
  }
  // float packets into float: every lane in its place, -0 and the lanes' order kept
  using PF = posenc::simd::packet<float, B>;
  constexpr int WF = PF::size;
  float a[WF], b[WF], ab[2 * WF];
  for (int i = 0; i < WF; ++i) {
    a[i] = static_cast<float>(i + 1);
    b[i] = i == 0 ? -0.0f : -static_cast<float>(100 + i);
  }
  store_interleaved(ab, PF::load(a), PF::load(b));
  for (int i = 0; i < WF; ++i) {
    CHECK(ab[2 * i] == a[i]);
    CHECK(ab[2 * i + 1] == b[i]);
  }
  CHECK(std::signbit(ab[1]));
}

/// The float packet's softmax operations (packet.hpp): comparisons, select, |a|, rounding
/// and 2^n, lane by lane against their scalar meaning, NaN included.
template <class B>
void check_softmax_ops() {
  using P = posenc::simd::packet<float, B>;
  constexpr int W = P::size;
  INFO("backend " << B::name());
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const float pool[] = {-2.5f, -1.5f, -0.5f, 0.5f,  1.5f,    2.5f,  -0.0f, 3.0f,
                        nan,   -inf,  inf,   7.25f, -126.0f, 1e-3f, -3.7f, 0.0f};
  float a[W], b[W], out[W];
  for (int start = 0; start < 16; start += W) {
    for (int i = 0; i < W; ++i) {
      a[i] = pool[(start + i) % 16];
      b[i] = pool[(start + 5 * i + 3) % 16];
    }
    const P pa = P::load(a), pb = P::load(b);
    select(less(pa, pb), pa, pb).store(out);  // min with NaN -> b
    for (int i = 0; i < W; ++i) {
      const float want = a[i] < b[i] ? a[i] : b[i];
      CHECK(std::memcmp(&out[i], &want, sizeof(float)) == 0);
    }
    select(equal(pa, pb), P::broadcast(1.0f), P::zero()).store(out);
    for (int i = 0; i < W; ++i) CHECK(out[i] == (a[i] == b[i] ? 1.0f : 0.0f));
    abs(pa).store(out);
    for (int i = 0; i < W; ++i) {
      if (std::isnan(a[i]))
        CHECK(std::isnan(out[i]));
      else
        CHECK(out[i] == std::fabs(a[i]));
    }
    round_nearest(pa).store(out);
    for (int i = 0; i < W; ++i) {
      if (std::isnan(a[i]))
        CHECK(std::isnan(out[i]));
      else
        CHECK(out[i] == std::nearbyint(a[i]));  // ties to even: -2.5 -> -2, 1.5 -> 2
    }
  }
  // 2^n: exact for n in [-126, 127], +0 at n = -127
  for (int n = -127; n <= 127; n += W) {
    float e[W];
    for (int i = 0; i < W; ++i) e[i] = static_cast<float>(std::min(n + i, 127));
    pow2(P::load(e)).store(out);
    for (int i = 0; i < W; ++i) {
      INFO("2^" << e[i]);
      const float want = e[i] == -127.0f ? 0.0f : std::ldexp(1.0f, static_cast<int>(e[i]));
      CHECK(std::memcmp(&out[i], &want, sizeof(float)) == 0);
    }
  }
}

/// The lane kernel's 2^x: within 1.5 float ulp of exp2 in double on [-126, 0] (0.93
/// expected from the polynomial; subnormal results counted in steps of the smallest
/// subnormal), 0 at and below -127 and at -inf, 1 at 0, NaN for NaN.
template <class B>
void check_lane_exp() {
  using P = posenc::simd::packet<float, B>;
  constexpr int W = P::size;
  INFO("backend " << B::name());
  std::vector<float> x;
  for (int i = 0; i <= 200000; ++i) x.push_back(-126.0f * static_cast<float>(i) / 200000.0f);
  for (float v :
       {-0.5f, -1.5f, -126.5f, -127.0f, -127.5f, -1e30f, -std::numeric_limits<float>::infinity(),
        0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  while (x.size() % W) x.push_back(0.0f);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); i += W)
    posenc::kernels::flash::lanes::exp2_nonpositive(P::load(&x[i])).store(&y[i]);
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      CHECK(std::isnan(y[i]));
    } else if (x[i] <= -127.0f) {
      CHECK(y[i] == 0.0f);
    } else {
      const double want = std::exp2(static_cast<double>(x[i]));
      const double ulp = std::max(std::ldexp(1.0, std::ilogb(want) - 23), std::ldexp(1.0, -149));
      worst = std::max(worst, std::fabs(y[i] - want) / ulp);
      if (x[i] == 0.0f) CHECK(y[i] == 1.0f);
    }
  }
  INFO("worst error " << worst << " ulp");
  CHECK(worst <= 1.5);
}

/// P::transpose on one square, and the lane kernel's rectangular transpose built on it,
/// against the definition dst[c, r] = src[r, c]; strides wider than the data, and every
/// value of dst outside the transposed rectangle left as it was.
template <class B>
void check_transpose() {
  using P = posenc::simd::packet<float, B>;
  constexpr int W = P::size;
  INFO("backend " << B::name());
  for (const int rows : {1, W - 1, W, W + 1, 2 * W + 3, 37})
    for (const int cols : {1, W - 1, W, 3 * W, 3 * W + 5}) {
      INFO(rows << " x " << cols);
      const posenc::Index lds = cols + 3, ldd = rows + 5;
      std::vector<float> src(static_cast<std::size_t>(rows * lds));
      std::vector<float> dst(static_cast<std::size_t>(cols * ldd), -1.0f);
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
      if (rows == W && cols == W) {
        P::transpose(src.data(), lds, dst.data(), ldd);
      } else {
        posenc::kernels::flash::lanes::transpose<P>(src.data(), lds, rows, cols, dst.data(), ldd);
      }
      int wrong = 0;
      for (int c = 0; c < cols; ++c)
        for (posenc::Index r = 0; r < ldd; ++r) {
          const float got = dst[static_cast<std::size_t>(c * ldd + r)];
          const float want = r < rows ? src[static_cast<std::size_t>(r * lds + c)] : -1.0f;
          wrong += got != want;
        }
      CHECK(wrong == 0);
    }
}

}  // namespace

TEST_CASE("packets: transposes of squares and of the lane kernel's blocks",
          "[backend][simd][packet]") {
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    check_transpose<decltype(tag)>();
    ++tested;
  });
  CHECK(tested == POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE("packets: the lane softmax's comparisons, select, rounding and exp",
          "[backend][simd][packet]") {
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    check_softmax_ops<B>();
    check_lane_exp<B>();
    ++tested;
  });
  CHECK(tested == POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE("packets: memory, arithmetic and shuffles", "[backend][simd][packet]") {
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    check_packet_ops<float, B>();
    check_packet_ops<double, B>();
    check_conversions<B>();
    ++tested;
  });
  INFO("SIMD backends compiled: " << tested << ", default " << posenc::default_backend::name());
  CHECK(tested == POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE("packets exist exactly for the enabled instruction sets", "[backend][simd][packet]") {
  using posenc::simd::has_packet_v;
  namespace be = posenc::backend;
  STATIC_REQUIRE(has_packet_v<float, be::avx2> == (POSENC_ARCH_AVX2 == 1));
  STATIC_REQUIRE(has_packet_v<double, be::avx512> == (POSENC_ARCH_AVX512 == 1));
  STATIC_REQUIRE(has_packet_v<float, be::neon> == (POSENC_ARCH_NEON == 1));
  STATIC_REQUIRE_FALSE(has_packet_v<float, be::scalar>);
#ifdef POSENC_TEST_EXPECTED_BACKEND
  // CI builds pass the backend their -march must select, so a silently scalar build fails.
  CHECK(std::strcmp(posenc::default_backend::name(), POSENC_TEST_EXPECTED_BACKEND) == 0);
#endif
}
