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
///                          n = 1e6); use it only to reproduce such a model. w_i is the
///                          frequencies' own value: correctly rounded from double when
///                          posenc computed it, which differs by an ulp from torch's float32
///                          pow for some pairs; a framework's float32 inv_freq supplied with
///                          rope_frequencies::from_inv_freq is used bit for bit.
///
/// Backends: on a backend with double packets (avx2, avx512, neon), exact float rows (float,
/// Eigen::half and Eigen::bfloat16 storage) come from vectorised angle addition
/// (backend/simd/angles.hpp: cos/sin(n w) from a coarse row every 64 positions and a 64-row
/// fine table, combined with one multiply and one FMA in double) instead of two libm calls
/// per pair and position. Those double values are within about 1e-15 + 1.2e-16 |n w| of
/// cos/sin(n w), so the float rows equal the libm ones or differ by one ulp. Double rows
/// (where that error would show), the scalar backend and float32_reference call libm per
/// pair. Cached rows and rows computed on the fly come from the same writer, so they are
/// bit-identical on every backend.
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
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../backend/simd/angles.hpp"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/limits.hpp"
#include "../../core/types.hpp"
#include "../../math/rotation.hpp"
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
  require(std::isfinite(f.xpos_scale_base) && f.xpos_scale_base >= 0.0, where, "xpos_scale_base",
          f.xpos_scale_base, "must be finite and >= 0 (0 = no xPos)");
  if (f.has_xpos())
    require(std::isfinite(f.xpos_gamma) && f.xpos_gamma > 0.0, where, "xpos_gamma", f.xpos_gamma,
            "must be finite and > 0");
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
      const double scale = f.attention_factor * f.xpos_scale(static_cast<Index>(i), pos, key);
      math::rope_cos_sin(math::angle(n, f.inv_freq[i]), scale, cos_out[i], sin_out[i]);
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

/// True when `Backend` computes exact float RoPE rows with vectorised angle addition.
template <class Backend>
inline constexpr bool rope_vector_angles_v = simd::has_packet_v<double, Backend>;

/// The fine table a cache of Scalar rows needs on `Backend` (null when its rows come from
/// libm per pair):
/// filled up front, so copies of a cache and threads computing rows on the fly share it.
/// Throws std::bad_alloc.
template <class Scalar, class Backend>
std::shared_ptr<const simd::fine_angles> make_rope_fine_table(const rope_frequencies& f,
                                                              rope_precision precision) {
  if constexpr (rope_vector_angles_v<Backend> && std::is_same_v<Scalar, float>) {
    if (precision != rope_precision::exact || f.inv_freq.empty()) return nullptr;
    auto table = std::make_shared<simd::fine_angles>(f.inv_freq.data(),
                                                     static_cast<Index>(f.inv_freq.size()));
    table->fill();
    return table;
  } else {
    (void)f;
    (void)precision;
    return nullptr;
  }
}

/// Writes RoPE cos/sin rows for one thread: the single place where a backend's rows are
/// computed (cached and on-the-fly rows both come from here). With a fine table (exact
/// float rows on a SIMD backend) a row is cos/sin(n w_i) by angle addition, times the same
/// double scale A * xPos_i(n) as rope_row, rounded to float once; otherwise rope_row.
template <class Backend>
class rope_row_writer {
 public:
  /// `f` must outlive the writer. Throws std::bad_alloc.
  rope_row_writer(const rope_frequencies& f, rope_precision precision,
                  std::shared_ptr<const simd::fine_angles> fine)
      : f_(f), precision_(precision), gen_(make_generator(std::move(fine))) {
    if (has_generator()) {
      dc_.resize(f.inv_freq.size());
      ds_.resize(f.inv_freq.size());
    }
  }

