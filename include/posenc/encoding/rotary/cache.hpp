#pragma once
/// \file
/// RoPE cos/sin values: one routine computes the row of a position; the cache stores rows
/// [0, size) and grows on demand. The rotation uses either, with identical results.
///
/// Row of position n, pair i < r/2 (w_i = inv_freq[i], A = attention_factor):
///
///     exact (default):     cos_i = A cos(n w_i),  sin_i = A sin(n w_i)
///                          n w_i, cos and sin in double, rounded to Scalar once at the end:
///                          float32 stays within ~1e-7 of the float64 values at any position.
///     float32_reference:   w_i rounded to float32, angle = float32(float32(n) * w_i),
///                          cos/sin of that float32 angle rounded to float32, then times
///                          float32(A) in float32: what PyTorch / Hugging Face float32 code
///                          computes. Its angle error grows with n (about 0.03 rad at
///                          n = 1e6); use it only to reproduce such a model.
///
/// With xPos, query rows are also multiplied by zeta_i^(n/scale_base) and key rows by
/// zeta_i^(-n/scale_base) (computed in double); without it query and key rows are the same.
///
/// Memory of a cache: 2 * r/2 * sizeof(Scalar) per position (twice that with xPos), e.g.
/// 512 bytes per position for float and r = 128, 64 MiB for 131072 positions.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/view.hpp"
#include "frequencies.hpp"

namespace posenc {

/// How the rotation angles are computed (see the file comment).
enum class rope_precision {
  exact,             ///< angles, cos and sin in double, rounded once (the default)
  float32_reference  ///< inv_freq and angles in float32, like PyTorch float32 code
};

/// Which side of the dot product a tensor is: only xPos treats them differently.
enum class rope_role { query, key };

namespace detail {

/// Checks what the rotation needs from `f`: a non-empty inv_freq of finite values, a finite
/// attention factor, finite xPos parameters.
inline void check_rope_frequencies(const rope_frequencies& f, const char* where) {
  require(!f.inv_freq.empty(), where, "inv_freq.size()", f.inv_freq.size(),
          "needs at least one frequency");
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i)
    if (!std::isfinite(f.inv_freq[i]))
      fail(where, "inv_freq[" + std::to_string(i) + "]", f.inv_freq[i], "must be finite");
  require(std::isfinite(f.attention_factor), where, "attention_factor", f.attention_factor,
          "must be finite");
  require(std::isfinite(f.xpos_scale_base) && f.xpos_scale_base >= 0.0, where,
          "xpos_scale_base", f.xpos_scale_base, "must be finite and >= 0 (0 = no xPos)");
  if (f.has_xpos())
    require(std::isfinite(f.xpos_gamma) && f.xpos_gamma > 0.0, where, "xpos_gamma",
            f.xpos_gamma, "must be finite and > 0");
}

/// The cos/sin row of position `n` for `role`, r/2 values each. The single place where
/// RoPE angles are computed.
template <class Scalar>
void rope_row(const rope_frequencies& f, rope_precision precision, Index n, rope_role role,
              Scalar* cos_out, Scalar* sin_out) noexcept {
  const std::size_t pairs = f.inv_freq.size();
  const bool key = role == rope_role::key;
  if (precision == rope_precision::exact) {
    const double pos = static_cast<double>(n);
    for (std::size_t i = 0; i < pairs; ++i) {
      const double angle = pos * f.inv_freq[i];
      const double scale = f.attention_factor * f.xpos_scale(static_cast<Index>(i), pos, key);
      cos_out[i] = static_cast<Scalar>(std::cos(angle) * scale);
      sin_out[i] = static_cast<Scalar>(std::sin(angle) * scale);
    }
    return;
  }
  // float32_reference: every step rounded to float32 as PyTorch float32 code does
  const float pos_f = static_cast<float>(n);
  const float factor_f = static_cast<float>(f.attention_factor);
  for (std::size_t i = 0; i < pairs; ++i) {
    const float w = static_cast<float>(f.inv_freq[i]);
    const float angle = pos_f * w;
    const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * factor_f;
    const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * factor_f;
    const double x = f.xpos_scale(static_cast<Index>(i), static_cast<double>(n), key);
    cos_out[i] = static_cast<Scalar>(f.has_xpos() ? static_cast<float>(c * x) : c);
    sin_out[i] = static_cast<Scalar>(f.has_xpos() ? static_cast<float>(s * x) : s);
  }
}

}  // namespace detail

