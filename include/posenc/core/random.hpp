#pragma once
/// \file
/// A seeded random generator whose output is identical on every platform and compiler:
/// splitmix64 seeding, the xoshiro256** generator (Blackman & Vigna, "Scrambled linear
/// pseudorandom number generators", 2018), and a normal transform (Marsaglia's polar
/// method) evaluated with IEEE-754 operations only.
///
/// Why not `std::normal_distribution` / `std::log`: the standard leaves the distribution's
/// algorithm to the implementation, and libm's `log` is not required to be correctly
/// rounded, so the same seed could give different tables on different systems. Here every
/// step is integer arithmetic or a correctly rounded IEEE operation (+, -, *, /, sqrt,
/// fma), and every multiply-add is an explicit `std::fma`, so compiler contraction cannot
/// change a result. tests/reference/absolute.py re-implements the same steps in Python
/// and the tests compare the first values bit for bit.

#include <cmath>
#include <cstdint>
#include <limits>

namespace posenc {

static_assert(std::numeric_limits<double>::is_iec559,
              "posenc::random needs IEEE-754 double arithmetic");

/// splitmix64 step (Steele, Lea & Flood 2014): advances `state` and returns a well-mixed
/// 64-bit value. Used to expand one seed into the xoshiro state.
inline std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  state += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace detail {

/// Natural logarithm of a positive, finite, normal double, using only correctly rounded
/// operations (so every platform gets the same bits). x = m * 2^e with m in
/// [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172, summed as the
/// atanh series to s^25 (truncation < 1e-19 relative). Accurate to a few ulp; the point
/// is determinism, not correct rounding.
inline double portable_log(double x) noexcept {
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;  // exact
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);  // m - 1 is exact (Sterbenz)
  const double z = s * s;
  // Horner over the odd atanh coefficients 1/(2k+1), k = 12 .. 1, then the leading 1.
  double p = 1.0 / 25.0;
  p = std::fma(p, z, 1.0 / 23.0);
  p = std::fma(p, z, 1.0 / 21.0);
  p = std::fma(p, z, 1.0 / 19.0);
  p = std::fma(p, z, 1.0 / 17.0);
  p = std::fma(p, z, 1.0 / 15.0);
  p = std::fma(p, z, 1.0 / 13.0);
  p = std::fma(p, z, 1.0 / 11.0);
  p = std::fma(p, z, 1.0 / 9.0);
  p = std::fma(p, z, 1.0 / 7.0);
  p = std::fma(p, z, 1.0 / 5.0);
  p = std::fma(p, z, 1.0 / 3.0);
  p = std::fma(p, z, 1.0);
  const double log_m = (2.0 * s) * p;
  // ln 2 split into a part with 32 significant bits (so e * hi is exact) and the rest.
  constexpr double ln2_hi = 0.693147180369123816490;  // 0x3FE62E42FEE00000
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  const double ed = static_cast<double>(e);
  return std::fma(ed, ln2_hi, std::fma(ed, ln2_lo, log_m));
}

}  // namespace detail

/// xoshiro256** pseudorandom generator with a deterministic normal transform.
///
/// Seeding: the four state words are four successive splitmix64 outputs from `seed`.
/// `next_u64()` is xoshiro256** 1.0. `uniform()` is (next_u64() >> 11) * 2^-53 in [0, 1).
/// `normal()` uses Marsaglia's polar method: v1, v2 = ((next_u64() >> 11) - 2^52) * 2^-52
/// in [-1, 1), s = fma(v2, v2, v1*v1), rejected unless 0 < s < 1, then
/// f = sqrt(-2 log(s) / s) and the pair (v1 f, v2 f) is returned in that order (the
/// second one is kept for the next call).
class random_generator {
 public:
  /// Seeds the state from `seed` through splitmix64.
  explicit random_generator(std::uint64_t seed) noexcept {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64(sm);
  }

  /// Next 64 random bits (xoshiro256**).
  std::uint64_t next_u64() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform double in [0, 1), on the grid k * 2^-53 (exact conversion).
  double uniform() noexcept { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  /// Standard normal N(0, 1) sample, bit-identical on every IEEE-754 platform.
  double normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    for (;;) {
      const double v1 = symmetric_uniform();
      const double v2 = symmetric_uniform();
      const double s = std::fma(v2, v2, v1 * v1);
      if (s >= 1.0 || s == 0.0) continue;
      const double f = std::sqrt((-2.0 * detail::portable_log(s)) / s);
      spare_ = v2 * f;
      has_spare_ = true;
      return v1 * f;
    }
  }

  /// Normal sample with the given mean and standard deviation: mean + stddev * normal(),
  /// as fma(stddev, z, mean).
  double normal(double mean, double stddev) noexcept { return std::fma(stddev, normal(), mean); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

  /// Uniform in [-1, 1) on the grid k * 2^-52 (exact).
  double symmetric_uniform() noexcept {
    const auto k = static_cast<std::int64_t>(next_u64() >> 11) - (std::int64_t{1} << 52);
    return static_cast<double>(k) * 0x1.0p-52;
  }

  std::uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace posenc