  /// The row of position n for `role` into r/2 values each. Never throws.
  template <class Scalar>
  void row(Index n, rope_role role, Scalar* cos_out, Scalar* sin_out) noexcept {
    if constexpr (rope_vector_angles_v<Backend> && std::is_same_v<Scalar, float>) {
      if (gen_) {
        double* dc = dc_.data();
        double* ds = ds_.data();
        gen_->row(n, [dc, ds](Index i, auto s, auto c, int lanes) {
          s.store_partial(ds + i, lanes);
          c.store_partial(dc + i, lanes);
        });
        const std::size_t pairs = f_.inv_freq.size();
        const double pos = static_cast<double>(n);
        const bool key = role == rope_role::key;
        if (!f_.has_xpos()) {
          const double a = f_.attention_factor;  // = rope_row's scale without xPos
          for (std::size_t i = 0; i < pairs; ++i) {
            cos_out[i] = static_cast<Scalar>(dc[i] * a);
            sin_out[i] = static_cast<Scalar>(ds[i] * a);
          }
        } else {
          for (std::size_t i = 0; i < pairs; ++i) {
            const double scale =
                f_.attention_factor * f_.xpos_scale(static_cast<Index>(i), pos, key);
            cos_out[i] = static_cast<Scalar>(dc[i] * scale);
            sin_out[i] = static_cast<Scalar>(ds[i] * scale);
          }
        }
        return;
      }
    }
    rope_row(f_, precision_, n, role, cos_out, sin_out);
  }

 private:
  struct no_generator {
    explicit operator bool() const noexcept { return false; }
  };
  using generator =
      std::conditional_t<rope_vector_angles_v<Backend>,
                         std::unique_ptr<simd::angle_addition<Backend>>, no_generator>;

  static generator make_generator(std::shared_ptr<const simd::fine_angles> fine) {
    if constexpr (rope_vector_angles_v<Backend>) {
      if (fine) return std::make_unique<simd::angle_addition<Backend>>(std::move(fine));
      return nullptr;
    } else {
      return {};
    }
  }
  bool has_generator() const noexcept { return static_cast<bool>(gen_); }

  const rope_frequencies& f_;
  rope_precision precision_;
  generator gen_;
  std::vector<double> dc_, ds_;
};

}  // namespace detail

/// Precomputed RoPE cos/sin rows for positions [0, size()), grown on demand.
///
/// Rows are [position, r/2] row-major tables; row n is exactly what writer().row(n, ...)
/// computes on the fly (for the scalar backend: detail::rope_row). Growing is not
/// thread-safe; reading a grown cache, and writers (one per thread), are.
template <class Scalar, class Backend = default_backend>
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
    fine_ = detail::make_rope_fine_table<Scalar, Backend>(freqs_, precision_);
    reserve(max_len);
  }

  const rope_frequencies& frequencies() const noexcept { return freqs_; }
  rope_precision precision() const noexcept { return precision_; }
  /// r/2: values per row.
  Index pairs() const noexcept { return static_cast<Index>(freqs_.inv_freq.size()); }
  /// Number of cached positions: rows exist for [0, size()).
  Index size() const noexcept { return size_; }

  /// A writer of rows for one thread, computing exactly the rows the cache stores (for
  /// positions the cache does not hold). Valid while this cache lives. Throws
  /// std::bad_alloc.
  detail::rope_row_writer<Backend> writer() const {
    return detail::rope_row_writer<Backend>(freqs_, precision_, fine_);
  }

  /// Makes rows [0, max_len) available (never shrinks). Throws posenc::error for
  /// max_len < 0.
  void reserve(Index max_len) {
    detail::require(max_len >= 0, "rope_cache::reserve", "max_len", max_len, "must be >= 0");
    if (max_len <= size_) return;
    const Index p = pairs();
    const bool xpos = freqs_.has_xpos();
    // cos and sin rows (and the keys' under xPos): at most limits::max_elements values
    detail::check_elements("rope_cache::reserve", "max_len", max_len, (xpos ? 4 : 2) * p);
    const auto total = static_cast<std::size_t>(max_len * p);
    cos_q_.resize(total);
    sin_q_.resize(total);
    if (xpos) {
      cos_k_.resize(total);
      sin_k_.resize(total);
    }
    auto w = writer();
    for (Index n = size_; n < max_len; ++n) {
      const auto off = static_cast<std::size_t>(n * p);
      w.row(n, rope_role::query, &cos_q_[off], &sin_q_[off]);
      if (xpos) w.row(n, rope_role::key, &cos_k_[off], &sin_k_[off]);
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
    const Index doubled =
        size_ > std::numeric_limits<Index>::max() / 2 ? max_position + 1 : 2 * size_;
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
  std::shared_ptr<const simd::fine_angles> fine_;  // shared by copies; never modified
  Index size_ = 0;
  std::vector<Scalar> cos_q_, sin_q_, cos_k_, sin_k_;
};

}  // namespace posenc
