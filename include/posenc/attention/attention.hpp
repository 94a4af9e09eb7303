#pragma once
/// \file
/// The reference scaled dot-product attention: exact, in double, with every position
/// scheme plugged in as a policy (policy.hpp) and every mask (mask.hpp).
///
///     out = softmax(Q·Kᵀ·scale + bias + mask) · V
///
///     Q [Lq, d]   K [Lk, d]   V [Lk, dv]   out [Lq, dv]   weights [Lq, Lk]
///     row-major, one token per row; query i at position q_offset + i, key j at j
///
/// scale defaults to 1/sqrt(d) (Vaswani et al. 2017, "Attention is all you need") and is
/// settable (T5 uses 1). The softmax subtracts the row maximum before exponentiating.
/// Inputs of any scalar type are converted to double and every sum is accumulated in
/// double, so float32 results are the float64 results rounded once (well within 1e-5
/// relative at L = 4096). A row whose keys are all masked gives zeros (mask.hpp).
/// Non-finite inputs follow IEEE arithmetic: a NaN or +inf logit makes its whole row of
/// weights and outputs NaN (as torch.softmax does); a -inf logit acts as a masked key.
///
/// This kernel is the reference that faster backends are checked against; it processes
/// 64 query rows at a time (a double GEMM over the visible keys), so its extra memory is
/// O(Lk·(d + dv) + 64·Lk) per head, never [Lq, Lk].

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "../core/attention_config.hpp"
#include "../core/backend.hpp"
#include "../core/error.hpp"
#include "../core/policy.hpp"
#include "../core/types.hpp"
#include "../core/view.hpp"

