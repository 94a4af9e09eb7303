#pragma once
/// \file
/// Backward pass of the reference attention: dL/dQ, dL/dK, dL/dV and dL/d(learned
/// position parameters) through the policy's gradient hooks (policy.hpp).
///
/// With P = softmax(logits) (row-wise), s_ij = q'_i·k'_j + score_ij and
/// logit_ij = scale·s_ij + bias_ij + mask_ij, for an upstream gradient dO [Lq, dv]:
///
///     dV_j      = sum_i P_ij dO_i
///     dP_ij     = dO_i · v_j                        (+ dO_i · a^V(j-i) for value terms)
///     dlogit_ij = P_ij (dP_ij - sum_k P_ik dP_ik)    (softmax Jacobian; 0 at masked keys)
///     dbias_ij  = dlogit_ij                          -> policy.backward_bias
///     ds_ij     = scale · dlogit_ij                  -> policy.backward_score
///     dq'_i     = sum_j ds_ij k'_j,  dk'_j = sum_i ds_ij q'_i  (then the policy's
///                                                    transposed q/k transforms)
///
/// The forward is recomputed row by row in double; nothing [Lq, Lk] is stored. Fully
/// masked rows have zero weights, so they contribute nothing and get dQ = 0.
/// Grouped-query heads sum their dK/dV into the shared key/value head.

#include <Eigen/Core>
#include <type_traits>

#include "../core/attention_config.hpp"
#include "../core/backend.hpp"
#include "../core/error.hpp"
#include "../core/policy.hpp"
#include "../core/view.hpp"
#include "attention.hpp"
#include "multi_head.hpp"

