#pragma once
/// \file
/// Position policies: how a position scheme plugs into posenc's attention kernels. This is
/// the interface every kernel depends on (the reference kernel calls the hooks; the tiled
/// kernels also read the traits below); the schemes themselves live in encoding/ and
/// attention/.
///
/// A policy is the last argument of an attention call (`posenc::attention(q, k, v, config,
/// policy)`, `posenc::multi_head_attention`, `posenc::flash_multi_head_attention`,
/// `posenc::attention_backward`). The kernel computes,
/// for every (batch b, query head h), query row i at absolute position `pos = q_offset + i`
/// and key row j at absolute position j, all in double:
///
///     q'_i    = transform_query(pos, q_i)                    (rotary, Transformer-XL's +u)
///     k'_j    = transform_keys(K)_j                          (rotary; once per head)
///     logit_ij = scale * (q'_i . k'_j + score(pos, j))       (Shaw a^K, XL position term)
///              + bias(pos, j)                                (ALiBi, T5: added after scaling)
///              + mask_ij                                     (causal, padding, bool, additive)
///     p_i      = softmax_j(logit_ij)                         (masked keys get p = 0)
///     out_i    = sum_j p_ij v_j + value_term(pos, p_i)       (Shaw a^V)
///
/// Everything is computed on the fly from (pos, j): no [H, Lq, Lk] tensor is formed.
/// `materialize_bias` / `materialize_score` build one for inspection only.
///
/// ## Writing a policy
/// Derive the policy from `policy_base` and set the traits that apply (the kernel skips
/// the work for every trait left false). Give it
///
///     head_type head(Index batch, Index head, const attention_shape& shape) const;
///     void check(const attention_shape& shape) const;   // throws posenc::error
///
/// `head()` is called once per (batch, query head) and returns a small object derived
/// from `head_base`; it overrides (hides) the hooks it needs:
///
///     void   transform_keys(Eigen::Ref<dmatrix> k) const;                 transforms_keys
///     void   transform_query(Index pos, Eigen::Ref<drow> q) const;        transforms_queries
///     void   begin_row(Index pos, const Eigen::Ref<const drow>& q);       has_score_term |
///                                                                          has_value_term
///     double score(Index pos, Index j) const;                             has_score_term
///     double bias(Index pos, Index j) const;                              has_bias
///     void   add_values(Index pos, const Eigen::Ref<const drow>& p,
///                       Eigen::Ref<drow> out);                             has_value_term
///
/// `begin_row` is the per-query-row hook: it receives the *raw* (untransformed) query row
/// and is called once per row, right before the kernel asks for `score(pos, j)` for that
/// row's unmasked keys; that row's `add_values` (forward) or backward hooks follow before
/// the next `begin_row`. So a relative scheme can precompute once per row
/// (Shaw: q_i . a^K_r for all 2k+1 clip buckets r; Transformer-XL: (q_i + v) . R_r for
/// every relative distance r), making each `score` an O(1) lookup. `add_values` receives
/// the row's weights p (length Lk, zeros at masked keys) so Shaw can bucket them first.
/// The hooks never throw: all validation belongs in `check()`, which the entry points call
/// once with the full shape before any work.
///
/// ## Traits the tiled kernels read (`bias_form`)
/// The reference kernel calls the hooks above for every logit. A tiled kernel generates a
/// bias or score inside its tiles when the policy says what form it has, and then never
/// calls `bias()` or `score()`; the two must agree (tested for posenc's policies):
///
///     position_bias::none                no bias, score or value term
///     position_bias::linear_distance     bias(pos, j) = -slope·(pos - j), or -slope·|pos - j|
///                                        when symmetric (ALiBi); the head has members
///                                        `double slope` and `bool symmetric`
///     position_bias::distance_table      bias(pos, j) = bias_by_rel[j - pos - rel_min] (T5);
///                                        members `Index rel_min` and a
///                                        `std::vector<double> bias_by_rel` covering every
///                                        j - pos of the call
///     position_bias::clipped_embeddings  Shaw et al.: score(pos, j) = q_i·a^K[r],
///                                        value term Σ_j p_j a^V[r], r = clip.row(j - pos);
///                                        members `clip` (row(rel), rows()), `dmatrix ak`
///                                        [rows, d] and `dmatrix av` [rows, dv]
///     position_bias::generic             the hooks, per logit (the default of a policy
///                                        with a bias, score or value term)
///
/// Query and key transforms (`transforms_queries`, `transforms_keys`: rotary, absolute)
/// are applied once as the tiles are loaded on every kernel. So a user-written policy with
/// a linear-distance bias (a learned slope per head, say) sets `has_bias = true` and
/// `bias_form = position_bias::linear_distance`, derives its head from
/// `linear_distance_head` (encoding/alibi.hpp: the two members and the bias() hook that
/// matches them) and fills `slope` and `symmetric`: it runs on the fast tiled path with no
/// kernel edited. `distance_table_head` (encoding/t5_bias.hpp) does the same for tables.
///
/// ## Gradients (backward.hpp)
/// `typename Policy::gradient_type` is the caller-owned accumulator of dL/d(learned
/// position parameters) (`no_gradient` for schemes without any). The backward kernel
/// recomputes the forward row by row and calls, per row, with G = gradient_type:
///
///     void backward_values(Index pos, p, dout, Eigen::Ref<drow> dp, G&);  has_value_term:
///            dp_j += dout . a^V(j - i); accumulate dL/da^V += p_j dout
///     void backward_bias(Index pos, const Eigen::Ref<const drow>& dlogit, G&); has_bias:
///            dlogit_j = dL/dbias_ij (0 at masked keys)
///     void backward_score(Index pos, q, ds, Eigen::Ref<drow> dq, G&);    has_score_term:
///            ds_j = dL/dscore_ij (= scale * dL/dlogit_ij); add d/dq of sum_j ds_j score_ij
///            to dq (the raw query's gradient) and accumulate parameter gradients
///     void backward_query(Index pos, Eigen::Ref<drow> dq, G&) const;     transforms_queries:
///            dq holds dL/dq'_i on entry, dL/dq_i on exit (the transposed Jacobian)
///     void backward_keys(Eigen::Ref<dmatrix> dk, G&) const;               transforms_keys:
///            same for keys, on all rows of the head at once (learned key-transform
///            parameters accumulate into G)
///
/// Gradient accumulation is additive: zero the gradient object before a fresh backward.
/// The backward entry points call `policy.check_gradient(grad)` first, so a policy whose
/// hooks index into the gradient validates its sizes there.

