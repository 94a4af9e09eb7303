#pragma once
/// \file
/// Rotation and sinusoid frequencies, written once, in double.
///
///     base_power(base, i, r) = base^(2i/r)
///     inv_freq(base, i, r)   = 1 / base^(2i/r)      pair i of r dims (i < r/2): the
///                              frequency of RoPE (RoFormer eq. 15), of Vaswani et al.'s
///                              sinusoid (r = d) and of Transformer-XL's relative sinusoid
///     log_spaced_freq(w0, step, i) = w0 · exp(-i · step)    fairseq and tensor2tensor
///
/// inv_freq divides 1 by the rounded power, as the PyTorch and Hugging Face code does:
/// pow(base, -2i/r) differs from it in the last bit for about a quarter of the pairs, so
/// every encoding that promises the same frequencies calls this function.

#include <cmath>

#include "../core/types.hpp"

namespace posenc {
namespace math {

/// base^(2i/r), the denominator of pair i's frequency.
POSENC_HOST_DEVICE inline double base_power(double base, Index i, Index r) noexcept {
  return std::pow(base, static_cast<double>(2 * i) / static_cast<double>(r));
}

/// The angular frequency of pair i < r/2: 1 / base^(2i/r) (radians per position).
POSENC_HOST_DEVICE inline double inv_freq(double base, Index i, Index r) noexcept {
  return 1.0 / base_power(base, i, r);
}

/// A log-spaced frequency: w0 · exp(-i · step), step = ln(max/min) / (steps).
POSENC_HOST_DEVICE inline double log_spaced_freq(double w0, double step, Index i) noexcept {
  return w0 * std::exp(static_cast<double>(i) * -step);
}

}  // namespace math
}  // namespace posenc
