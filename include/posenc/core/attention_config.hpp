#pragma once
/// \file
/// What one attention call computes besides its inputs: the logit scale, the query offset
/// and the mask (attention_config), checked once per call, and the visible key range the
/// kernels iterate over. The mask: causal (with a query offset), per-sequence key lengths
/// (padding), a boolean [Lq, Lk] mask and an additive [Lq, Lk] mask, all combinable.
///
/// Query row i sits at absolute position `pos = q_offset + i`; key j at position j.
/// Key j is visible to query i when all of these hold:
///
///     causal            ->  j <= pos            (KV-cache decoding, chunked prefill)
///     key_lengths[b]    ->  j <  key_lengths[b] (padded batches: keys past the length)
///     allowed(i, j)     ->  true                (boolean mask, true = may attend)
///     additive(i, j)    ->  not -inf            (added to the logit otherwise)
///
/// A row with no visible key (e.g. key length 0, or a boolean mask row of all false) is
/// defined: its output row and its weights row are all zeros, never NaN. (PyTorch returns
/// NaN there; posenc chooses zeros so padded query rows stay harmless.)

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "error.hpp"
#include "policy.hpp"
#include "types.hpp"

namespace posenc {

/// Row-major boolean [Lq, Lk] mask: true where query i may attend to key j.
using bool_mask = row_matrix<bool>;

/// Which keys each query may see. Broadcast over heads; `key_lengths` is per batch item.
struct attention_mask {
  /// Causal: query i (position q_offset + i) sees keys j <= q_offset + i.
  bool causal = false;
  /// Per batch item b: keys j >= key_lengths[b] are padding. Empty: every key is valid.
  std::vector<Index> key_lengths;
  /// Boolean [Lq, Lk], true = may attend. Empty (0x0): everything allowed.
  bool_mask allowed;
  /// Additive [Lq, Lk] added to the logits after scaling and bias; -inf masks the key.
  /// Empty (0x0): none. +inf and NaN are rejected.
  dmatrix additive;

  /// A causal mask.
  static attention_mask causal_mask() {
    attention_mask m;
    m.causal = true;
    return m;
  }
};

/// What one attention call computes (semantics: the result depends on every field; how
/// to run it, e.g. threads, is flash_options).
struct attention_config {
  /// Logit scale; 0 (the default) selects 1/sqrt(d). Must be finite and >= 0. T5 uses 1.
  double scale = 0.0;
  /// Absolute position of query row 0 (keys sit at 0..Lk-1). Must be >= 0.
  Index q_offset = 0;
  /// Which keys each query may see.
  attention_mask mask;
};

/// The former name of attention_config.
using attention_options [[deprecated("use posenc::attention_config")]] = attention_config;

namespace detail {

/// Validates a mask against a call's shape (once per call, before any work).
inline void check_mask(const attention_mask& m, const attention_shape& s, const char* where) {
  check_positions(s, where);
  if (!m.key_lengths.empty()) {
    require(static_cast<Index>(m.key_lengths.size()) == s.batch, where, "mask.key_lengths.size()",
            m.key_lengths.size(), "must equal the batch size");
    for (Index len : m.key_lengths)
      require(len >= 0 && len <= s.len_k, where, "mask.key_lengths[b]", len,
              "must be in [0, len_k]");
  }
  if (m.allowed.size() != 0) {
    require(m.allowed.rows() == s.len_q, where, "mask.allowed.rows()", m.allowed.rows(),
            "must equal len_q");
    require(m.allowed.cols() == s.len_k, where, "mask.allowed.cols()", m.allowed.cols(),
            "must equal len_k");
  }
  if (m.additive.size() != 0) {
    require(m.additive.rows() == s.len_q, where, "mask.additive.rows()", m.additive.rows(),
            "must equal len_q");
    require(m.additive.cols() == s.len_k, where, "mask.additive.cols()", m.additive.cols(),
            "must equal len_k");
    for (Index e = 0; e < m.additive.size(); ++e) {
      const double x = m.additive.data()[e];
      require(!std::isnan(x) && x != std::numeric_limits<double>::infinity(), where,
              "mask.additive element", x, "must not be NaN or +inf");
    }
  }
}

/// The scale a call uses: `scale` if > 0, else 1/sqrt(d). Validated by check_attention.
inline double resolve_scale(double scale, Index dim) noexcept {
  return scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(dim));
}

/// Validates sizes, scale, mask and policy once per call.
template <class Policy>
void check_attention(const attention_shape& s, const attention_config& config, const Policy& policy,
                     const char* where) {
  check_policy_traits<Policy>();
  require(s.dim >= 1, where, "dim", s.dim, "must be >= 1");
  require(s.dim_v >= 0, where, "dim_v", s.dim_v, "must be >= 0");
  require(std::isfinite(config.scale) && config.scale >= 0, where, "scale", config.scale,
          "must be finite and >= 0 (0 selects 1/sqrt(d))");
  check_mask(config.mask, s, where);
  policy.check(s);
}

/// Keys [0, limit) are the only ones a row can see; the elementwise masks thin them out.
inline Index visible_limit(const attention_mask& m, Index batch, Index pos, Index len_k) noexcept {
  Index limit = len_k;
  if (!m.key_lengths.empty())
    limit = std::min(limit, m.key_lengths[static_cast<std::size_t>(batch)]);
  if (m.causal) limit = std::min(limit, pos + 1);
  return std::max<Index>(limit, 0);
}

}  // namespace detail
}  // namespace posenc
