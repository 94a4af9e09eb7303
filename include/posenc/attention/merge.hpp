#pragma once
/// \file
/// Attention over disjoint key ranges, merged exactly. A flash call can return, with each
/// output row, its log-sum-exp (lse = log Σ_j exp(logit_j), natural log, per (batch, head,
/// query)); two results over disjoint sets of keys then merge into the result over their
/// union without looking at a key again:
///
///     M = max(lse_a, lse_b)
///     out = (e^(lse_a − M)·out_a + e^(lse_b − M)·out_b) / (e^(lse_a − M) + e^(lse_b − M))
///     lse = M + log(e^(lse_a − M) + e^(lse_b − M))
///
/// This is the step of split-key decoding (Flash-Decoding), of sequence / context
/// parallelism and of ring attention: shard the keys (over threads, GPUs or MPI ranks),
/// let each shard compute its (out, lse), and fold the shards in with
/// merge_attention_states in any order (the merge is associative and commutative up to
/// rounding). A row that saw no key has lse = -inf and zero output and drops out of a
/// merge; a NaN row stays NaN.
///
/// Positions across shards: a shard holding keys [s, s + n) of the whole sequence is an
/// ordinary call over n keys whose key 0 sits at global position s. Every relative scheme
/// (ALiBi, T5, RoPE: R(p)q · R(j)k depends on p − j only) and the causal mask depend on the
/// query position minus the key position only, so the shard's call uses
/// q_offset = (the query's global position) − s. Query rows whose positions precede s see
/// none of the shard's keys under a causal mask: leave them out of the shard's call (their
/// lse stays -inf). Absolute encodings are added to the inputs before sharding. (Query
/// positions are never negative, so a relative scheme without a causal mask, ALiBi's
/// symmetric form say, shards this way only over keys that no query precedes.)
/// examples/mpi/ring_attention.cpp runs this recipe over MPI ranks.
///
///     lse [B, H, Lq]: float or double, a strided view (view_bhs: contiguous), the layout
///     of FlashAttention's softmax_lse

#include <cmath>
#include <limits>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/types.hpp"
#include "../core/view.hpp"
#include "../math/softmax.hpp"

namespace posenc {

/// A contiguous [batch, heads, seq] view: the layout of a log-sum-exp output.
template <class T>
strided_view<T, 3> view_bhs(T* data, Index batch, Index heads, Index seq) {
  return strided_view<T, 3>::contiguous(data, {batch, heads, seq});
}

namespace detail {

/// Validates a log-sum-exp view against the call's [batch, heads, len_q].
template <class TL>
void check_lse_view(const strided_view<TL, 3>& lse, Index batch, Index heads, Index len_q,
                    const char* where, const char* name) {
  static_assert(
      std::is_same_v<std::remove_cv_t<TL>, float> || std::is_same_v<std::remove_cv_t<TL>, double>,
      "posenc: a log-sum-exp view holds float or double");
  require(lse.extent(0) == batch && lse.extent(1) == heads && lse.extent(2) == len_q, where, name,
          "extents mismatch", "must be [B, H, Lq] (batch, query heads, queries)");
}

/// Validates the six views of a merge; returns the shape [B, L, H, dv].
template <class TA, class LA, class TB, class LB, class TO, class LO>
void check_merge(const strided_view<TA, 4>& o_a, const strided_view<LA, 3>& lse_a,
                 const strided_view<TB, 4>& o_b, const strided_view<LB, 3>& lse_b,
                 const strided_view<TO, 4>& out, const strided_view<LO, 3>& lse_out,
                 const char* where) {
  require(o_b.extents() == o_a.extents(), where, "o_b extents", "mismatch",
          "must equal o_a's [B, L, H, dv]");
  require(out.extents() == o_a.extents(), where, "out extents", "mismatch",
          "must equal o_a's [B, L, H, dv]");
  const Index b = o_a.extent(0), l = o_a.extent(1), h = o_a.extent(2);
  check_lse_view(lse_a, b, h, l, where, "lse_a");
  check_lse_view(lse_b, b, h, l, where, "lse_b");
  check_lse_view(lse_out, b, h, l, where, "lse_out");
}

}  // namespace detail

/// Merges the partial result (o_b, lse_b) over one set of keys with (o_a, lse_a) over a
/// disjoint set into (out, lse_out) over their union (the file comment).
///
///     o_a, o_b, out           [B, L, H, dv]   float, double, Eigen::half, Eigen::bfloat16
///     lse_a, lse_b, lse_out   [B, H, L]       float or double
///
/// `out` may be o_a or o_b itself, and lse_out lse_a or lse_b (the same memory and strides):
/// folding shard after shard into one accumulator is `merge(acc, acc_lse, part, part_lse,
/// acc, acc_lse)`. Computed in double, each output rounded once.
/// \throws posenc::error on mismatched extents or an output that partly overlaps an input
template <class TA, class LA, class TB, class LB, class TO, class LO>
void merge_attention_states(const strided_view<TA, 4>& o_a, const strided_view<LA, 3>& lse_a,
                            const strided_view<TB, 4>& o_b, const strided_view<LB, 3>& lse_b,
                            const strided_view<TO, 4>& out, const strided_view<LO, 3>& lse_out) {
  static_assert(!std::is_const_v<TO> && !std::is_const_v<LO>,
                "posenc::merge_attention_states: out and lse_out must be writable");
  const char* where = "merge_attention_states";
  detail::check_merge(o_a, lse_a, o_b, lse_b, out, lse_out, where);
  detail::check_no_overlap(where, "out", out, "o_a", o_a, true);
  detail::check_no_overlap(where, "out", out, "o_b", o_b, true);
  detail::check_no_overlap(where, "out", out, "lse_a", lse_a);
  detail::check_no_overlap(where, "out", out, "lse_b", lse_b);
  detail::check_no_overlap(where, "lse_out", lse_out, "lse_a", lse_a, true);
  detail::check_no_overlap(where, "lse_out", lse_out, "lse_b", lse_b, true);
  detail::check_no_overlap(where, "lse_out", lse_out, "o_a", o_a);
  detail::check_no_overlap(where, "lse_out", lse_out, "o_b", o_b);
  using T = std::remove_cv_t<TO>;
  const Index batch = o_a.extent(0), len = o_a.extent(1), heads = o_a.extent(2), dv = o_a.extent(3);
  if (batch == 0 || len == 0 || heads == 0) return;  // no row, however large the other extents
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index i = 0; i < len; ++i) {
        double wa = 0, wb = 0, lse = 0;
        math::merge_weights(static_cast<double>(lse_a(b, h, i)),
                            static_cast<double>(lse_b(b, h, i)), wa, wb, lse);
        // a side with weight 0 (no key) adds nothing, whatever its output holds
        for (Index c = 0; c < dv; ++c) {
          double x = std::isnan(wa) ? wa : 0.0;
          if (wa > 0) x += wa * to_real<double>(o_a(b, i, h, c));
          if (wb > 0) x += wb * to_real<double>(o_b(b, i, h, c));
          out(b, i, h, c) = static_cast<T>(x);
        }
        lse_out(b, h, i) = static_cast<std::remove_cv_t<LO>>(lse);
      }
}

}  // namespace posenc
