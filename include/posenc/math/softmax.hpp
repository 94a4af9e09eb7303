#pragma once
/// \file
/// The online softmax (Milakov & Gimelshein 2018), written once: the running maximum m
/// and sum l of one row over the keys seen so far, and how partial states merge.
///
///     a tile of logits s_j:  m' = max(m, max_j s_j)
///                            l' = l·rescale(m, m') + Σ_j exp(s_j - m')
///                            O' = O·rescale(m, m') + Σ_j exp(s_j - m') v_j
///     rescale(m, m') = exp(m - m')     (0 on a row's first visible tile: m = -inf)
///
///     partial states (m_c, l_c, O_c) over disjoint key ranges (split-key decode, shards):
///       M = max over the states that saw a key (l_c > 0)
///       l = Σ_c l_c·exp(m_c - M),  O = Σ_c O_c·exp(m_c - M),  out = O / l
///
///     out = O · inverse_sum(l): 1/l; 0 for a row that saw no key (l = 0); NaN for a NaN
///     sum (a NaN or +inf logit makes the whole row NaN, as torch.softmax does)

#include <cmath>
#include <limits>

#include "../core/types.hpp"

namespace posenc {
namespace math {

/// exp(m_old - m_new): the factor that carries a running sum or output from the maximum
/// m_old to m_new >= m_old (also the weight of a partial state with maximum m_old in a
/// merge whose maximum is m_new).
template <class Real>
POSENC_HOST_DEVICE inline Real rescale(Real m_old, Real m_new) noexcept {
  return std::exp(m_old - m_new);
}

/// The factor that normalises a row with running sum l (see the file comment).
template <class Real>
POSENC_HOST_DEVICE inline Real inverse_sum(double l) noexcept {
  return l > 0 ? static_cast<Real>(1.0 / l)
               : (std::isnan(l) ? std::numeric_limits<Real>::quiet_NaN() : Real(0));
}

}  // namespace math
}  // namespace posenc
