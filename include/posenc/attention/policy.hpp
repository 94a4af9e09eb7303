#pragma once
/// \file
/// Position policies: how a position scheme plugs into posenc's attention kernel.
///
/// A policy is a template argument of the kernel (`posenc::attention<Policy>(...)`,
/// `posenc::multi_head_attention`, `posenc::attention_backward`). The kernel computes,
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

#include "../core/error.hpp"
#include "../core/view.hpp"

namespace posenc {

/// Row-major double matrix: the kernel's working precision for every policy hook.
using dmatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// Double row vector (one query, key or output row).
using drow = Eigen::Matrix<double, 1, Eigen::Dynamic>;

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

/// No positions at all: plain scaled dot-product attention (permutation-equivariant).
/// Absolute encodings (sinusoidal, learned) are added to the inputs before the call and
/// also use this policy.
struct no_position : policy_base {
  struct head_type : head_base {};
  head_type head(Index /*batch*/, Index /*head*/, const attention_shape& /*shape*/) const {
    return {};
  }
};

/// The post-scale bias b_ij = head.bias(q_offset + i, j) of one (batch, head) as a dense
/// [Lq, Lk] matrix, for inspection and pictures (the kernel never builds it).
template <class Policy>
dmatrix materialize_bias(const Policy& policy, Index batch, Index head,
                         const attention_shape& shape) {
  detail::check_positions(shape, "materialize_bias");
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
