#pragma once
/// \file
/// RoPE configuration and every long-context scaling in use: linear position interpolation,
/// NTK-aware and dynamic NTK base changes, YaRN, Llama 3, LongRoPE (Phi-3) and xPos.
///
/// A rope_config describes one model's rotary embedding; `frequencies(seq_len)` validates it
/// and returns the effective rope_frequencies (inv_freq in double plus the attention factor)
/// for a sequence length. The formulas follow the papers and the Hugging Face
/// `modeling_rope_utils` (see docs/rope-scaling.md for each formula and its source).
///
/// Notation: r = rotary dim, w_i = 1 / (f_i * base^(2i/r)) the base frequency of pair
/// i < r/2, f_i = freq_factors[i] (1 when empty; GGUF `rope_freqs`), L = original_max_positions.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/limits.hpp"
#include "../../core/types.hpp"
#include "../../math/frequency.hpp"
#include "frequencies.hpp"

namespace posenc {

/// Which scaling turns the base frequencies into the effective ones.
enum class rope_scaling_type {
  none,      ///< unscaled RoPE (Su et al. 2021); HF "default"
  linear,    ///< position interpolation (Chen et al. 2023): w_i / factor
  ntk,       ///< NTK-aware base change (bloc97 2023): base * factor^(r/(r-2)), factor = alpha
  dynamic,   ///< dynamic NTK (HF "dynamic"): the NTK base recomputed from the sequence length
  yarn,      ///< YaRN (Peng et al. 2023): ramp between interpolation and extrapolation
  llama3,    ///< Llama 3.1 wavelength-banded interpolation (Meta 2024)
  longrope,  ///< LongRoPE / Phi-3 (Ding et al. 2024): per-pair short/long factors; HF "su"
  xpos       ///< xPos (Sun et al. 2022): unscaled frequencies plus the exponential decay
};

/// The canonical name: "none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "xpos".
inline const char* to_string(rope_scaling_type t) noexcept {
  switch (t) {
    case rope_scaling_type::none:
      return "none";
    case rope_scaling_type::linear:
      return "linear";
    case rope_scaling_type::ntk:
      return "ntk";
    case rope_scaling_type::dynamic:
      return "dynamic";
    case rope_scaling_type::yarn:
      return "yarn";
    case rope_scaling_type::llama3:
      return "llama3";
    case rope_scaling_type::longrope:
      return "longrope";
    case rope_scaling_type::xpos:
      return "xpos";
  }
  return "unknown";
}

/// Parses a scaling name: the canonical names above plus the Hugging Face spellings
/// "default" (= none) and "su" (= longrope, early Phi-3 configs). Throws posenc::error naming
/// `param` (default "scaling") for anything else.
inline rope_scaling_type parse_rope_scaling_type(std::string_view name,
                                                 std::string_view param = "scaling") {
  if (name == "none" || name == "default") return rope_scaling_type::none;
  if (name == "linear") return rope_scaling_type::linear;
  if (name == "ntk") return rope_scaling_type::ntk;
  if (name == "dynamic") return rope_scaling_type::dynamic;
  if (name == "yarn") return rope_scaling_type::yarn;
  if (name == "llama3") return rope_scaling_type::llama3;
  if (name == "longrope" || name == "su") return rope_scaling_type::longrope;
  if (name == "xpos") return rope_scaling_type::xpos;
  detail::fail(
      "rope_config", param, std::string(name),
      "unknown scaling (expected none|default|linear|ntk|dynamic|yarn|llama3|longrope|su|xpos)");
}

/// "half" / "interleaved" to rope_pairing; posenc::error naming `param` otherwise.
inline rope_pairing parse_rope_pairing(std::string_view name, std::string_view param = "pairing") {
  if (name == "half") return rope_pairing::half;
  if (name == "interleaved") return rope_pairing::interleaved;
  detail::fail("rope_config", param, std::string(name), "expected half|interleaved");
}

/// YaRN's magnitude correction (Peng et al. 2023, eq. 22 generalised by DeepSeek):
/// 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1.
inline double yarn_get_mscale(double scale, double mscale = 1.0) noexcept {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

/// The dimension (in units of dims, 0..r) whose wavelength makes `num_rotations` turns over
/// `max_positions`: r * ln(L / (2 pi n)) / (2 ln base) (YaRN's inverse dimension formula).
inline double yarn_correction_dim(double num_rotations, Index rotary_dim, double base,
                                  double max_positions) noexcept {
  const double pi = 3.14159265358979323846;
  return static_cast<double>(rotary_dim) * std::log(max_positions / (num_rotations * 2.0 * pi)) /
         (2.0 * std::log(base));
}

/// A rotary embedding's configuration: sizes, base, pairing and one scaling with its parameters.
///
/// Fields a scaling does not use are ignored by it (but still validated when they would make
/// no sense at all). Parameter names follow the Hugging Face `rope_scaling` keys; see
/// hf_config.hpp to build one from a config.json and from llama.cpp/GGUF parameters.
struct rope_config {
  /// Per-head dim D (> 0).
  Index head_dim = 0;
  /// Rotary dim r (even, <= head_dim); -1 = head_dim. Dims r..D-1 pass through untouched.
  Index rotary_dim = -1;
  /// RoPE base (HF `rope_theta`, GGUF `freq_base`).
  double base = 10000.0;
  /// Pair layout of the checkpoint.
  rope_pairing pairing = rope_pairing::half;
  /// The scaling.
  rope_scaling_type scaling = rope_scaling_type::none;
  /// Scale factor s: linear/yarn/llama3 context ratio, ntk alpha, dynamic factor; LongRoPE's
  /// max_positions / original_max_positions (only for its default attention factor).
  double factor = 1.0;
  /// Pre-training context L (HF `original_max_position_embeddings`; for dynamic NTK the HF
  /// `max_position_embeddings`). Required (> 0) by dynamic, yarn, llama3 and longrope.
  Index original_max_positions = 0;
  /// YaRN: number of rotations bounding the extrapolated (fast) dims.
  double beta_fast = 32.0;
  /// YaRN: number of rotations bounding the interpolated (slow) dims.
  double beta_slow = 1.0;
  /// YaRN/DeepSeek: with mscale_all_dim, attention factor = mscale(s, mscale) / mscale(s,
  /// mscale_all_dim).
  std::optional<double> mscale;
  /// YaRN/DeepSeek: see mscale.
  std::optional<double> mscale_all_dim;
  /// YaRN and LongRoPE: overrides the computed attention factor; other scalings: used as is
  /// (default 1).
  std::optional<double> attention_factor;
  /// YaRN: floor/ceil the correction range (HF default true).
  bool truncate = true;
  /// YaRN: strength of the extrapolation blend in [0, 1] (llama.cpp `ext_factor`; 1 = the paper).
  double yarn_ext_factor = 1.0;
  /// Llama 3: wavelengths above L / low_freq_factor are interpolated by `factor`.
  double low_freq_factor = 1.0;
  /// Llama 3: wavelengths below L / high_freq_factor are left untouched.
  double high_freq_factor = 4.0;
  /// LongRoPE: r/2 per-pair divisors used when seq_len <= L.
  std::vector<double> short_factor;
  /// LongRoPE: r/2 per-pair divisors used when seq_len > L.
  std::vector<double> long_factor;
  /// Optional r/2 per-pair divisors of the base frequencies (GGUF `rope_freqs`, e.g. Llama 3
  /// converted by llama.cpp); empty = none. Not allowed with longrope (its lists play that role).
  std::vector<double> freq_factors;
  /// xPos scale base (the paper's gamma = 512).
  double xpos_scale_base = 512.0;
  /// xPos zeta offset (0.4 in the paper).
  double xpos_gamma = 0.4;

  /// The rotary dim in use: head_dim when rotary_dim is -1.
  Index resolved_rotary_dim() const noexcept { return rotary_dim == -1 ? head_dim : rotary_dim; }

  /// Throws posenc::error naming the first invalid parameter and its value.
  void validate() const;

  /// Validates, then returns the effective frequencies and attention factor for a sequence of
  /// `seq_len` tokens (dynamic NTK and LongRoPE depend on it; 0 = within the original context).
  rope_frequencies frequencies(Index seq_len = 0) const;

 private:
  double base_power(Index i) const noexcept;
};

// ---------------------------------------------------------------------------------------------

inline void rope_config::validate() const {
  constexpr const char* where = "rope_config";
  const int t = static_cast<int>(scaling);
  detail::require(t >= static_cast<int>(rope_scaling_type::none) &&
                      t <= static_cast<int>(rope_scaling_type::xpos),
                  where, "scaling", t, "unknown scaling type");
  detail::require(head_dim > 0, where, "head_dim", head_dim, "must be > 0");
  detail::check_dim_limit(where, "head_dim", head_dim);
  detail::require(rotary_dim == -1 || rotary_dim > 0, where, "rotary_dim", rotary_dim,
                  "must be > 0 (or -1 for head_dim)");
  const Index r = resolved_rotary_dim();
  detail::require(r % 2 == 0, where, "rotary_dim", r, "must be even");
  detail::require(r <= head_dim, where, "rotary_dim", r, "must be <= head_dim");
  detail::require(std::isfinite(base) && base > 1.0, where, "base", base, "must be finite and > 1");
  const int p = static_cast<int>(pairing);
  detail::require(
      p == static_cast<int>(rope_pairing::half) || p == static_cast<int>(rope_pairing::interleaved),
      where, "pairing", p, "unknown pairing");
  detail::require(std::isfinite(factor) && factor > 0.0, where, "factor", factor,
                  "must be finite and > 0");
  if (attention_factor)
    detail::require(std::isfinite(*attention_factor) && *attention_factor > 0.0, where,
                    "attention_factor", *attention_factor, "must be finite and > 0");
  const std::size_t half = static_cast<std::size_t>(r / 2);
  auto check_list = [&](const std::vector<double>& v, const char* name) {
    if (v.size() != half)
      detail::fail(where, std::string(name) + ".size()", v.size(),
                   "must be rotary_dim/2 = " + std::to_string(half));
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!(std::isfinite(v[i]) && v[i] > 0.0))  // the name is built only on failure
        detail::fail(where, std::string(name) + "[" + std::to_string(i) + "]", v[i],
                     "must be finite and > 0");
  };
  if (!freq_factors.empty()) {
    detail::require(scaling != rope_scaling_type::longrope, where, "freq_factors.size()",
                    freq_factors.size(), "must be empty with longrope (use short/long_factor)");
    check_list(freq_factors, "freq_factors");
  }
  const bool needs_original =
      scaling == rope_scaling_type::dynamic || scaling == rope_scaling_type::yarn ||
      scaling == rope_scaling_type::llama3 || scaling == rope_scaling_type::longrope;
  if (needs_original)
    detail::require(original_max_positions > 0, where, "original_max_positions",
                    original_max_positions, std::string("must be > 0 for ") + to_string(scaling));
  switch (scaling) {
    case rope_scaling_type::ntk:
    case rope_scaling_type::dynamic:
      // The base exponent r/(r-2) needs r > 2.
      detail::require(r > 2, where, "rotary_dim", r, "must be > 2 for NTK scaling");
      break;
    case rope_scaling_type::yarn:
      detail::require(std::isfinite(beta_slow) && beta_slow > 0.0, where, "beta_slow", beta_slow,
                      "must be finite and > 0");
      detail::require(std::isfinite(beta_fast) && beta_fast > beta_slow, where, "beta_fast",
                      beta_fast, "must be finite and > beta_slow");
      if (mscale)
        detail::require(std::isfinite(*mscale), where, "mscale", *mscale, "must be finite");
      if (mscale_all_dim)
        detail::require(std::isfinite(*mscale_all_dim), where, "mscale_all_dim", *mscale_all_dim,
                        "must be finite");
      detail::require(
          std::isfinite(yarn_ext_factor) && yarn_ext_factor >= 0.0 && yarn_ext_factor <= 1.0, where,
          "yarn_ext_factor", yarn_ext_factor, "must be in [0, 1]");
      break;
    case rope_scaling_type::llama3:
      detail::require(std::isfinite(low_freq_factor) && low_freq_factor > 0.0, where,
                      "low_freq_factor", low_freq_factor, "must be finite and > 0");
      detail::require(std::isfinite(high_freq_factor) && high_freq_factor > low_freq_factor, where,
                      "high_freq_factor", high_freq_factor, "must be finite and > low_freq_factor");
      break;
    case rope_scaling_type::longrope:
      check_list(short_factor, "short_factor");
      check_list(long_factor, "long_factor");
      break;
    case rope_scaling_type::xpos:
      detail::require(std::isfinite(xpos_scale_base) && xpos_scale_base > 0.0, where,
                      "xpos_scale_base", xpos_scale_base, "must be finite and > 0");
      detail::require(std::isfinite(xpos_gamma) && xpos_gamma > 0.0, where, "xpos_gamma",
                      xpos_gamma, "must be finite and > 0");
      break;
    default:
      break;
  }
}

// f_i * base^(2i/r): the denominator of the base frequency of pair i.
inline double rope_config::base_power(Index i) const noexcept {
  const double p = math::base_power(base, i, resolved_rotary_dim());
  return freq_factors.empty() ? p : freq_factors[static_cast<std::size_t>(i)] * p;
}

inline rope_frequencies rope_config::frequencies(Index seq_len) const {
  validate();
  detail::require(seq_len >= 0, "rope_config::frequencies", "seq_len", seq_len, "must be >= 0");
  const Index r = resolved_rotary_dim();
  const Index half = r / 2;
  const double rd = static_cast<double>(r);
  const double L = static_cast<double>(original_max_positions);
  rope_frequencies out;
  out.inv_freq.resize(static_cast<std::size_t>(half));
  auto at = [&](Index i) -> double& { return out.inv_freq[static_cast<std::size_t>(i)]; };
  double attn = attention_factor.value_or(1.0);

  // Base frequencies with a (possibly changed) base: w_i = 1 / (f_i * b^(2i/r)).
  auto fill_with_base = [&](double b) {
    for (Index i = 0; i < half; ++i) {
      const double p = math::base_power(b, i, r);
      at(i) = 1.0 / (freq_factors.empty() ? p : freq_factors[static_cast<std::size_t>(i)] * p);
    }
  };

  switch (scaling) {
    case rope_scaling_type::none:
      fill_with_base(base);
      break;
    case rope_scaling_type::xpos:
      fill_with_base(base);
      out.xpos_scale_base = xpos_scale_base;
      out.xpos_gamma = xpos_gamma;
      break;
    case rope_scaling_type::linear:
      // Position interpolation: positions / s, i.e. w_i / s.
      fill_with_base(base);
      for (Index i = 0; i < half; ++i) at(i) /= factor;
      break;
    case rope_scaling_type::ntk:
      // NTK-aware: base' = base * alpha^(r/(r-2)).
      fill_with_base(base * std::pow(factor, rd / (rd - 2.0)));
      break;
    case rope_scaling_type::dynamic: {
      // Only a sequence longer than L changes the base; never a shorter one.
      if (static_cast<double>(seq_len) <= L) {
        fill_with_base(base);
      } else {
        const double n = static_cast<double>(seq_len);
        fill_with_base(base * std::pow(factor * n / L - (factor - 1.0), rd / (rd - 2.0)));
      }
      break;
    }
    case rope_scaling_type::yarn: {
      if (!attention_factor) {
        // HF: the DeepSeek ratio when both mscale and mscale_all_dim are given (and non-zero).
        if (mscale && mscale_all_dim && *mscale != 0.0 && *mscale_all_dim != 0.0)
          attn = yarn_get_mscale(factor, *mscale) / yarn_get_mscale(factor, *mscale_all_dim);
        else
          attn = yarn_get_mscale(factor);
      }
      double low = yarn_correction_dim(beta_fast, r, base, L);
      double high = yarn_correction_dim(beta_slow, r, base, L);
      if (truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, rd - 1.0);
      if (low == high) high += 0.001;  // avoid a zero-width ramp
      for (Index i = 0; i < half; ++i) {
        const double p = base_power(i);
        const double extrapolation = 1.0 / p;
        const double interpolation = 1.0 / (factor * p);
        const double ramp =
            std::min(std::max((static_cast<double>(i) - low) / (high - low), 0.0), 1.0);
        const double extrapolation_weight = (1.0 - ramp) * yarn_ext_factor;
        at(i) = interpolation * (1.0 - extrapolation_weight) + extrapolation * extrapolation_weight;
      }
      break;
    }
    case rope_scaling_type::llama3: {
      const double pi = 3.14159265358979323846;
      const double low_freq_wavelen = L / low_freq_factor;
      const double high_freq_wavelen = L / high_freq_factor;
      fill_with_base(base);
      for (Index i = 0; i < half; ++i) {
        const double w = at(i);
        const double wavelen = 2.0 * pi / w;
        if (wavelen < high_freq_wavelen) continue;  // high frequency: untouched
        if (wavelen > low_freq_wavelen) {           // low frequency: interpolated
          at(i) = w / factor;
          continue;
        }
        const double smooth =
            (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
        at(i) = (1.0 - smooth) * w / factor + smooth * w;
      }
      break;
    }
    case rope_scaling_type::longrope: {
      const bool use_long = static_cast<double>(seq_len) > L;
      const std::vector<double>& ext = use_long ? long_factor : short_factor;
      for (Index i = 0; i < half; ++i)
        at(i) = 1.0 / (ext[static_cast<std::size_t>(i)] * base_power(i));
      if (!attention_factor)
        attn = factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(L));
      break;
    }
  }
  out.attention_factor = attn;
  return out;
}

}  // namespace posenc
