// Example 05: the tiled attention kernel's memory. One head, N = 32768 tokens, d = 128,
// causal, float32: the [N, N] logits alone would take 4 GiB; the tiled kernel needs only
// its tiles. The peak resident set (getrusage) is read after the inputs and the output are
// allocated and touched, and again after the call: the difference is the kernel's extra
// memory, which must stay under 64 MiB. A few output rows are checked against a direct
// computation in double.
//
// The same call with half-precision storage runs first (the peak only grows, so the
// smaller case must come first to be measured): the kernel widens K and V a tile at a
// time, so its extra memory must stay under 8 MiB, where float copies of K and V would
// take 32 MiB; its rows are checked to the output's own rounding (half: 2^-11).
//
// Unoptimised builds (no NDEBUG: debug / sanitizer CI) run N = 4096 to keep the test
// suite fast; the memory bound is checked the same way.

#include <sys/resource.h>

#include <posenc/attention/flash.hpp>
#ifdef __GLIBC__
#include <malloc.h>  // malloc_trim
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

namespace {

using posenc::Index;
using fmat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Peak resident set size of this process so far, in bytes (Linux reports KiB).
double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

using hmat = Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Matrix = fmat>
Matrix random_input(Index rows, Index cols, std::uint64_t seed) {
  using T = typename Matrix::Scalar;
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  Matrix m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    m.data()[i] = T(static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 2.0 - 1.0));
  }
  return m;
}

template <class T>
double to_double(T x) {
  return static_cast<double>(static_cast<float>(x));
}

/// Row i of causal softmax(q kᵀ / sqrt(d)) v, directly, in double.
template <class Matrix>
std::vector<double> direct_row(const Matrix& q, const Matrix& k, const Matrix& v, Index i) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.cols()));
  std::vector<double> logit(static_cast<std::size_t>(i + 1));
  double mx = -INFINITY;
  for (Index j = 0; j <= i; ++j) {
    double dot = 0;
    for (Index c = 0; c < q.cols(); ++c) dot += to_double(q(i, c)) * to_double(k(j, c));
    logit[static_cast<std::size_t>(j)] = scale * dot;
    mx = std::max(mx, scale * dot);
  }
  double sum = 0;
  for (auto& l : logit) sum += (l = std::exp(l - mx));
  std::vector<double> out(static_cast<std::size_t>(v.cols()), 0.0);
  for (Index j = 0; j <= i; ++j)
    for (Index c = 0; c < v.cols(); ++c)
      out[static_cast<std::size_t>(c)] +=
          logit[static_cast<std::size_t>(j)] / sum * to_double(v(j, c));
  return out;
}

/// One causal head of storage Matrix::Scalar: prints and returns the extra peak memory of
/// the call (bytes) and the worst relative error of 5 rows against direct_row.
template <class Matrix>
std::pair<double, double> run_case(Index n, Index d, const char* type) {
  const Matrix q = random_input<Matrix>(n, d, 1), k = random_input<Matrix>(n, d, 2),
               v = random_input<Matrix>(n, d, 3);
  Matrix out = Matrix::Zero(n, d);  // touched: counted in the baseline
  const double before = peak_rss_bytes();

  posenc::attention_config opt;
  opt.mask.causal = true;
  posenc::flash_multi_head_attention(
      posenc::view_shd(q.data(), n, 1, d), posenc::view_shd(k.data(), n, 1, d),
      posenc::view_shd(v.data(), n, 1, d), posenc::view_shd(out.data(), n, 1, d), opt);

  const double extra = peak_rss_bytes() - before;
  const double inputs = 4.0 * double(n) * double(d) * sizeof(typename Matrix::Scalar);
  std::printf("%s: N = %lld, d = %lld, one head, causal\n", type, static_cast<long long>(n),
              static_cast<long long>(d));
  std::printf("  inputs + output: %.1f MiB; peak RSS before the call: %.1f MiB\n",
              inputs / 1048576.0, before / 1048576.0);
  double worst = 0;
  for (Index i : {Index(0), Index(1), Index(777), n / 2 + 3, n - 1}) {
    const auto want = direct_row(q, k, v, i);
    double num = 0, den = 0;
    for (Index c = 0; c < d; ++c) {
      num = std::max(num, std::abs(to_double(out(i, c)) - want[static_cast<std::size_t>(c)]));
      den = std::max(den, std::abs(want[static_cast<std::size_t>(c)]));
    }
    worst = std::max(worst, num / den);
  }
  return {extra, worst};
}

}  // namespace

int main() {
#ifdef NDEBUG
  const Index n = 32768;
#else
  const Index n = 4096;
#endif
  const Index d = 128;
  const double mib = 1048576.0;
  const auto [half_extra, half_worst] = run_case<hmat>(n, d, "half storage");
  std::printf(
      "  extra peak memory of the call: %.2f MiB (limit 8 MiB; float copies of K and V: %.0f "
      "MiB)\n",
      half_extra / mib, 2.0 * double(n) * double(d) * sizeof(float) / mib);
  std::printf("  worst relative error of 5 checked rows: %.3g (limit 1e-3: half output)\n",
              half_worst);
  bool ok = half_extra < 8.0 * mib && half_worst < 1e-3;
#ifdef __GLIBC__
  // Hand the first case's freed heap back to the system, so the second call cannot reuse
  // its resident pages unseen (the peak counts only pages newly touched).
  malloc_trim(0);
#endif

  const auto [extra, worst] = run_case<fmat>(n, d, "float32");
  std::printf(
      "  extra peak memory of the call: %.2f MiB (limit 64 MiB; [N, N] logits would be %.0f MiB)\n",
      extra / mib, 4.0 * double(n) * double(n) / mib);
  std::printf("  worst relative error of 5 checked rows: %.3g (limit 2e-6)\n", worst);
  ok = ok && extra < 64.0 * mib && worst < 2e-6;
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
