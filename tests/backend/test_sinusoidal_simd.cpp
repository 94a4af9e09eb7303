// The SIMD sinusoidal-table kernels against the scalar kernel, against an emulation of the
// same angle-addition arithmetic (bit for bit), and against float64 goldens far out.
#include <cmath>
#include <cstring>
#include <limits>
#include <posenc/encoding/sinusoidal.hpp>
#include <string>
#include <vector>

#include "backends.hpp"
#include "support/catch.hpp"
#include "support/golden.hpp"

using posenc::Index;
namespace be = posenc::backend;

namespace {

std::vector<double> vaswani_freq(Index pairs, double base = 10000.0) {
  std::vector<double> w(static_cast<std::size_t>(pairs));
  for (Index i = 0; i < pairs; ++i)
    w[static_cast<std::size_t>(i)] = 1.0 / std::pow(base, static_cast<double>(i) / pairs);
  return w;
}

// Bound on |SIMD - scalar| for one value at angle `a` (see backend/simd/angles.hpp): both
// double values lie within 4u + 2u|a| of sin/cos(a) (u = 2^-53), and a float result may
// then differ by one rounding step (<= 2^-24 for |v| <= 1).
template <class T>
double tolerance(double angle) {
  const double dbl = 8.0 * std::ldexp(1.0, -53) + 4.0 * std::ldexp(1.0, -53) * std::fabs(angle);
  return std::is_same_v<T, float> ? dbl + std::ldexp(1.0, -24) : dbl;
}

// The same arithmetic as simd::angle_addition, one value at a time with std::fma.
[[maybe_unused]] double emulate_sin(double p, double w, bool want_sin) {
  const double B = 64.0;
  const double base = std::floor(p / B) * B, f = p - base;
  const double sc = std::sin(base * w), cc = std::cos(base * w);
  const double sf = std::sin(f * w), cf = std::cos(f * w);
  return want_sin ? std::fma(sc, cf, cc * sf) : std::fma(-sc, sf, cc * cf);
}

struct layout_case {
  const char* name;
  Index dim;
  bool interleaved;
};

template <class T, class B>
void compare_with_scalar(const layout_case& lc, Index first, Index rows,
                         const std::vector<Index>& positions, bool accumulate, bool zero_row,
                         Index col_stride) {
  const Index pairs = lc.dim / 2;
  const std::vector<double> w = vaswani_freq(pairs);
  const Index row_stride = lc.dim * col_stride + 3;  // a gap after each row: must stay untouched
  const std::size_t n = static_cast<std::size_t>(rows * row_stride);
  std::vector<T> simd = posenc_test::random_values<T>(n, 7), ref = simd;

  auto args = [&](std::vector<T>& out) {
    posenc::kernels::sinusoidal_rows_args<T> a;
    a.inv_freq = w.data();
    a.pairs = pairs;
    a.dim = lc.dim;
    a.sin_step = lc.interleaved ? 2 : 1;
    a.cos_offset = lc.interleaved ? 1 : pairs;
    a.rows = rows;
    a.first_position = first;
    a.positions = positions.empty() ? nullptr : positions.data();
    a.has_zero_position = zero_row;
    a.zero_position = positions.empty() ? first + rows / 2 : positions[positions.size() / 2];
    a.out = out.data();
    a.row_stride = row_stride;
    a.col_stride = col_stride;
    a.accumulate = accumulate;
    a.scale = T(1.7);
    return a;
  };
  posenc::kernels::sinusoidal_rows(B{}, args(simd));
  posenc::kernels::sinusoidal_rows(be::scalar{}, args(ref));

  INFO(B::name() << " " << lc.name << " dim " << lc.dim << " first " << first << " rows " << rows
                 << (positions.empty() ? "" : " (position list)")
                 << (accumulate ? " accumulate" : "") << (zero_row ? " zero row" : "")
                 << " col_stride " << col_stride);
  double worst_excess = -1.0;
  Index exact = 0, total = 0;
  for (Index r = 0; r < rows; ++r) {
    const Index pos = positions.empty() ? first + r : positions[static_cast<std::size_t>(r)];
    for (Index c = 0; c < row_stride; ++c) {
      const std::size_t k = static_cast<std::size_t>(r * row_stride + c);
      const bool data_col = c < lc.dim * col_stride && c % col_stride == 0;
      const Index j = c / col_stride;
      const Index pair = lc.interleaved ? j / 2 : (j < pairs ? j : j - pairs);
      const double angle = data_col && j < 2 * pairs
                               ? static_cast<double>(pos) * w[static_cast<std::size_t>(pair)]
                               : 0.0;
      double tol = tolerance<T>(angle);
      if (accumulate) tol *= 2;  // the sum's rounding step follows the PE value's
      // below the first coarse block, and off the data columns, results are bit-identical
      if (!data_col || (pos >= 0 && pos < 64) || col_stride != 1) tol = 0.0;
      const double d = std::fabs(static_cast<double>(simd[k]) - static_cast<double>(ref[k]));
      worst_excess = std::max(worst_excess, d - tol);
      exact += simd[k] == ref[k] ? 1 : 0;
      ++total;
    }
  }
  INFO("bit-identical values: " << exact << " of " << total);
  CHECK(worst_excess <= 0.0);
}

}  // namespace

