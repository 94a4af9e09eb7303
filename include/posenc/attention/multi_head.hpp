#pragma once
/// \file
/// Multi-head, batched attention over strided views, with grouped-query attention.
///
///     q   [B, Lq, H,    d ]    logical order of posenc::heads_view (view_bshd / view_bhsd)
///     k   [B, Lk, H_kv, d ]
///     v   [B, Lk, H_kv, dv]
///     out [B, Lq, H,    dv]
///     weights (optional) [B, H, Lq, Lk]
///
/// Query head h reads key/value head h / (H / H_kv): H_kv = H is standard multi-head,
/// 1 < H_kv < H grouped-query (Ainslie et al. 2023, GQA), H_kv = 1 multi-query (Shazeer
/// 2019). H % H_kv != 0 is a posenc::error. Every (b, h) runs the reference kernel of
/// attention.hpp with the policy's head (b, h); `mask.key_lengths[b]` pads batch item b.
/// `out` and `weights` must not share memory with the inputs (a posenc::error).

#include <Eigen/Core>
#include <type_traits>

#include "../core/attention_config.hpp"
#include "../core/backend.hpp"
#include "../core/error.hpp"
#include "../core/policy.hpp"
#include "../core/view.hpp"
#include "attention.hpp"

namespace posenc {

namespace detail {

template <class T>
struct identity {
  using type = T;
};
/// Blocks template deduction on a parameter (C++20's std::type_identity_t).
template <class T>
using identity_t = typename identity<T>::type;

/// The [seq, dim] slice of a rank-4 view at batch b, head h (axes 1 and 3 kept).
template <class T>
strided_view<T, 2> slice_bh(const strided_view<T, 4>& x, Index b, Index h) {
  const bool empty = x.extent(1) == 0 || x.extent(3) == 0;
  return strided_view<T, 2>(empty ? nullptr : x.data() + b * x.stride(0) + h * x.stride(2),
                            {x.extent(1), x.extent(3)}, {x.stride(1), x.stride(3)});
}

/// The [Lq, Lk] slice of a [B, H, Lq, Lk] weights view at batch b, head h.
template <class T>
strided_view<T, 2> slice_weights(const strided_view<T, 4>& w, Index b, Index h) {
  const bool empty = w.extent(2) == 0 || w.extent(3) == 0;
  return strided_view<T, 2>(empty ? nullptr : w.data() + b * w.stride(0) + h * w.stride(1),
                            {w.extent(2), w.extent(3)}, {w.stride(2), w.stride(3)});
}

/// Shape of a multi-head call, validated.
template <class TQ, class TK, class TV, class TO>
attention_shape multi_head_shape(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                                 const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                                 const attention_config& config, const char* where) {
  attention_shape s;
  s.batch = q.extent(0);
  s.len_q = q.extent(1);
  s.heads = q.extent(2);
  s.dim = q.extent(3);
  s.len_k = k.extent(1);
  s.kv_heads = k.extent(2);
  s.dim_v = v.extent(3);
  s.q_offset = config.q_offset;
  require(s.heads >= 1, where, "heads", s.heads, "must be >= 1");
  require(s.kv_heads >= 1, where, "kv_heads", s.kv_heads, "must be >= 1");
  require(s.heads % s.kv_heads == 0, where, "kv_heads", s.kv_heads,
          "must divide the number of query heads (grouped-query attention)");
  require(k.extent(0) == s.batch, where, "k batch", k.extent(0), "must equal q's batch");
  require(v.extent(0) == s.batch, where, "v batch", v.extent(0), "must equal q's batch");
  require(k.extent(3) == s.dim, where, "k dim", k.extent(3), "must equal q's head dim");
  require(v.extent(1) == s.len_k, where, "v len", v.extent(1), "must equal k's length");
  require(v.extent(2) == s.kv_heads, where, "v heads", v.extent(2), "must equal k's heads");
  require(out.extent(0) == s.batch && out.extent(1) == s.len_q && out.extent(2) == s.heads &&
              out.extent(3) == s.dim_v,
          where, "out extents", "mismatch", "must be [B, Lq, H, dv]");
  return s;
}

/// Validates packed-head matrices q [Lq, H·d], k [Lk, H_kv·d], v [Lk, H_kv·dv] before they
/// are cut into heads (the forward and backward matrix forms share it).
template <class DQ, class DK, class DV>
void check_packed_heads(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                        const Eigen::MatrixBase<DV>& v, Index heads, Index kv_heads,
                        const char* where) {
  require(heads >= 1, where, "heads", heads, "must be >= 1");
  require(kv_heads >= 1, where, "kv_heads", kv_heads, "must be >= 1");
  require(q.cols() % heads == 0, where, "q.cols()", q.cols(), "must be divisible by heads");
  require(k.cols() % kv_heads == 0, where, "k.cols()", k.cols(), "must be divisible by kv_heads");
  require(v.cols() % kv_heads == 0, where, "v.cols()", v.cols(), "must be divisible by kv_heads");
  require(k.rows() == v.rows(), where, "v.rows()", v.rows(), "must equal k.rows()");
}

/// A call on packed-head matrices q [Lq, H·d], k [Lk, H_kv·d], v [Lk, H_kv·dv]: validates
/// them, reads them where they are (matrix_input), and returns out [Lq, H·dv] after
/// f(q, k, v, out) on their [1, L, heads, dim] views.
template <class DQ, class DK, class DV, class F>
attention_matrix<scalar_of<DQ>> packed_heads_call(const Eigen::MatrixBase<DQ>& q,
                                                  const Eigen::MatrixBase<DK>& k,
                                                  const Eigen::MatrixBase<DV>& v, Index heads,
                                                  Index kv_heads, const char* where, F&& f) {
  static_assert(
      std::is_same_v<scalar_of<DQ>, scalar_of<DK>> && std::is_same_v<scalar_of<DQ>, scalar_of<DV>>,
      "posenc: q, k and v must have the same scalar type");
  check_packed_heads(q, k, v, heads, kv_heads, where);
  const matrix_input<DQ> qi(q);
  const matrix_input<DK> ki(k);
  const matrix_input<DV> vi(v);
  attention_matrix<scalar_of<DQ>> out(q.rows(), heads * (v.cols() / kv_heads));
  f(packed_heads(qi.view(), heads), packed_heads(ki.view(), kv_heads),
    packed_heads(vi.view(), kv_heads), packed_heads(view_of(out), heads));
  return out;
}

}  // namespace detail

/// Multi-head batched attention over strided views (see the file comment for shapes).
///
/// \param weights null, or a [B, H, Lq, Lk] view that receives the attention weights
/// \throws posenc::error on mismatched extents, H % H_kv != 0, an output that shares
///         memory with an input, bad scale, mask or policy
template <class TQ, class TK, class TV, class TO, class Policy = no_position_policy>
void multi_head_attention(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                          const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                          const attention_config& config = {}, const Policy& policy = Policy{},
                          const detail::identity_t<strided_view<TO, 4>>* weights = nullptr) {
  static_assert(!std::is_const_v<TO>, "posenc::multi_head_attention: out must be writable");
  const char* where = "multi_head_attention";
  const attention_shape s = detail::multi_head_shape(q, k, v, out, config, where);
  detail::check_attention(s, config, policy, where);
  if (weights)
    detail::require(weights->extent(0) == s.batch && weights->extent(1) == s.heads &&
                        weights->extent(2) == s.len_q && weights->extent(3) == s.len_k,
                    where, "weights extents", "mismatch", "must be [B, H, Lq, Lk]");
  detail::check_no_overlap(where, "out", out, "q", q);
  detail::check_no_overlap(where, "out", out, "k", k);
  detail::check_no_overlap(where, "out", out, "v", v);
  if (weights) {
    detail::check_no_overlap(where, "weights", *weights, "q", q);
    detail::check_no_overlap(where, "weights", *weights, "k", k);
    detail::check_no_overlap(where, "weights", *weights, "v", v);
    detail::check_no_overlap(where, "weights", *weights, "out", out);
  }
  const double scale = detail::resolve_scale(config.scale, s.dim);
  const Index group = s.heads / s.kv_heads;
  detail::attention_workspace ws;
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h) {
      const Index kvh = h / group;
      const auto w = weights ? detail::slice_weights(*weights, b, h) : strided_view<TO, 2>();
      detail::attention_head(policy, b, h, s, scale, config.mask, detail::slice_bh(q, b, h),
                             detail::slice_bh(k, b, kvh), detail::slice_bh(v, b, kvh),
                             detail::slice_bh(out, b, h), weights ? &w : nullptr, ws);
    }
}

