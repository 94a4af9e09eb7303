#pragma once
/// \file
/// ALiBi, attention with linear biases (Press, Smith & Lewis 2022, "Train short, test
/// long"): no position embedding; each head h adds a fixed linear penalty to its logits
/// (after the 1/sqrt(d) scaling):
///
///     causal form      bias_h(i, j) = -m_h · (pos_i - j)       pos_i = q_offset + i
///     symmetric form   bias_h(i, j) = -m_h · |pos_i - j|       (bidirectional encoders)
///
/// Keys after the query in the causal form: the same linear formula, i.e. +m_h·(j - pos_i)
/// (the bias is exactly linear in j - i everywhere). With the causal mask those keys are
/// masked anyway; this equals Press et al.'s implementation, which adds m_h·j to every row
/// (the two differ by -m_h·pos_i per row, which softmax ignores). For attention without a
/// causal mask use the symmetric form.
///
/// Slopes (the paper's reference code): for n = 2^a heads a geometric sequence
/// m_h = 2^(-8(h+1)/n), h = 0..n-1; otherwise with c = 2^floor(log2 n), the c slopes for c
/// heads followed by every other slope (indices 0, 2, 4, ...) of the 2c-head sequence, the
/// first n - c of them. llama.cpp / ggml parameterise the same with max_bias (8 gives the
/// paper's slopes): m0 = 2^(-max_bias/c), m1 = 2^(-max_bias/(2c)),
/// m_h = m0^(h+1) for h < c, else m1^(2(h-c)+1). posenc evaluates both in double
/// (math/alibi.hpp).
///
/// As a policy its bias form is position_bias::linear_distance (core/policy.hpp), so the
/// tiled kernels generate it inside their tiles; linear_distance_head is the head of any
/// policy of that form (a user's with learned slopes, say).

#include <Eigen/Core>
#include <cmath>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/policy.hpp"
#include "../core/types.hpp"
#include "../math/alibi.hpp"

namespace posenc {

/// ALiBi slopes with llama.cpp's max_bias parameterisation, for `heads` >= 1 heads and
/// max_bias > 0 (8 reproduces the paper). Returns `heads` slopes, head 0 first.
inline std::vector<double> alibi_slopes_max_bias(Index heads, double max_bias) {
  detail::require(heads >= 1, "alibi_slopes", "heads", heads, "must be >= 1");
  detail::check_heads_limit("alibi_slopes", "heads", heads);
  detail::require(std::isfinite(max_bias) && max_bias > 0, "alibi_slopes", "max_bias", max_bias,
                  "must be finite and > 0");
  std::vector<double> m(static_cast<std::size_t>(heads));
  for (Index h = 0; h < heads; ++h)
    m[static_cast<std::size_t>(h)] = math::alibi_slope(h, heads, max_bias);
  return m;
}

/// ALiBi slopes exactly as Press et al.'s reference code defines them (see the file
/// comment), for any `heads` >= 1. Head 0 first.
inline std::vector<double> alibi_slopes(Index heads) { return alibi_slopes_max_bias(heads, 8.0); }

/// Causal (-m·(i-j)) or symmetric (-m·|i-j|) ALiBi.
enum class alibi_form { causal, symmetric };

/// The head of a policy whose bias is linear in the distance (position_bias::
/// linear_distance): bias(pos, j) = -slope·(pos - j), or -slope·|pos - j| when symmetric.
/// The tiled kernels read `slope` and `symmetric`; the reference kernel calls bias().
struct linear_distance_head : head_base {
  double slope = 0.0;
  bool symmetric = false;
  double bias(Index pos, Index j) const noexcept {
    return math::alibi_bias(slope, pos - j, symmetric);
  }
};

/// ALiBi as an attention position policy: bias_h(pos, j) = -m_h·(pos - j) or -m_h·|pos - j|.
/// No learned parameters (gradient_type is no_gradient).
class alibi_policy : public policy_base {
 public:
  static constexpr bool has_bias = true;
  static constexpr position_bias bias_form = position_bias::linear_distance;

  /// Paper slopes for `heads` heads.
  explicit alibi_policy(Index heads, alibi_form form = alibi_form::causal)
      : slopes_(alibi_slopes(heads)), form_(form) {}

  /// Explicit slopes (one per head; finite).
  alibi_policy(std::vector<double> slopes, alibi_form form)
      : slopes_(std::move(slopes)), form_(form) {
    detail::require(!slopes_.empty(), "alibi_policy", "slopes.size()", slopes_.size(),
                    "must be >= 1");
    for (double m : slopes_)
      detail::require(std::isfinite(m), "alibi_policy", "slope", m, "must be finite");
  }

  /// llama.cpp's parameterisation (max_bias = hparams.f_max_alibi_bias).
  static alibi_policy from_max_bias(Index heads, double max_bias,
                                    alibi_form form = alibi_form::causal) {
    return alibi_policy(alibi_slopes_max_bias(heads, max_bias), form);
  }

  /// A one-head policy with head h's slope, for single-head attention().
  alibi_policy only_head(Index h) const {
    detail::require(h >= 0 && h < heads(), "alibi_policy::only_head", "h", h,
                    "must be in [0, heads)");
    return alibi_policy(std::vector<double>{slopes_[static_cast<std::size_t>(h)]}, form_);
  }

  Index heads() const noexcept { return static_cast<Index>(slopes_.size()); }
  const std::vector<double>& slopes() const noexcept { return slopes_; }
  alibi_form form() const noexcept { return form_; }

  /// The call must have exactly heads() query heads.
  void check(const attention_shape& s) const {
    detail::require(s.heads == heads(), "alibi_policy", "heads", s.heads,
                    "must equal the number of ALiBi slopes");
  }

  using head_type = linear_distance_head;
  head_type head(Index /*batch*/, Index h, const attention_shape& /*shape*/) const {
    head_type t;
    t.slope = slopes_[static_cast<std::size_t>(h)];
    t.symmetric = form_ == alibi_form::symmetric;
    return t;
  }

 private:
  std::vector<double> slopes_;
  alibi_form form_;
};

/// The ALiBi bias tensor [H, Lq, Lk] flattened to a row-major [H·Lq, Lk] matrix (row
/// h·Lq + i is head h, query i at position q_offset + i), for inspection and the CLI.
inline dmatrix alibi_bias(Index heads, Index len_q, Index len_k, Index q_offset = 0,
                          alibi_form form = alibi_form::causal) {
  attention_shape s;
  s.heads = heads;
  s.len_q = len_q;
  s.len_k = len_k;
  s.dim = 1;
  s.q_offset = q_offset;
  detail::check_positions(s, "alibi_bias");
  detail::require(heads >= 1, "alibi_bias", "heads", heads, "must be >= 1");
  detail::check_heads_limit("alibi_bias", "heads", heads);
  detail::check_elements("alibi_bias", "len_k", len_k, 1);
  detail::check_elements("alibi_bias", "len_q", len_q, heads * len_k);
  const alibi_policy p(heads, form);
  dmatrix out(heads * len_q, len_k);
  for (Index h = 0; h < heads; ++h) out.middleRows(h * len_q, len_q) = materialize_bias(p, 0, h, s);
  return out;
}

}  // namespace posenc
