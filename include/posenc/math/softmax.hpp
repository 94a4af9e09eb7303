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
///
///     a finished row as (out, lse), lse = m + log(l) (natural log; -inf: no key; NaN):
///       two rows over disjoint keys merge as  M = max(lse_a, lse_b),
///       w_a = exp(lse_a - M) / (exp(lse_a - M) + exp(lse_b - M)),  w_b likewise,
///       out = w_a·out_a + w_b·out_b,  lse = M + log(exp(lse_a - M) + exp(lse_b - M))

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

/// The log-sum-exp of a finished row with running maximum m and sum l (m in base 2 when
/// `base2`, as the lane kernels keep it): -inf for a row that saw no key, NaN for a NaN row.
template <class Real>
inline double log_sum_exp(Real m, double l, bool base2) noexcept {
  if (std::isnan(l)) return l;
  if (!(l > 0)) return -std::numeric_limits<double>::infinity();
  constexpr double ln_2 = 0.69314718055994530942;
  const double md = static_cast<double>(m);
  return base2 ? (md + std::log2(l)) * ln_2 : md + std::log(l);
}

/// How two finished rows over disjoint keys merge (the file comment): the weights of each
/// and the merged log-sum-exp. Either lse NaN (or +inf, which no finite logits give):
/// NaN weights and lse. Both -inf (no key on either side): weights 0, lse -inf.
template <class Real>
POSENC_HOST_DEVICE inline void merge_weights(Real lse_a, Real lse_b, Real& w_a, Real& w_b,
                                             Real& lse) noexcept {
  const Real inf = std::numeric_limits<Real>::infinity();
  if (std::isnan(lse_a) || std::isnan(lse_b) || lse_a == inf || lse_b == inf) {
    w_a = w_b = lse = std::numeric_limits<Real>::quiet_NaN();
    return;
  }
  const Real mx = lse_a > lse_b ? lse_a : lse_b;
  if (mx == -inf) {
    w_a = w_b = Real(0);
    lse = -inf;
    return;
  }
  const Real ea = std::exp(lse_a - mx), eb = std::exp(lse_b - mx);  // one of them is 1
  const Real sum = ea + eb;
  w_a = ea / sum;
  w_b = eb / sum;
  lse = mx + std::log(sum);
}

}  // namespace math
}  // namespace posenc