namespace posenc {

/// Row-major dynamic matrix of the attention API: one token per row.
template <class Scalar>
using attention_matrix = row_matrix<Scalar>;

namespace detail {

/// Buffers reused across heads of one call.
struct attention_workspace {
  dmatrix k, v, q_raw, q_t, s;
  drow p, o;
};

/// The visible, unmasked logits of one row into p[0, limit) (-inf where masked), and
/// their maximum (-inf when the row sees no key; NaN when any logit is NaN, so that NaN
/// inputs give a NaN row, as torch.softmax does, never a silently zeroed one).
template <class Policy, class Head>
double row_logits(Head& hs, const attention_mask& mask, Index i, Index pos, Index limit,
                  double scale, const double* s, const Eigen::Ref<const drow>& q_raw,
                  double* p) noexcept {
  constexpr double neg_inf = -std::numeric_limits<double>::infinity();
  if constexpr (Policy::has_score_term || Policy::has_value_term) hs.begin_row(pos, q_raw);
  const bool use_allowed = mask.allowed.size() != 0, use_add = mask.additive.size() != 0;
  double mx = neg_inf;
  for (Index j = 0; j < limit; ++j) {
    if (use_allowed && !mask.allowed(i, j)) {
      p[j] = neg_inf;
      continue;
    }
    double dot = s[j];
    if constexpr (Policy::has_score_term) dot += hs.score(pos, j);
    double l = scale * dot;
    if constexpr (Policy::has_bias) l += hs.bias(pos, j);
    if (use_add) l += mask.additive(i, j);
    p[j] = l;
    // A NaN logit must reach the softmax (std::max would drop it): the row becomes NaN.
    if (l > mx || std::isnan(l)) mx = std::isnan(mx) ? mx : l;
  }
  return mx;
}

/// Turns row logits into weights in place (p[limit, Lk) zeroed); returns false for a row
/// with no visible key (then every weight is 0).
inline bool row_softmax(double* p, Index limit, Index len_k, double mx) noexcept {
  if (mx == -std::numeric_limits<double>::infinity()) {
    std::fill(p, p + len_k, 0.0);
    return false;
  }
  double sum = 0.0;
  for (Index j = 0; j < limit; ++j) {
    p[j] = std::exp(p[j] - mx);  // exp(-inf) = 0 for masked keys
    sum += p[j];
  }
  const double inv = 1.0 / sum;  // sum >= 1: the maximum contributes exp(0)
  for (Index j = 0; j < limit; ++j) p[j] *= inv;
  std::fill(p + limit, p + len_k, 0.0);
  return true;
}

/// Loads a strided [rows, cols] view into a double matrix.
template <class T>
void load_double(const strided_view<T, 2>& src, dmatrix& dst) {
  dst.resize(src.extent(0), src.extent(1));
  for (Index r = 0; r < src.extent(0); ++r)
    for (Index c = 0; c < src.extent(1); ++c) dst(r, c) = static_cast<double>(src(r, c));
}

/// Forward attention of one (batch, head): the portable reference kernel.
/// `q` [Lq, d], `k` [Lk, d], `v` [Lk, dv], `out` [Lq, dv], `weights` [Lq, Lk] or null.
/// Arguments were validated by the entry point.
template <class Policy, class TQ, class TK, class TV, class TO, class TW>
void attention_head(const Policy& policy, Index b, Index h, const attention_shape& shape,
                    double scale, const attention_mask& mask, const strided_view<TQ, 2>& q,
                    const strided_view<TK, 2>& k, const strided_view<TV, 2>& v,
                    const strided_view<TO, 2>& out, const strided_view<TW, 2>* weights,
                    attention_workspace& ws) {
  const Index lq = shape.len_q, lk = shape.len_k, dv = shape.dim_v;
  auto hs = policy.head(b, h, shape);
  load_double(k, ws.k);
  if constexpr (Policy::transforms_keys) hs.transform_keys(ws.k);
  load_double(v, ws.v);
  ws.p.resize(lk);
  ws.o.resize(dv);
  constexpr Index block = 64;
  for (Index r0 = 0; r0 < lq; r0 += block) {
    const Index nb = std::min(block, lq - r0);
    // Visibility only grows with the position, so the block's last row bounds the GEMM.
    const Index block_lim = visible_limit(mask, b, shape.q_offset + r0 + nb - 1, lk);
    load_double(
        strided_view<TQ, 2>(q.vector_ptr(r0), {nb, q.extent(1)}, {q.stride(0), q.stride(1)}),
        ws.q_raw);
    ws.q_t = ws.q_raw;
    if constexpr (Policy::transforms_queries)
      for (Index r = 0; r < nb; ++r) hs.transform_query(shape.q_offset + r0 + r, ws.q_t.row(r));
    ws.s.resize(nb, block_lim);
    if (block_lim > 0) ws.s.noalias() = ws.q_t * ws.k.topRows(block_lim).transpose();
    for (Index r = 0; r < nb; ++r) {
      const Index i = r0 + r, pos = shape.q_offset + i;
      const Index lim = visible_limit(mask, b, pos, lk);
      const double mx = row_logits<Policy>(hs, mask, i, pos, lim, scale, ws.s.row(r).data(),
                                           ws.q_raw.row(r), ws.p.data());
      if (row_softmax(ws.p.data(), lim, lk, mx)) {
        ws.o.noalias() = ws.p.head(lim) * ws.v.topRows(lim);
        if constexpr (Policy::has_value_term) hs.add_values(pos, ws.p, ws.o);
      } else {
        ws.o.setZero();
      }
      for (Index c = 0; c < dv; ++c) out(i, c) = static_cast<std::remove_cv_t<TO>>(ws.o(c));
      if (weights)
        for (Index j = 0; j < lk; ++j)
          (*weights)(i, j) = static_cast<std::remove_cv_t<TW>>(ws.p(j));
    }
  }
}

template <class Derived>
using scalar_of = typename Derived::Scalar;

/// True for backend tags (core/backend.hpp): what the deprecated explicit-backend
/// overloads of the reference entry points accept as their first template argument.
template <class T>
inline constexpr bool is_backend_tag_v =
    std::is_base_of_v<backend::scalar, T> || std::is_same_v<T, backend::cuda>;

/// Single-head shape from matrices.
template <class DQ, class DK, class DV>
attention_shape single_head_shape(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                                  const Eigen::MatrixBase<DV>& v, const attention_config& config,
                                  const char* where) {
  require(k.cols() == q.cols(), where, "k.cols()", k.cols(),
          "must equal q.cols() (the head dim d)");
  require(v.rows() == k.rows(), where, "v.rows()", v.rows(), "must equal k.rows() (Lk)");
  attention_shape s;
  s.len_q = q.rows();
  s.len_k = k.rows();
  s.dim = q.cols();
  s.dim_v = v.cols();
  s.q_offset = config.q_offset;
  return s;
}

/// One validated single-head call, reading q, k and v where they are (matrix_input).
template <class DQ, class DK, class DV, class Policy>
attention_matrix<scalar_of<DQ>> single_head(const Eigen::MatrixBase<DQ>& q,
                                            const Eigen::MatrixBase<DK>& k,
                                            const Eigen::MatrixBase<DV>& v,
                                            const attention_config& config, const Policy& policy,
                                            const attention_shape& s,
                                            attention_matrix<scalar_of<DQ>>* w) {
  using Scalar = scalar_of<DQ>;
  const matrix_input<DQ> qi(q);
  const matrix_input<DK> ki(k);
  const matrix_input<DV> vi(v);
  attention_matrix<Scalar> out(s.len_q, s.dim_v);
  attention_workspace ws;
  const auto wv = w ? view_of(*w) : strided_view<Scalar, 2>();
  attention_head(policy, 0, 0, s, resolve_scale(config.scale, s.dim), config.mask, qi.view(),
                 ki.view(), vi.view(), view_of(out), w ? &wv : nullptr, ws);
  return out;
}

}  // namespace detail

/// Single-head attention softmax(Q·Kᵀ·scale + bias + mask)·V.
///
/// \param q [Lq, d] queries, one per row (query i at position config.q_offset + i)
/// \param k [Lk, d] keys (key j at position j)
/// \param v [Lk, dv] values
/// \param config scale (0 = 1/sqrt(d)), query offset, mask (mask.key_lengths has 0 or 1
///        entry)
/// \param policy position scheme (core/policy.hpp); a single-head call consults its head
///        0, so a per-head scheme must be narrowed first (e.g. `alibi.only_head(h)`)
/// \returns [Lq, dv] row-major, same scalar type as q
/// \throws posenc::error on mismatched shapes, bad scale, mask or policy
///
/// Matrices, maps, blocks and Refs are read where they are (either storage order); only an
/// expression without storage is evaluated first.
template <class DQ, class DK, class DV, class Policy = no_position_policy>
attention_matrix<detail::scalar_of<DQ>> attention(const Eigen::MatrixBase<DQ>& q,
                                                  const Eigen::MatrixBase<DK>& k,
                                                  const Eigen::MatrixBase<DV>& v,
                                                  const attention_config& config = {},
                                                  const Policy& policy = Policy{}) {
  using Scalar = detail::scalar_of<DQ>;
  static_assert(std::is_same_v<Scalar, detail::scalar_of<DK>> &&
                    std::is_same_v<Scalar, detail::scalar_of<DV>>,
                "posenc::attention: q, k and v must have the same scalar type");
  const attention_shape s = detail::single_head_shape(q, k, v, config, "attention");
  detail::check_attention(s, config, policy, "attention");
  return detail::single_head(q, k, v, config, policy, s, nullptr);
}

/// As attention(), also writing the attention weights softmax(...) into `weights`
/// ([Lq, Lk], resized; rows of fully masked queries are zeros).
template <class DQ, class DK, class DV, class Policy = no_position_policy>
attention_matrix<detail::scalar_of<DQ>> attention_with_weights(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    attention_matrix<detail::scalar_of<DQ>>& weights, const attention_config& config = {},
    const Policy& policy = Policy{}) {
  using Scalar = detail::scalar_of<DQ>;
  static_assert(std::is_same_v<Scalar, detail::scalar_of<DK>> &&
                    std::is_same_v<Scalar, detail::scalar_of<DV>>,
                "posenc::attention_with_weights: q, k and v must have the same scalar type");
  const attention_shape s = detail::single_head_shape(q, k, v, config, "attention_with_weights");
  detail::check_attention(s, config, policy, "attention_with_weights");
  weights.resize(s.len_q, s.len_k);
  return detail::single_head(q, k, v, config, policy, s, &weights);
}

/// The former forms with a backend tag, which the exact double reference never used.
template <class Backend, class DQ, class DK, class DV, class Policy = no_position_policy,
          std::enable_if_t<detail::is_backend_tag_v<Backend>, int> = 0>
[[deprecated(
    "posenc::attention: the reference kernel takes no backend; drop the template "
    "argument")]] attention_matrix<detail::scalar_of<DQ>>
attention(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
          const Eigen::MatrixBase<DV>& v, const attention_config& config = {},
          const Policy& policy = Policy{}) {
  return attention(q, k, v, config, policy);
}
template <class Backend, class DQ, class DK, class DV, class Policy = no_position_policy,
          std::enable_if_t<detail::is_backend_tag_v<Backend>, int> = 0>
[[deprecated(
    "posenc::attention_with_weights: the reference kernel takes no backend; drop the template "
    "argument")]] attention_matrix<detail::scalar_of<DQ>>
attention_with_weights(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                       const Eigen::MatrixBase<DV>& v,
                       attention_matrix<detail::scalar_of<DQ>>& weights,
                       const attention_config& config = {}, const Policy& policy = Policy{}) {
  return attention_with_weights(q, k, v, weights, config, policy);
}

}  // namespace posenc