/// Multi-head attention for one sequence with the heads packed along the columns:
/// q [Lq, H·d], k [Lk, H_kv·d], v [Lk, H_kv·dv] (head-major columns, as a fused projection
/// writes them). Returns [Lq, H·dv]. Matrices, maps, blocks and Refs are read where they
/// are (either storage order); only an expression without storage is evaluated first.
template <class DQ, class DK, class DV, class Policy = no_position_policy>
attention_matrix<detail::scalar_of<DQ>> multi_head_attention(const Eigen::MatrixBase<DQ>& q,
                                                             const Eigen::MatrixBase<DK>& k,
                                                             const Eigen::MatrixBase<DV>& v,
                                                             Index heads, Index kv_heads,
                                                             const attention_config& config = {},
                                                             const Policy& policy = Policy{}) {
  return detail::packed_heads_call(
      q, k, v, heads, kv_heads, "multi_head_attention",
      [&](const auto& qv, const auto& kv, const auto& vv, const auto& ov) {
        multi_head_attention(qv, kv, vv, ov, config, policy);
      });
}

/// The former forms with a backend tag, which the exact double reference never used.
template <class Backend, class TQ, class TK, class TV, class TO, class Policy = no_position_policy,
          std::enable_if_t<detail::is_backend_tag_v<Backend>, int> = 0>
[[deprecated(
    "posenc::multi_head_attention: the reference kernel takes no backend; drop the template "
    "argument")]] void
multi_head_attention(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                     const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                     const attention_config& config = {}, const Policy& policy = Policy{},
                     const detail::identity_t<strided_view<TO, 4>>* weights = nullptr) {
  multi_head_attention(q, k, v, out, config, policy, weights);
}
template <class Backend, class DQ, class DK, class DV, class Policy = no_position_policy,
          std::enable_if_t<detail::is_backend_tag_v<Backend>, int> = 0>
[[deprecated(
    "posenc::multi_head_attention: the reference kernel takes no backend; drop the template "
    "argument")]] attention_matrix<detail::scalar_of<DQ>>
multi_head_attention(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                     const Eigen::MatrixBase<DV>& v, Index heads, Index kv_heads,
                     const attention_config& config = {}, const Policy& policy = Policy{}) {
  return multi_head_attention(q, k, v, heads, kv_heads, config, policy);
}

}  // namespace posenc