#include <Eigen/Core>
#include <limits>

#include "error.hpp"
#include "limits.hpp"
#include "types.hpp"

namespace posenc {

/// The sizes of one attention call, as policies see them.
///
/// Query i of any (batch, head) sits at absolute position `q_offset + i`; key j at
/// absolute position j (keys are always the whole visible context 0..len_k-1, as in a KV
/// cache).
struct attention_shape {
  Index batch = 1;     ///< batch size B
  Index heads = 1;     ///< query heads H
  Index kv_heads = 1;  ///< key/value heads H_kv (H % H_kv == 0)
  Index len_q = 0;     ///< queries Lq
  Index len_k = 0;     ///< keys Lk
  Index dim = 0;       ///< query/key head dim d
  Index dim_v = 0;     ///< value head dim dv
  Index q_offset = 0;  ///< absolute position of query row 0
};

namespace detail {
/// Validates the sizes and positions of a call: len_q, len_k >= 0, q_offset >= 0, and
/// q_offset + len_q representable in Index, so that the position arithmetic of the kernel
/// and of every policy (pos + 1, j - pos) cannot overflow, whatever the offset.
inline void check_positions(const attention_shape& s, const char* where) {
  require(s.len_q >= 0, where, "len_q", s.len_q, "must be >= 0");
  require(s.len_k >= 0, where, "len_k", s.len_k, "must be >= 0");
  require(s.q_offset >= 0, where, "q_offset", s.q_offset, "must be >= 0");
  require(s.q_offset <= std::numeric_limits<Index>::max() - s.len_q, where, "q_offset", s.q_offset,
          "must be <= the largest Index minus len_q (query positions q_offset + i must be "
          "representable)");
}
}  // namespace detail

/// The gradient type of a policy without learned parameters.
struct no_gradient {};

/// The form of a policy's bias, score and value terms, for kernels that generate them
/// inside their tiles (see the file comment).
enum class position_bias { none, linear_distance, distance_table, clipped_embeddings, generic };

/// Defaults for every policy: no hooks used, no gradient, no validation.
struct policy_base {
  static constexpr bool transforms_keys = false;  ///< calls head.transform_keys
  /// With transforms_keys: whether transform_keys may differ between the query heads that
  /// share a key head (GQA). false promises it does not, so the tiled kernel keeps one
  /// transformed copy per key head instead of one per query head.
  static constexpr bool keys_per_query_head = true;
  static constexpr bool transforms_queries = false;  ///< calls head.transform_query
  static constexpr bool has_score_term = false;      ///< calls head.score (pre-scale)
  static constexpr bool has_bias = false;            ///< calls head.bias (post-scale)
  static constexpr bool has_value_term = false;      ///< calls head.add_values
  /// The form of the bias / score / value terms (the file comment); `generic`: only the
  /// hooks say. Ignored when the policy has none of the three.
  static constexpr position_bias bias_form = position_bias::generic;
  using gradient_type = no_gradient;
  /// Validates the policy against a call's shape; throws posenc::error.
  void check(const attention_shape& /*shape*/) const {}
  /// Validates a caller's gradient accumulator (its sizes) before a backward pass.
  template <class Grad>
  void check_gradient(const Grad& /*grad*/) const {}
};

/// No-op hooks; a policy's head object derives from this and hides what it implements.
struct head_base {
  void transform_keys(Eigen::Ref<dmatrix> /*k*/) const noexcept {}
  void transform_query(Index /*pos*/, Eigen::Ref<drow> /*q*/) const noexcept {}
  void begin_row(Index /*pos*/, const Eigen::Ref<const drow>& /*q*/) noexcept {}
  double score(Index /*pos*/, Index /*j*/) const noexcept { return 0.0; }
  double bias(Index /*pos*/, Index /*j*/) const noexcept { return 0.0; }
  void add_values(Index /*pos*/, const Eigen::Ref<const drow>& /*p*/,
                  Eigen::Ref<drow> /*out*/) noexcept {}

