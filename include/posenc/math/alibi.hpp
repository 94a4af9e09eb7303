#pragma once
/// \file
/// ALiBi (Press, Smith & Lewis 2022): the slope of each head and the bias, written once.
///
///     slopes, heads n, c = 2^floor(log2 n), max_bias (8 gives the paper's):
///       m_h = 2^(-max_bias·(h+1)/c)                 h < c
///       m_h = 2^(-max_bias·(2(h-c)+1)/(2c))         h >= c (every other slope of 2c heads)
///     bias(rel = pos - j) = -m·rel, or -m·|rel| (symmetric)
///
/// A kernel adds a row constant that softmax ignores so that the largest bias of a row
/// is 0 (float logits stay small wherever the key range is): over the row's visible keys
/// j <= last, bias + const = -m·|ref - j| with ref = alibi_reference(pos, last, symmetric).

#include <cmath>

#include "../core/types.hpp"

namespace posenc {
namespace math {

/// The largest power of two <= n (n >= 1).
POSENC_HOST_DEVICE inline Index pow2_floor(Index n) noexcept {
  Index c = 1;
  while (c * 2 <= n) c *= 2;
  return c;
}

/// The slope of head h of `heads` (llama.cpp's max_bias parameterisation; 8: the paper).
POSENC_HOST_DEVICE inline double alibi_slope(Index h, Index heads, double max_bias) noexcept {
  const Index c = pow2_floor(heads);
  // m0^(h+1) and m1^(2(h-c)+1), with the power folded into one exponent
  const double e =
      h < c ? max_bias * static_cast<double>(h + 1) / static_cast<double>(c)
            : max_bias * static_cast<double>(2 * (h - c) + 1) / static_cast<double>(2 * c);
  return std::exp2(-e);
}

/// The bias of a key at distance rel = pos - j: -slope·rel, or -slope·|rel| when symmetric.
POSENC_HOST_DEVICE inline double alibi_bias(double slope, Index rel, bool symmetric) noexcept {
  const double r = static_cast<double>(rel);
  return -slope * (symmetric ? std::abs(r) : r);
}

/// The position ref with bias + row constant = -slope·|ref - j| for every visible key
/// j <= last of the row at `pos`: pos itself (symmetric, while the row sees its own
/// position), else the last visible key (the causal form's largest bias is there).
POSENC_HOST_DEVICE inline Index alibi_reference(Index pos, Index last, bool symmetric) noexcept {
  return symmetric && pos <= last ? pos : last;
}

}  // namespace math
}  // namespace posenc