namespace posenc {

/// Gradients of single-head or packed multi-head attention, shaped like the inputs.
template <class Scalar>
struct attention_gradients {
  attention_matrix<Scalar> dq;  ///< like q
  attention_matrix<Scalar> dk;  ///< like k
  attention_matrix<Scalar> dv;  ///< like v
};

namespace detail {

/// Backward of one (batch, head). dq: written ([Lq, d]); dk/dv: accumulated ([Lk, d],
/// [Lk, dv], double, shared by the query heads of a group).
template <class Policy, class T>
void attention_head_backward(const Policy& policy, Index b, Index h, const attention_shape& shape,
                             double scale, const attention_mask& mask,
                             const strided_view<const T, 2>& q, const strided_view<const T, 2>& k,
                             const strided_view<const T, 2>& v,
                             const strided_view<const T, 2>& dout, Eigen::Ref<dmatrix> dq,
                             Eigen::Ref<dmatrix> dk, Eigen::Ref<dmatrix> dv,
                             typename Policy::gradient_type& grad) {
  const Index lq = shape.len_q, lk = shape.len_k, d = shape.dim, dvn = shape.dim_v;
  auto hs = policy.head(b, h, shape);
  dmatrix kt, vd;
  load_double(k, kt);
  if constexpr (Policy::transforms_keys) hs.transform_keys(kt);
  load_double(v, vd);
  dmatrix dkt = dmatrix::Zero(lk, d);
  drow q_raw(d), q_t(d), s(lk), p(lk), dp(lk), dl(lk), ds(lk), go(dvn), dq_t(d);
  for (Index i = 0; i < lq; ++i) {
    const Index pos = shape.q_offset + i;
    const Index lim = visible_limit(mask, b, pos, lk);
    for (Index c = 0; c < d; ++c) q_raw(c) = static_cast<double>(q(i, c));
    q_t = q_raw;
    if constexpr (Policy::transforms_queries) hs.transform_query(pos, q_t);
    if (lim > 0) s.head(lim).noalias() = q_t * kt.topRows(lim).transpose();
    const double mx = row_logits<Policy>(hs, mask, i, pos, lim, scale, s.data(), q_raw, p.data());
    if (!row_softmax(p.data(), lim, lk, mx)) {
      dq.row(i).setZero();
      continue;
    }
    for (Index c = 0; c < dvn; ++c) go(c) = static_cast<double>(dout(i, c));
    dp.setZero();
    if (lim > 0) dp.head(lim).noalias() = go * vd.topRows(lim).transpose();
    if constexpr (Policy::has_value_term) hs.backward_values(pos, p, go, dp, grad);
    dv.topRows(lim).noalias() += p.head(lim).transpose() * go;
    const double pdp = p.dot(dp);
    dl = p.cwiseProduct((dp.array() - pdp).matrix());
    if constexpr (Policy::has_bias) hs.backward_bias(pos, dl, grad);
    ds = scale * dl;
    dq_t.setZero();
    if (lim > 0) {
      dq_t.noalias() = ds.head(lim) * kt.topRows(lim);
      dkt.topRows(lim).noalias() += ds.head(lim).transpose() * q_t;
    }
    if constexpr (Policy::transforms_queries) hs.backward_query(pos, dq_t, grad);
    if constexpr (Policy::has_score_term) hs.backward_score(pos, q_raw, ds, dq_t, grad);
    dq.row(i) = dq_t;
  }
  if constexpr (Policy::transforms_keys) hs.backward_keys(dkt, grad);
  dk += dkt;
}

template <class Scalar>
attention_matrix<Scalar> cast_out(const dmatrix& m) {
  return m.template cast<Scalar>();
}

}  // namespace detail

/// Gradients of single-head attention (attention.hpp) for the upstream gradient
/// `dout` [Lq, dv]; learned position parameters' gradients are added into `grad`
/// (e.g. t5_bias_gradient; zero it first, `policy.zero_gradient()`). Inputs are read where
/// they are (matrix_input).
/// \throws posenc::error on mismatched shapes, bad scale, mask, policy or gradient
template <class DQ, class DK, class DV, class DO, class Policy>
attention_gradients<detail::scalar_of<DQ>> attention_backward(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const Eigen::MatrixBase<DO>& dout, const attention_config& config, const Policy& policy,
    typename Policy::gradient_type& grad) {
  using Scalar = detail::scalar_of<DQ>;
  static_assert(std::is_same_v<Scalar, detail::scalar_of<DK>> &&
                    std::is_same_v<Scalar, detail::scalar_of<DV>> &&
                    std::is_same_v<Scalar, detail::scalar_of<DO>>,
                "posenc::attention_backward: q, k, v and dout must have the same scalar type");
  const char* where = "attention_backward";
  const attention_shape s = detail::single_head_shape(q, k, v, config, where);
  detail::check_attention(s, config, policy, where);
  detail::require(dout.rows() == s.len_q, where, "dout.rows()", dout.rows(), "must equal q.rows()");
  detail::require(dout.cols() == s.dim_v, where, "dout.cols()", dout.cols(), "must equal v.cols()");
  policy.check_gradient(grad);
  const matrix_input<DQ> qi(q);
  const matrix_input<DK> ki(k);
  const matrix_input<DV> vi(v);
  const matrix_input<DO> oi(dout);
  dmatrix dq(s.len_q, s.dim), dk = dmatrix::Zero(s.len_k, s.dim),
                              dv = dmatrix::Zero(s.len_k, s.dim_v);
  detail::attention_head_backward(policy, 0, 0, s, detail::resolve_scale(config.scale, s.dim),
                                  config.mask, qi.view(), ki.view(), vi.view(), oi.view(), dq, dk,
                                  dv, grad);
  return {detail::cast_out<Scalar>(dq), detail::cast_out<Scalar>(dk), detail::cast_out<Scalar>(dv)};
}

/// As above for a policy without learned parameters (no_position_policy, ALiBi, ...).
template <class DQ, class DK, class DV, class DO, class Policy = no_position_policy>
attention_gradients<detail::scalar_of<DQ>> attention_backward(const Eigen::MatrixBase<DQ>& q,
                                                              const Eigen::MatrixBase<DK>& k,
                                                              const Eigen::MatrixBase<DV>& v,
                                                              const Eigen::MatrixBase<DO>& dout,
                                                              const attention_config& config = {},
                                                              const Policy& policy = Policy{}) {
  static_assert(std::is_same_v<typename Policy::gradient_type, no_gradient>,
                "posenc::attention_backward: this policy has learned parameters; pass its "
                "gradient accumulator");
  no_gradient g;
  return attention_backward(q, k, v, dout, config, policy, g);
}

/// Gradients of packed multi-head attention (multi_head.hpp, matrix form):
/// q [Lq, H·d], k [Lk, H_kv·d], v [Lk, H_kv·dv], dout [Lq, H·dv]. Grouped query heads
/// sum into their shared key/value head's gradient. Inputs are read where they are.
template <class DQ, class DK, class DV, class DO, class Policy>
attention_gradients<detail::scalar_of<DQ>> multi_head_attention_backward(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const Eigen::MatrixBase<DO>& dout, Index heads, Index kv_heads, const attention_config& config,
    const Policy& policy, typename Policy::gradient_type& grad) {
  using Scalar = detail::scalar_of<DQ>;
  static_assert(std::is_same_v<Scalar, detail::scalar_of<DK>> &&
                    std::is_same_v<Scalar, detail::scalar_of<DV>> &&
                    std::is_same_v<Scalar, detail::scalar_of<DO>>,
                "posenc::multi_head_attention_backward: inputs must have the same scalar type");
  const char* where = "multi_head_attention_backward";
  detail::check_packed_heads(q, k, v, heads, kv_heads, where);
  const Index d = q.cols() / heads, dvn = v.cols() / kv_heads;
  detail::require(dout.rows() == q.rows(), where, "dout.rows()", dout.rows(),
                  "must equal q.rows()");
  detail::require(dout.cols() == heads * dvn, where, "dout.cols()", dout.cols(),
                  "must equal heads * dv");
  const matrix_input<DQ> qi(q);
  const matrix_input<DK> ki(k);
  const matrix_input<DV> vi(v);
  const matrix_input<DO> oi(dout);
  const auto qv = packed_heads(qi.view(), heads);
  const auto kv = packed_heads(ki.view(), kv_heads);
  const auto vv = packed_heads(vi.view(), kv_heads);
  const auto ov = packed_heads(oi.view(), heads);  // shaped as the forward's output
  const attention_shape s = detail::multi_head_shape(qv, kv, vv, ov, config, where);
  detail::check_attention(s, config, policy, where);
  policy.check_gradient(grad);
  const double scale = detail::resolve_scale(config.scale, s.dim);
  dmatrix dq(s.len_q, heads * d), dk = dmatrix::Zero(s.len_k, kv_heads * d),
                                  dv = dmatrix::Zero(s.len_k, kv_heads * dvn);
  const Index group = heads / kv_heads;
  for (Index h = 0; h < heads; ++h) {
    const Index kvh = h / group;
    detail::attention_head_backward(policy, 0, h, s, scale, config.mask, detail::slice_bh(qv, 0, h),
                                    detail::slice_bh(kv, 0, kvh), detail::slice_bh(vv, 0, kvh),
                                    detail::slice_bh(ov, 0, h), dq.middleCols(h * d, d),
                                    dk.middleCols(kvh * d, d), dv.middleCols(kvh * dvn, dvn), grad);
  }
  return {detail::cast_out<Scalar>(dq), detail::cast_out<Scalar>(dk), detail::cast_out<Scalar>(dv)};
}

/// The former forms with a backend tag, which the exact double reference never used.
template <class Backend, class DQ, class DK, class DV, class DO, class Policy,
          std::enable_if_t<detail::is_backend_tag_v<Backend>, int> = 0>
[[deprecated(
    "posenc::attention_backward: the reference kernel takes no backend; drop the template "
    "argument")]] attention_gradients<detail::scalar_of<DQ>>
attention_backward(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                   const Eigen::MatrixBase<DV>& v, const Eigen::MatrixBase<DO>& dout,
                   const attention_config& config, const Policy& policy,
                   typename Policy::gradient_type& grad) {
  return attention_backward(q, k, v, dout, config, policy, grad);
}
template <class Backend, class DQ, class DK, class DV, class DO, class Policy = no_position_policy,
          std::enable_if_t<detail::is_backend_tag_v<Backend>, int> = 0>
[[deprecated(
    "posenc::attention_backward: the reference kernel takes no backend; drop the template "
    "argument")]] attention_gradients<detail::scalar_of<DQ>>
attention_backward(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                   const Eigen::MatrixBase<DV>& v, const Eigen::MatrixBase<DO>& dout,
                   const attention_config& config = {}, const Policy& policy = Policy{}) {
  return attention_backward(q, k, v, dout, config, policy);
}
template <class Backend, class DQ, class DK, class DV, class DO, class Policy,
          std::enable_if_t<detail::is_backend_tag_v<Backend>, int> = 0>
[[deprecated(
    "posenc::multi_head_attention_backward: the reference kernel takes no backend; drop the "
    "template argument")]] attention_gradients<detail::scalar_of<DQ>>
multi_head_attention_backward(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                              const Eigen::MatrixBase<DV>& v, const Eigen::MatrixBase<DO>& dout,
                              Index heads, Index kv_heads, const attention_config& config,
                              const Policy& policy, typename Policy::gradient_type& grad) {
  return multi_head_attention_backward(q, k, v, dout, heads, kv_heads, config, policy, grad);
}

}  // namespace posenc
