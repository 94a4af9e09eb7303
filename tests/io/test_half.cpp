#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <posenc/io/tensor.hpp>
#include <random>

#include "io_test_util.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

namespace io = posenc::io;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Independent decoder of binary16 by the formula (-1)^s * 2^(e-15) * (1 + m/1024), with
/// ldexp, to check the bit-manipulation decoder.
double half_by_formula(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31)
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), -24);
  else
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}

/// Checks that `bits` (decoded by `decode`) is the round-to-nearest-even encoding of x:
/// no neighbouring finite code is closer, and on a tie the code is even.
template <class Decode>
void check_nearest_even(double x, std::uint16_t bits, Decode decode, std::uint16_t max_finite) {
  const std::uint16_t mag = bits & 0x7FFF;
  const double got = decode(bits);
  INFO("x = " << x << " bits = " << bits);
  if (std::isinf(got)) {
    // Overflow only when x is at least halfway past the largest finite value.
    const double mx = decode(max_finite),
                 below = decode(static_cast<std::uint16_t>(max_finite - 1));
    CHECK(std::fabs(x) >= mx + (mx - below) / 2);
    return;
  }
  REQUIRE(std::signbit(got) == std::signbit(x));
  const double err = std::fabs(got - x);
  if (mag < max_finite) {
    const double up = decode(static_cast<std::uint16_t>(bits + 1));
    const double e_up = std::fabs(up - x);
    CHECK(err <= e_up);
    if (err == e_up) CHECK((mag & 1) == 0);
  }
  if (mag > 0) {
    const double down = decode(static_cast<std::uint16_t>(bits - 1));
    const double e_down = std::fabs(down - x);
    CHECK(err <= e_down);
    if (err == e_down) CHECK((mag & 1) == 0);
  }
}

}  // namespace

TEST_CASE("f16: every code round-trips and matches the formula", "[io][half]") {
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const auto h = static_cast<std::uint16_t>(u);
    const float f = io::half_to_float(h);
    const double ref = half_by_formula(h);
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
      const std::uint16_t back = io::float_to_half(f);
      REQUIRE((back & 0x7C00) == 0x7C00);
      REQUIRE((back & 0x3FF) != 0);       // still NaN
      if (h & 0x200) REQUIRE(back == h);  // quiet NaNs keep their payload exactly
      continue;
    }
    REQUIRE(static_cast<double>(f) == ref);
    REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
    REQUIRE(io::float_to_half(f) == h);
    REQUIRE(io::double_to_half(ref) == h);
  }
}

TEST_CASE("bf16: every code round-trips", "[io][half]") {
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const auto b = static_cast<std::uint16_t>(u);
    const float f = io::bf16_to_float(b);
    if (std::isnan(f)) {
      const std::uint16_t back = io::float_to_bf16(f);
      REQUIRE((back & 0x7F80) == 0x7F80);
      REQUIRE((back & 0x7F) != 0);
      REQUIRE((back & 0x8000) == (b & 0x8000));
      if (b & 0x40) REQUIRE(back == b);
      continue;
    }
    REQUIRE(io::float_to_bf16(f) == b);
    // The float is the bf16 code in the high half.
    REQUIRE(from_bits(static_cast<std::uint32_t>(b) << 16) == f);
  }
}

