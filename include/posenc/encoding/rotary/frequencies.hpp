#pragma once
/// \file
/// Rotary position embedding (RoPE) frequencies: the contract between the scalings
/// (scaling.hpp, which computes them) and the rotation (rotary.hpp, which applies them).
///
/// RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding")
/// rotates each pair of dims (x_a, x_b) of a query/key at position n by the angle
/// n * inv_freq_i, for pair i < r/2 where r is the rotary dim:
///
///     x_a' = x_a cos(n w_i) - x_b sin(n w_i)
///     x_b' = x_b cos(n w_i) + x_a sin(n w_i)        w_i = inv_freq[i]
///
/// Everything here is in double: frequencies are computed once, one way, or supplied as a
/// framework computed them (rope_frequencies::from_inv_freq).

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/limits.hpp"
#include "../../core/types.hpp"
#include "../../math/frequency.hpp"

namespace posenc {

/// Which dims form a rotation pair (a property of the checkpoint's Q/K weights).
///
///     half:        [x0 x1 ... x(r/2-1) | x(r/2) ... x(r-1)]   pair i = (i, i + r/2)
///                  GPT-NeoX, Pythia, LLaMA 1-3, Mistral, Qwen, Phi-3, Gemma
///                  (Hugging Face "rotate_half").
///     interleaved: [x0 x1 | x2 x3 | ...]                      pair i = (2i, 2i + 1)
///                  RoFormer, GPT-J, Meta's original LLaMA code, GGML "normal" mode.
enum class rope_pairing { half, interleaved };

/// "half" or "interleaved".
inline const char* to_string(rope_pairing p) noexcept {
  return p == rope_pairing::half ? "half" : "interleaved";
}

/// The effective rotary frequencies for one sequence length: everything the rotation needs.
///
/// - `inv_freq`: r/2 angular frequencies w_i (radians per position), in double.
/// - `attention_factor`: multiplies both cos and sin (YaRN's mscale, LongRoPE's length
///   factor); the rotation applies it exactly once. 1 for unscaled RoPE.
/// - xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): when
///   `xpos_scale_base > 0`, pair i of q at position n is also scaled by
///   zeta_i^(n / xpos_scale_base) and of k by zeta_i^(-n / xpos_scale_base), with
///   zeta_i = (2i/r + gamma) / (1 + gamma), gamma = `xpos_gamma` (0.4 in the paper), so that
///   q_m . k_n carries zeta_i^((m - n) / xpos_scale_base): a function of m - n only.
struct rope_frequencies {
  /// w_i for i < r/2, radians per position.
  std::vector<double> inv_freq;
  /// Multiplies cos and sin; applied exactly once by the rotation.
  double attention_factor = 1.0;
  /// xPos scale base (the paper's gamma in zeta^(n/gamma)); 0 = no xPos.
  double xpos_scale_base = 0.0;
  /// xPos gamma in zeta_i = (2i/r + gamma) / (1 + gamma).
  double xpos_gamma = 0.4;

  /// The rotary dim r = 2 * inv_freq.size().
  Index rotary_dim() const noexcept { return static_cast<Index>(2 * inv_freq.size()); }
  /// True when the xPos decay applies.
  bool has_xpos() const noexcept { return xpos_scale_base > 0.0; }
  /// xPos per-pair base zeta_i = (2i/r + gamma) / (1 + gamma), for 0 <= i < r/2.
  double xpos_zeta(Index i) const noexcept {
    const double r = static_cast<double>(rotary_dim());
    return (2.0 * static_cast<double>(i) / r + xpos_gamma) / (1.0 + xpos_gamma);
  }
  /// xPos scale of pair i at position n: zeta_i^(n / scale_base) for queries
  /// (`key == false`), zeta_i^(-n / scale_base) for keys; 1 without xPos.
  double xpos_scale(Index i, double n, bool key) const noexcept {
    if (!has_xpos()) return 1.0;
    const double e = n / xpos_scale_base;
    return std::pow(xpos_zeta(i), key ? -e : e);
  }