  template <class Grad>
  void backward_values(Index /*pos*/, const Eigen::Ref<const drow>& /*p*/,
                       const Eigen::Ref<const drow>& /*dout*/, Eigen::Ref<drow> /*dp*/,
                       Grad& /*grad*/) noexcept {}
  template <class Grad>
  void backward_bias(Index /*pos*/, const Eigen::Ref<const drow>& /*dlogit*/,
                     Grad& /*grad*/) const noexcept {}
  template <class Grad>
  void backward_score(Index /*pos*/, const Eigen::Ref<const drow>& /*q*/,
                      const Eigen::Ref<const drow>& /*ds*/, Eigen::Ref<drow> /*dq*/,
                      Grad& /*grad*/) noexcept {}
  template <class Grad>
  void backward_query(Index /*pos*/, Eigen::Ref<drow> /*dq*/, Grad& /*grad*/) const noexcept {}
  template <class Grad>
  void backward_keys(Eigen::Ref<dmatrix> /*dk*/, Grad& /*grad*/) const noexcept {}
};

/// The form a kernel sees for Policy: `none` when it has no bias, score or value term,
/// else Policy::bias_form.
template <class Policy>
inline constexpr position_bias bias_form_v =
    Policy::has_bias || Policy::has_score_term || Policy::has_value_term ? Policy::bias_form
                                                                         : position_bias::none;

namespace detail {
/// The traits a policy sets must fit together: a form promises the hooks that carry it.
template <class Policy>
constexpr void check_policy_traits() {
  constexpr position_bias form = bias_form_v<Policy>;
  static_assert(form != position_bias::none ||
                    (!Policy::has_bias && !Policy::has_score_term && !Policy::has_value_term),
                "posenc: a policy with a bias, score or value term needs a bias_form other "
                "than position_bias::none (position_bias::generic: its hooks)");
  static_assert((form != position_bias::linear_distance && form != position_bias::distance_table) ||
                    (Policy::has_bias && !Policy::has_score_term && !Policy::has_value_term),
                "posenc: bias_form linear_distance and distance_table describe a bias: set "
                "has_bias (and no score or value term)");
  static_assert(form != position_bias::clipped_embeddings ||
                    (Policy::has_score_term && Policy::has_value_term && !Policy::has_bias),
                "posenc: bias_form clipped_embeddings describes a score and a value term: set "
                "has_score_term and has_value_term (and no bias)");
}
}  // namespace detail

/// No positions at all: plain scaled dot-product attention (permutation-equivariant).
/// Absolute encodings (sinusoidal, learned) are added to the inputs before the call and
/// also use this policy.
struct no_position_policy : policy_base {
  struct head_type : head_base {};
  head_type head(Index /*batch*/, Index /*head*/, const attention_shape& /*shape*/) const {
    return {};
  }
};

/// The former name of no_position_policy.
using no_position [[deprecated("use posenc::no_position_policy")]] = no_position_policy;

/// The post-scale bias b_ij = head.bias(q_offset + i, j) of one (batch, head) as a dense
/// [Lq, Lk] matrix, for inspection and pictures (the kernel never builds it).
template <class Policy>
dmatrix materialize_bias(const Policy& policy, Index batch, Index head,
                         const attention_shape& shape) {
  detail::check_positions(shape, "materialize_bias");
  detail::check_elements("materialize_bias", "len_k", shape.len_k, 1);
  detail::check_elements("materialize_bias", "len_q", shape.len_q, shape.len_k);
  policy.check(shape);
  detail::require(batch >= 0 && batch < shape.batch, "materialize_bias", "batch", batch,
                  "must be in [0, shape.batch)");
  detail::require(head >= 0 && head < shape.heads, "materialize_bias", "head", head,
                  "must be in [0, shape.heads)");
  dmatrix out = dmatrix::Zero(shape.len_q, shape.len_k);
  if constexpr (Policy::has_bias) {
    auto h = policy.head(batch, head, shape);
    for (Index i = 0; i < shape.len_q; ++i)
      for (Index j = 0; j < shape.len_k; ++j) out(i, j) = h.bias(shape.q_offset + i, j);
  }
  return out;
}

/// The pre-scale score term s_ij = head.score(q_offset + i, j) of one (batch, head) for
/// raw queries `q` [Lq, d] (row-major, one query per row), as a dense [Lq, Lk] matrix.
template <class Policy, class DerivedQ>
dmatrix materialize_score(const Policy& policy, Index batch, Index head,
                          const attention_shape& shape, const Eigen::MatrixBase<DerivedQ>& q) {
  detail::check_positions(shape, "materialize_score");
  detail::check_elements("materialize_score", "len_k", shape.len_k, 1);
  detail::check_elements("materialize_score", "len_q", shape.len_q, shape.len_k);
  policy.check(shape);
  detail::require(q.rows() == shape.len_q, "materialize_score", "q.rows()", q.rows(),
                  "must equal shape.len_q");
  detail::require(q.cols() == shape.dim, "materialize_score", "q.cols()", q.cols(),
                  "must equal shape.dim");
  dmatrix out = dmatrix::Zero(shape.len_q, shape.len_k);
  if constexpr (Policy::has_score_term) {
    auto h = policy.head(batch, head, shape);
    drow row(shape.dim);
    for (Index i = 0; i < shape.len_q; ++i) {
      row.leftCols(shape.dim) = q.row(i).template cast<double>();  // a block: never resizes
      h.begin_row(shape.q_offset + i, row);
      for (Index j = 0; j < shape.len_k; ++j) out(i, j) = h.score(shape.q_offset + i, j);
    }
  }
  return out;
}

}  // namespace posenc