TEST_CASE("SIMD sinusoidal rows match the scalar kernel", "[backend][simd][sinusoidal]") {
  const layout_case layouts[] = {{"interleaved", 2, true},   {"interleaved", 6, true},
                                 {"interleaved", 26, true},  {"interleaved", 128, true},
                                 {"interleaved", 134, true}, {"blocked", 4, false},
                                 {"blocked", 7, false},      {"blocked", 27, false},
                                 {"blocked", 130, false},    {"blocked", 69, false}};
  const std::vector<Index> list = {5, 999999, 64, 63, 0, 12345, 1000000, 65, 64, 200, 7, 3};
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (const auto& lc : layouts) {
      compare_with_scalar<float, B>(lc, 0, 140, {}, false, false, 1);
      compare_with_scalar<double, B>(lc, 0, 140, {}, false, false, 1);
      compare_with_scalar<float, B>(lc, 999'950, 70, {}, false, false, 1);
      compare_with_scalar<double, B>(lc, 999'950, 70, {}, false, false, 1);
      compare_with_scalar<float, B>(lc, -70, 20, {}, false, false, 1);
      compare_with_scalar<float, B>(lc, 0, static_cast<Index>(list.size()), list, false, false, 1);
      compare_with_scalar<double, B>(lc, 0, static_cast<Index>(list.size()), list, false, false, 1);
      compare_with_scalar<float, B>(lc, 31, 70, {}, true, false, 1);
      compare_with_scalar<double, B>(lc, 500, 70, {}, true, true, 1);
      compare_with_scalar<float, B>(lc, 10, 70, {}, false, true, 1);
      compare_with_scalar<float, B>(lc, 100, 9, {}, false, false, 2);  // strided: scalar path
    }
    ++tested;
  });
  CHECK(tested == POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE("SIMD angle addition is the documented arithmetic, bit for bit",
          "[backend][simd][sinusoidal]") {
  // Every backend computes the same IEEE operations, so each equals this emulation exactly
  // and all backends agree with each other bit for bit.
  const Index pairs = 37;
  const std::vector<double> w = vaswani_freq(pairs);
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    posenc::simd::angle_addition<B> gen(w.data(), pairs);
    for (Index p : {Index{0}, Index{1}, Index{63}, Index{64}, Index{777}, Index{-1}, Index{-65},
                    Index{1'000'000}, Index{1'048'575}, Index{123'456'789}}) {
      std::vector<double> s(static_cast<std::size_t>(pairs)), c(s.size());
      gen.row(p, [&](Index i, auto S, auto C, int lanes) {
        S.store_partial(s.data() + i, lanes);
        C.store_partial(c.data() + i, lanes);
      });
      for (Index i = 0; i < pairs; ++i) {
        INFO(B::name() << " p " << p << " i " << i);
        const double pw = static_cast<double>(p), wi = w[static_cast<std::size_t>(i)];
        CHECK(s[static_cast<std::size_t>(i)] == emulate_sin(pw, wi, true));
        CHECK(c[static_cast<std::size_t>(i)] == emulate_sin(pw, wi, false));
      }
    }
  });
}