  /// Inverse frequencies a framework already holds (e.g. a Hugging Face model's float32
  /// `inv_freq` buffer), used as given instead of being computed from a base: `values`,
  /// `count` = rotary_dim / 2 float or double w_i, radians per position (errors call them
  /// inv_freq). Attention factor 1, no
  /// xPos (set the fields afterwards to change that).
  ///
  /// Float values widen to double exactly, and the float32_reference precision rounds each
  /// w_i back to float32, so a float32 buffer is used bit for bit: angle = float32(n) * w_i
  /// in float32, as the framework's float32 code computes it (cache.hpp). Double values are
  /// used as they are by the exact precision and rounded to nearest float32 by
  /// float32_reference.
  ///
  /// Throws posenc::error unless `rotary_dim` is even and positive, `count` equals
  /// rotary_dim / 2 (the message names both), and every value is finite.
  template <class T>
  static rope_frequencies from_inv_freq(const T* values, Index count, Index rotary_dim) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "posenc::rope_frequencies::from_inv_freq: values must be float or double");
    const char* where = "rope_frequencies::from_inv_freq";
    detail::require(rotary_dim > 0 && rotary_dim % 2 == 0, where, "rotary_dim", rotary_dim,
                    "must be even and positive");
    detail::check_dim_limit(where, "rotary_dim", rotary_dim);
    detail::require(count == rotary_dim / 2, where, "inv_freq.size()", count,
                    "must equal rotary_dim / 2 = " + std::to_string(rotary_dim / 2) +
                        " (rotary_dim = " + std::to_string(rotary_dim) + ")");
    detail::require(values != nullptr, where, "inv_freq", "nullptr", "needs memory");
    rope_frequencies f;
    f.inv_freq.resize(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
      const double w = static_cast<double>(values[i]);
      if (!std::isfinite(w))
        detail::fail(where, "inv_freq[" + std::to_string(i) + "]", w, "must be finite");
      f.inv_freq[i] = w;
    }
    return f;
  }

  /// from_inv_freq of a std::vector<float> or std::vector<double> (see the pointer form).
  template <class T>
  static rope_frequencies from_inv_freq(const std::vector<T>& values, Index rotary_dim) {
    return from_inv_freq(values.data(), static_cast<Index>(values.size()), rotary_dim);
  }

  /// from_inv_freq of an Eigen vector (row or column) or expression of float or double
  /// (see the pointer form). Throws posenc::error naming `inv_freq` for a matrix that is
  /// not a vector.
  template <class Derived>
  static rope_frequencies from_inv_freq(const Eigen::MatrixBase<Derived>& values,
                                        Index rotary_dim) {
    using T = typename Derived::Scalar;
    detail::require(values.rows() == 1 || values.cols() == 1, "rope_frequencies::from_inv_freq",
                    "inv_freq",
                    std::to_string(values.rows()) + " x " + std::to_string(values.cols()),
                    "must be a vector (one row or one column)");
    const Eigen::Matrix<T, Eigen::Dynamic, 1> v = values.derived().reshaped();
    return from_inv_freq(v.data(), static_cast<Index>(v.size()), rotary_dim);
  }
};

/// Unscaled RoPE frequencies: inv_freq_i = 1 / base^(2i/r), i < r/2 (RoFormer, eq. 15).
/// Throws posenc::error unless `rotary_dim` is even and positive and `base` is finite and > 1.
inline rope_frequencies plain_rope_frequencies(Index rotary_dim, double base = 10000.0) {
  detail::require(rotary_dim > 0 && rotary_dim % 2 == 0, "plain_rope_frequencies", "rotary_dim",
                  rotary_dim, "must be even and positive");
  detail::check_dim_limit("plain_rope_frequencies", "rotary_dim", rotary_dim);
  detail::require(std::isfinite(base) && base > 1.0, "plain_rope_frequencies", "base", base,
                  "must be finite and > 1");
  rope_frequencies f;
  const Index half = rotary_dim / 2;
  f.inv_freq.resize(static_cast<std::size_t>(half));
  for (Index i = 0; i < half; ++i)
    f.inv_freq[static_cast<std::size_t>(i)] = math::inv_freq(base, i, rotary_dim);
  return f;
}

}  // namespace posenc