/// Precomputed RoPE cos/sin rows for positions [0, size()), grown on demand.
///
/// Rows are [position, r/2] row-major tables; row n is exactly what detail::rope_row
/// computes on the fly. Growing is not thread-safe; reading a grown cache is.
template <class Scalar>
class rope_cache {
 public:
  /// An empty cache of no frequencies.
  rope_cache() = default;

  /// A cache for `freqs` holding positions [0, max_len). Throws posenc::error for
  /// max_len < 0 or frequencies the rotation cannot use (empty, non-finite).
  explicit rope_cache(rope_frequencies freqs, rope_precision precision = rope_precision::exact,
                      Index max_len = 0)
      : freqs_(std::move(freqs)), precision_(precision) {
    detail::check_rope_frequencies(freqs_, "rope_cache");
    reserve(max_len);
  }

  const rope_frequencies& frequencies() const noexcept { return freqs_; }
  rope_precision precision() const noexcept { return precision_; }
  /// r/2: values per row.
  Index pairs() const noexcept { return static_cast<Index>(freqs_.inv_freq.size()); }
  /// Number of cached positions: rows exist for [0, size()).
  Index size() const noexcept { return size_; }

  /// Makes rows [0, max_len) available (never shrinks). Throws posenc::error for
  /// max_len < 0.
  void reserve(Index max_len) {
    detail::require(max_len >= 0, "rope_cache::reserve", "max_len", max_len, "must be >= 0");
    if (max_len <= size_) return;
    const Index p = pairs();
    detail::require(p == 0 || max_len <= std::numeric_limits<Index>::max() / (4 * p),
                    "rope_cache::reserve", "max_len", max_len, "the table size overflows");
    const auto total = static_cast<std::size_t>(max_len * p);
    const bool xpos = freqs_.has_xpos();
    cos_q_.resize(total);
    sin_q_.resize(total);
    if (xpos) {
      cos_k_.resize(total);
      sin_k_.resize(total);
    }
    for (Index n = size_; n < max_len; ++n) {
      const auto off = static_cast<std::size_t>(n * p);
      detail::rope_row(freqs_, precision_, n, rope_role::query, &cos_q_[off], &sin_q_[off]);
      if (xpos) detail::rope_row(freqs_, precision_, n, rope_role::key, &cos_k_[off], &sin_k_[off]);
    }
    size_ = max_len;
  }

  /// Makes the row of position `max_position` available, growing geometrically so that
  /// decoding one token at a time costs amortised O(1) rows.
  void ensure(Index max_position) {
    detail::require(max_position >= 0, "rope_cache::ensure", "max_position", max_position,
                    "must be >= 0");
    if (max_position < size_) return;
    // max_position + 1 below must not overflow (reserve then checks the table size)
    detail::require(max_position < std::numeric_limits<Index>::max(), "rope_cache::ensure",
                    "max_position", max_position, "the table size overflows");
    const Index doubled = size_ > std::numeric_limits<Index>::max() / 2 ? max_position + 1
                                                                          : 2 * size_;
    reserve(std::max(max_position + 1, doubled));
  }

  /// cos row of position n (n < size(), unchecked), r/2 values.
  const Scalar* cos(Index n, rope_role role = rope_role::query) const noexcept {
    return table(role, true) + n * pairs();
  }
  /// sin row of position n (n < size(), unchecked), r/2 values.
  const Scalar* sin(Index n, rope_role role = rope_role::query) const noexcept {
    return table(role, false) + n * pairs();
  }

 private:
  const Scalar* table(rope_role role, bool cosine) const noexcept {
    const bool key = role == rope_role::key && freqs_.has_xpos();
    if (cosine) return key ? cos_k_.data() : cos_q_.data();
    return key ? sin_k_.data() : sin_q_.data();
  }

  rope_frequencies freqs_;
  rope_precision precision_ = rope_precision::exact;
  Index size_ = 0;
  std::vector<Scalar> cos_q_, sin_q_, cos_k_, sin_k_;
};

}  // namespace posenc