TEST_CASE("f16/bf16: rounding to nearest even, overflow, subnormals", "[io][half]") {
  CHECK(io::float_to_half(1.0f) == 0x3C00);
  CHECK(io::float_to_half(-2.0f) == 0xC000);
  CHECK(io::float_to_half(65504.0f) == 0x7BFF);
  CHECK(io::float_to_half(65519.0f) == 0x7BFF);
  CHECK(io::float_to_half(65520.0f) == 0x7C00);  // the tie rounds to even: inf
  CHECK(io::float_to_half(-1e10f) == 0xFC00);
  CHECK(io::float_to_half(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(io::float_to_half(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(io::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie to even: zero
  CHECK(io::float_to_half(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(io::float_to_half(std::ldexp(3.0f, -25)) == 0x0002);         // 1.5 ulp: tie, to even
  CHECK(io::float_to_half(-std::ldexp(1.0f, -26)) == 0x8000);        // signed zero
  CHECK(io::float_to_half(std::ldexp(1023.5f, -24)) == 0x0400);      // rounds up into the normals
  CHECK(io::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie, even
  CHECK(io::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie, even
  CHECK(io::float_to_half(2047.0f / 1024.0f * 1.0f + std::ldexp(1.0f, -11)) ==
        0x4000);  // carry into exponent
  // One rounding straight from double: via float this would be a tie and round down.
  CHECK(io::double_to_half(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3C01);
  CHECK(io::double_to_half(1e-300) == 0x0000);
  CHECK(io::double_to_half(-1e300) == 0xFC00);
  CHECK(io::float_to_half(std::numeric_limits<float>::denorm_min()) == 0x0000);

  CHECK(io::float_to_bf16(1.0f) == 0x3F80);
  CHECK(io::float_to_bf16(from_bits(0x3F808000u)) == 0x3F80);  // tie, even
  CHECK(io::float_to_bf16(from_bits(0x3F818000u)) == 0x3F82);  // tie, even (up)
  CHECK(io::float_to_bf16(from_bits(0x3F808001u)) == 0x3F81);
  CHECK(io::float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds past max: inf
  CHECK(io::float_to_bf16(from_bits(0x7F7F7FFFu)) == 0x7F7F);
  CHECK(io::float_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);  // tie to even
  CHECK(io::float_to_bf16(from_bits(0x00018000u)) == 0x0002);  // subnormal tie, even
  CHECK(io::float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(io::double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)) == 0x3F81);

  std::mt19937_64 rng(7);
  const auto half_dec = [](std::uint16_t h) { return static_cast<double>(io::half_to_float(h)); };
  const auto bf_dec = [](std::uint16_t b) { return static_cast<double>(io::bf16_to_float(b)); };
  for (int i = 0; i < 20000; ++i) {
    // Random magnitudes across and beyond each format's range, both signs.
    const double mant = 1.0 + static_cast<double>(rng() >> 11) * 0x1p-53;
    const int e16 = static_cast<int>(rng() % 50) - 30;
    const double x16 = ((rng() & 1) ? -1 : 1) * std::ldexp(mant, e16);
    check_nearest_even(x16, io::double_to_half(x16), half_dec, 0x7BFF);
    const int ebf = static_cast<int>(rng() % 280) - 140;
    const double xbf = ((rng() & 1) ? -1 : 1) * std::ldexp(mant, ebf);
    check_nearest_even(xbf, io::double_to_bf16(xbf), bf_dec, 0x7F7F);
  }
}

TEST_CASE("dtype helpers", "[io]") {
  CHECK(io::dtype_size(io::dtype::f16) == 2);
  CHECK(io::dtype_size(io::dtype::bf16) == 2);
  CHECK(io::dtype_size(io::dtype::f32) == 4);
  CHECK(io::dtype_size(io::dtype::f64) == 8);
  CHECK(io::dtype_size(io::dtype::i32) == 4);
  CHECK(io::dtype_size(io::dtype::i64) == 8);
  CHECK(io::dtype_size(io::dtype::u8) == 1);
  CHECK(io::dtype_size(io::dtype::boolean) == 1);
  CHECK(std::string(io::dtype_name(io::dtype::bf16)) == "bf16");
  CHECK(io::dtype_of<float>() == io::dtype::f32);
  CHECK(io::dtype_of<double>() == io::dtype::f64);
  CHECK(io::dtype_of<std::int64_t>() == io::dtype::i64);
  CHECK(io::dtype_of<std::int32_t>() == io::dtype::i32);
  CHECK(io::dtype_of<std::uint8_t>() == io::dtype::u8);
  io::tensor<double> t;
  t.shape = {3};
  t.data = {1, 2, 3};
  CHECK(t.size() == 3);
  CHECK(t.rank() == 1);
  const auto m = t.as_matrix();
  CHECK(m.rows() == 1);
  CHECK(m(0, 2) == 3.0);
  t.shape = {-1, 2};
  POSENC_REQUIRE_ERROR(t.as_matrix(), "shape extent = -1");
}
