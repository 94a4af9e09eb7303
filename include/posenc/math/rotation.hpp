#pragma once
/// \file
/// The rotation of one pair of dims, and the angles that drive it, written once.
///
///     angle(p, w)      = double(p) · w          always in double: a float32 product of a
///                                               large position loses the angle
///     rope_cos_sin     c = Real(cos(angle) · scale), s = Real(sin(angle) · scale): each
///                      value computed in double and rounded once (scale = RoPE's
///                      attention factor times xPos, 1 for the plain rotation)
///     rotate_pair      y_a = x_a c - x_b s,  y_b = x_b c + x_a s     (the inverse: s negated)
///     rotate_pair_fused  the same with the sin product fused into the sum:
///                      y_a = fl(fl(x_a c) - x_b s),  y_b = fl(fl(x_b c) + x_a s)
///     angle_sum        sin/cos(a + b) from sin/cos of a and of b (angle addition):
///                      s = fl(sin a cos b + fl(cos a sin b)), c = fl(cos a cos b - fl(sin a sin
///                      b))
///
/// rotate_pair is the portable kernels' arithmetic (each product rounded; a compiler may
/// still contract it); rotate_pair_fused is the packet and device kernels' (explicit fused
/// multiply-adds, so the result is the same on every architecture). The templates take
/// scalars or packets (posenc::simd::packet, whose fmadd / fnmadd are found by argument-
/// dependent lookup).

#include <cmath>

#include "../core/types.hpp"

namespace posenc {
namespace math {

/// a·b + c with one rounding.
POSENC_HOST_DEVICE inline float fmadd(float a, float b, float c) noexcept {
  return std::fma(a, b, c);
}
POSENC_HOST_DEVICE inline double fmadd(double a, double b, double c) noexcept {
  return std::fma(a, b, c);
}
/// c - a·b with one rounding.
POSENC_HOST_DEVICE inline float fnmadd(float a, float b, float c) noexcept {
  return std::fma(-a, b, c);
}
POSENC_HOST_DEVICE inline double fnmadd(double a, double b, double c) noexcept {
  return std::fma(-a, b, c);
}

/// The angle of position p at frequency w, in double.
POSENC_HOST_DEVICE inline double angle(Index p, double w) noexcept {
  return static_cast<double>(p) * w;
}

/// cos and sin of `angle` times `scale`, in double, each rounded once to Real.
template <class Real>
POSENC_HOST_DEVICE inline void rope_cos_sin(double angle, double scale, Real& c, Real& s) noexcept {
  c = static_cast<Real>(std::cos(angle) * scale);
  s = static_cast<Real>(std::sin(angle) * scale);
}

/// y_a = x_a c - x_b s, y_b = x_b c + x_a s, each product rounded.
template <class V>
POSENC_HOST_DEVICE inline void rotate_pair(const V& xa, const V& xb, const V& c, const V& s, V& ya,
                                           V& yb) noexcept {
  ya = xa * c - xb * s;
  yb = xb * c + xa * s;
}

/// y_a = fl(fl(x_a c) - x_b s), y_b = fl(fl(x_b c) + x_a s).
template <class V>
POSENC_HOST_DEVICE inline void rotate_pair_fused(const V& xa, const V& xb, const V& c, const V& s,
                                                 V& ya, V& yb) noexcept {
  ya = fnmadd(xb, s, xa * c);
  yb = fmadd(xa, s, xb * c);
}

/// sin(a + b) and cos(a + b) from sin/cos of a and of b.
template <class V>
POSENC_HOST_DEVICE inline void angle_sum(const V& sin_a, const V& cos_a, const V& sin_b,
                                         const V& cos_b, V& s, V& c) noexcept {
  s = fmadd(sin_a, cos_b, cos_a * sin_b);
  c = fnmadd(sin_a, sin_b, cos_a * cos_b);
}

}  // namespace math
}  // namespace posenc