TEST_CASE("SIMD float tables stay within 3.5e-8 of float64 up to position 1,000,000",
          "[backend][simd][sinusoidal][golden]") {
  // simd_sinusoidal_far.npy: rows [position, sin(p w_0), cos(p w_0), ...] in float64 from
  // tests/reference/simd.py; simd_sinusoidal_freq.npy: the w_i it used.
  const auto golden = posenc_test::golden_matrix<double>("simd_sinusoidal_far.npy");
  const auto freq = posenc_test::golden_matrix<double>("simd_sinusoidal_freq.npy");
  const Index pairs = freq.size(), rows = golden.rows();
  REQUIRE(golden.cols() == 1 + 2 * pairs);
  std::vector<double> w(freq.data(), freq.data() + pairs);
  std::vector<Index> pos(static_cast<std::size_t>(rows));
  for (Index r = 0; r < rows; ++r)
    pos[static_cast<std::size_t>(r)] = static_cast<Index>(golden(r, 0));
  int tested = 0;
  auto check_backend = [&](auto tag) {
    using B = decltype(tag);
    std::vector<float> out(static_cast<std::size_t>(rows * 2 * pairs));
    posenc::kernels::sinusoidal_rows_args<float> a;
    a.inv_freq = w.data();
    a.pairs = pairs;
    a.dim = 2 * pairs;
    a.rows = rows;
    a.positions = pos.data();
    a.out = out.data();
    a.row_stride = 2 * pairs;
    posenc::kernels::sinusoidal_rows(B{}, a);
    double worst = 0;
    for (Index r = 0; r < rows; ++r)
      for (Index j = 0; j < 2 * pairs; ++j)
        worst = std::max(
            worst, std::fabs(out[static_cast<std::size_t>(r * 2 * pairs + j)] - golden(r, 1 + j)));
    INFO(B::name() << ": max |float32 - float64| = " << worst);
    CHECK(worst <= 3.5e-8);
    CHECK(worst > 0.0);  // float rounding is visible: the comparison is live
    ++tested;
  };
  check_backend(be::scalar{});
  posenc_test::for_each_simd_backend(check_backend);
  CHECK(tested == 1 + POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE("posenc::sinusoidal dispatches to the SIMD kernel and stays accurate",
          "[backend][simd][sinusoidal]") {
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (auto preset : {posenc::sinusoidal_preset::vaswani, posenc::sinusoidal_preset::fairseq,
                        posenc::sinusoidal_preset::t2t}) {
      posenc::sinusoidal_config cfg = posenc::sinusoidal_config::vaswani(66);
      cfg.preset = preset;
      const posenc::sinusoidal<float, B> fast(cfg);
      const posenc::sinusoidal<double, be::scalar> exact(cfg);
      const auto t = fast.table(300, 999'800);
      const auto e = exact.table(300, 999'800);
      INFO(B::name() << " preset " << static_cast<int>(preset));
      CHECK((t.template cast<double>() - e).cwiseAbs().maxCoeff() <= 3.5e-8);
      // the offset rows equal the same rows of a longer table (shards agree)
      CHECK(fast.table(10, 999'990) == t.middleRows(190, 10));
      CHECK(fast.table(1, 999'937) == t.row(137));  // one decode step: same values
      // angle addition rounds differently from one libm call in a few values out here:
      // seeing any difference proves the SIMD kernel ran (not the scalar fallback)
      CHECK(t != posenc::sinusoidal<float, be::scalar>(cfg).table(300, 999'800));
    }
  });
}
