#pragma once
/// \file
/// Transformer-XL relative attention (Dai, Yang, Yang, Carbonell, Le, Salakhutdinov,
/// 2019, "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context",
/// section 3.3), as a position policy of the attention kernel (attention/policy.hpp),
/// with its sinusoidal relative encodings, the relative shift, and the segment memory.
///
/// The paper's score of query i and key j splits into four terms,
///
///     A^rel_ij = q_i . k_j        (a) content        q_i = W_q x_i, k_j = W_k,E x_j
///              + q_i . P_{i-j}    (b) content-dependent position
///              + u   . k_j        (c) global content bias
///              + v   . P_{i-j}    (d) global position bias
///              = (q_i + u) . k_j + (q_i + v) . P_{i-j}
///
/// with P_k = W_R R_k (the paper's W_{k,R}; optional here: without it P_k = R_k) and the
/// sinusoid with no learned parameters (sin block, then cos block):
///
///     R_k = [sin(k w_0) ... sin(k w_{n-1}), cos(k w_0) ... cos(k w_{n-1})],
///     w_t = base^(-2t / d_R), n = d_R / 2, base = 10000.
///
/// logit_ij = scale * A^rel_ij (scale = 1/sqrt(d) by default), softmax over j, out = p V.
/// u and v are learned, one pair per head ([H, d] each); W_R is [d_R, H * d] (head h uses
/// columns h*d .. h*d+d-1, the usual fused projection). Distances are absolute:
/// query i sits at position pos = q_offset + i, key j at j, distance pos - j.
///
/// ## Memory
/// Keys and values run over [memory; current segment]: with a memory of M rows, the
/// current segment's query i sits at pos = M + i (q_offset = M). `txl_memory` keeps the
/// last `mem_len` key/value rows across segments (the paper's stop-gradient cache; here the
/// projected keys/values are cached, as an inference engine does).
///
/// ## The relative shift
/// The paper computes all (b)+(d) terms as one product (Q + v) P^T over the distances
/// and then re-indexes each row by the query's position ("rel_shift", appendix B). The
/// policy does the same per row: its P table lists distances q_offset+Lq-1 down to
/// q_offset-(Lk-1) (Lq + Lk - 1 rows, Dai et al.'s descending order), so query i's keys
/// are the contiguous rows Lq-1-i .. Lq-1-i+Lk-1 and its position terms are one
/// matrix-vector product, no gather. `rel_shift` and `rel_shift_full` expose the same
/// shift on whole score matrices.

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/policy.hpp"
#include "../core/types.hpp"
#include "../math/frequency.hpp"

namespace posenc {

/// The sinusoid's angular frequencies w_t = 1 / base^(2t / dim), t = 0 .. dim/2 - 1, in
/// double: math::inv_freq, the frequencies of RoPE and of Vaswani's sinusoid. (Before
/// posenc 0.2 this computed pow(base, -2t/dim), which differs in the last bit for about a
/// quarter of the t.) Throws posenc::error for an odd or non-positive dim, or base <= 1.
inline drow txl_inv_freq(Index dim, double base = 10000.0) {
  detail::require(dim >= 2 && dim % 2 == 0, "txl_inv_freq", "dim", dim,
                  "must be even and >= 2 (sin block + cos block)");
  detail::require(base > 1.0, "txl_inv_freq", "base", base, "must be > 1");
  detail::check_dim_limit("txl_inv_freq", "dim", dim);
  drow w(dim / 2);
  for (Index t = 0; t < dim / 2; ++t) w(t) = math::inv_freq(base, t, dim);
  return w;
}

/// Transformer-XL's relative encodings for `count` distances in descending order
/// first, first-1, ..., first-count+1 (Dai et al.'s order): [count, dim], row-major,
/// row m = R_{first - m} = [sin((first-m) w), cos((first-m) w)]. Angles in double.
/// Throws posenc::error for count < 0 and as txl_inv_freq.
template <class Scalar = double>
row_matrix<Scalar> txl_sinusoid(Index dim, Index first, Index count, double base = 10000.0) {
  detail::require(count >= 0, "txl_sinusoid", "count", count, "must be >= 0");
  const drow w = txl_inv_freq(dim, base);
  const Index n = dim / 2;
  row_matrix<Scalar> r(count, dim);
  for (Index m = 0; m < count; ++m) {
    const double k = static_cast<double>(first - m);
    for (Index t = 0; t < n; ++t) {
      const double a = k * w(t);
      r(m, t) = static_cast<Scalar>(std::sin(a));
      r(m, n + t) = static_cast<Scalar>(std::cos(a));
    }
  }
  return r;
}

/// Dai et al.'s relative shift, exactly as their reference code does it: pad a zero
/// column in front of x [Lq, Lk], read the buffer as [Lk+1, Lq], drop its first row, read
/// the rest as [Lq, Lk]. Input column m holds distance Lk-1-m (their descending position
/// sequence); queries are the last Lq of the Lk positions (M = Lk - Lq rows of memory).
/// The result is
///
///     y(i, j) = x(i, j + Lq - 1 - i)   = the entry of distance M + i - j
///
/// for every j <= M + i (the causal region). Entries with j > M + i are leftovers of the
/// reshape (zeros or the next row's values) and must be masked, as the paper's causal mask
/// does. Requires Lq <= Lk (throws posenc::error otherwise).
template <class Derived>
row_matrix<typename Derived::Scalar> rel_shift(const Eigen::MatrixBase<Derived>& x) {
  using S = typename Derived::Scalar;
  using M = row_matrix<S>;
  const Index lq = x.rows(), lk = x.cols();
  detail::require(lq <= lk, "rel_shift", "x.rows()", lq, "must be <= x.cols() (Lq <= Lk)");
  M padded(lq, lk + 1);
  padded.col(0).setZero();
  padded.rightCols(lk) = x;
  // The [Lk+1, Lq] view without its first row is the flat buffer from offset Lq on.
  return Eigen::Map<const M>(padded.data() + lq, lq, lk);
}

/// The relative shift without leftovers: x [Lq, Lq + Lk - 1], column m holding distance
/// (q_offset + Lq - 1) - m (the policy's descending distance table), gives y [Lq, Lk] with
///
///     y(i, j) = x(i, j + Lq - 1 - i)   = score of query i (at q_offset + i) against key j
///
/// for every i, j (causal or not). Row i of y starts at flat offset i*(Lq+Lk-2) + Lq-1 of
/// x, so the shift is a change of outer stride. Throws posenc::error unless x has
/// Lq + lk - 1 columns.
template <class Derived>
row_matrix<typename Derived::Scalar> rel_shift_full(const Eigen::MatrixBase<Derived>& x, Index lk) {
  using S = typename Derived::Scalar;
  using M = row_matrix<S>;
  const Index lq = x.rows();
  detail::require(lk >= 1, "rel_shift_full", "lk", lk, "must be >= 1");
  detail::require(x.cols() == lq + lk - 1, "rel_shift_full", "x.cols()", x.cols(),
                  "must be Lq + Lk - 1");
  if (lq == 0) return M(0, lk);
  const M dense = x;  // a contiguous row-major buffer to re-stride
  return Eigen::Map<const M, Eigen::Unaligned, Eigen::OuterStride<>>(
      dense.data() + (lq - 1), lq, lk, Eigen::OuterStride<>(lq + lk - 2 > 0 ? lq + lk - 2 : 1));
}

/// Transformer-XL relative attention as a policy: u, v per head, optional W_R.
///
/// `Scalar` is the storage type of the learned parameters (float or double); the hooks
/// work in double. Pass as the kernel's policy; set `q_offset` to the memory length
/// when keys/values are [memory; current] (txl_memory::q_offset()).
///
///     posenc::transformer_xl_policy<float> xl(H, d);          // P_k = R_k (d_R = d)
///     posenc::transformer_xl_policy<float> xl(H, d, d_model); // P_k = R_k W_R
///     xl.u() = ...; xl.v() = ...; xl.w_r() = ...;
///
/// Per (batch, head) the policy builds its P table (Lq + Lk - 1 rows, O((Lq+Lk) d_R d))
/// once; per query row the position terms of the keys the kernel visits cost one
/// [keys, d] matrix-vector product (computed in chunks of 64 keys on first use, so masked
/// future keys of a causal call are skipped).
template <class Scalar = float>
class transformer_xl_policy : public policy_base {
 public:
  using matrix = row_matrix<Scalar>;

  static constexpr bool transforms_queries = true;  // q' = q + u: terms (a) + (c)
  static constexpr bool has_score_term = true;      // (q + v) . P: terms (b) + (d)

  /// dL/du [H, d], dL/dv [H, d], dL/dW_R [d_R, H*d] (empty without W_R), in double.
  struct gradient_type {
    dmatrix u;
    dmatrix v;
    dmatrix w_r;
  };

  /// Zero u, v for `heads` heads of head dim `dim`. `dim_r` = 0: no projection, P_k = R_k
  /// (R has dim entries; dim must be even). `dim_r` > 0: a W_R [dim_r, heads*dim] (zero;
  /// fill it), P_k = R_k W_R[:, head block], R has dim_r entries (even). Throws
  /// posenc::error for heads < 1, dim < 1, dim_r < 0, an odd sinusoid dim, base <= 1.
  transformer_xl_policy(Index heads, Index dim, Index dim_r = 0, double base = 10000.0)
      : heads_(heads), dim_(dim), dim_r_(dim_r), base_(base) {
    detail::require(heads >= 1, "transformer_xl_policy", "heads", heads, "must be >= 1");
    detail::require(dim >= 1, "transformer_xl_policy", "dim", dim, "must be >= 1");
    detail::require(dim_r >= 0, "transformer_xl_policy", "dim_r", dim_r,
                    "must be >= 0 (0 = no W_R projection)");
    const Index rdim = dim_r > 0 ? dim_r : dim;
    detail::require(rdim % 2 == 0, "transformer_xl_policy", dim_r > 0 ? "dim_r" : "dim", rdim,
                    "the sinusoid R needs an even dim (sin block + cos block)");
    detail::require(base > 1.0, "transformer_xl_policy", "base", base, "must be > 1");
    detail::check_heads_limit("transformer_xl_policy", "heads", heads);
    detail::check_dim_limit("transformer_xl_policy", "dim", dim);
    detail::check_dim_limit("transformer_xl_policy", "dim_r", dim_r);
    u_ = matrix::Zero(heads, dim);
    v_ = matrix::Zero(heads, dim);
    if (dim_r > 0) w_r_ = matrix::Zero(dim_r, heads * dim);
  }

  Index heads() const noexcept { return heads_; }
  Index dim() const noexcept { return dim_; }
  /// Sinusoid width d_R: dim_r if projected, else dim.
  Index dim_r() const noexcept { return dim_r_ > 0 ? dim_r_ : dim_; }
  bool projected() const noexcept { return dim_r_ > 0; }
  double base() const noexcept { return base_; }

  /// Content bias u, [H, d] (row h: head h).
  matrix& u() noexcept { return u_; }
  const matrix& u() const noexcept { return u_; }
  /// Position bias v, [H, d].
  matrix& v() noexcept { return v_; }
  const matrix& v() const noexcept { return v_; }
  /// Projection W_R, [d_R, H*d] (empty when not projected).
  matrix& w_r() noexcept { return w_r_; }
  const matrix& w_r() const noexcept { return w_r_; }

  /// R_k for the distances first, first-1, ..., first-count+1 ([count, d_R]).
  dmatrix sinusoid(Index first, Index count) const {
    return txl_sinusoid<double>(dim_r(), first, count, base_);
  }

  /// Position keys P_k of head `head` for the same distances ([count, d]).
  dmatrix position_keys(Index head, Index first, Index count) const {
    detail::require(head >= 0 && head < heads_, "transformer_xl_policy", "head", head,
                    "must be in [0, heads())");
    dmatrix r = sinusoid(first, count);
    if (!projected()) return r;
    return r * w_r_.middleCols(head * dim_, dim_).template cast<double>();
  }

  gradient_type zero_gradient() const {
    return {dmatrix::Zero(heads_, dim_), dmatrix::Zero(heads_, dim_),
            dmatrix::Zero(w_r_.rows(), w_r_.cols())};
  }

  /// Validates a gradient's shapes (the backward entry points call this before any work).
  void check_gradient(const gradient_type& g) const {
    detail::require(g.u.rows() == heads_ && g.u.cols() == dim_, "transformer_xl_policy",
                    "gradient.u.rows()", g.u.rows(), "gradient.u must be [heads, dim]");
    detail::require(g.v.rows() == heads_ && g.v.cols() == dim_, "transformer_xl_policy",
                    "gradient.v.rows()", g.v.rows(), "gradient.v must be [heads, dim]");
    detail::require(g.w_r.rows() == w_r_.rows() && g.w_r.cols() == w_r_.cols(),
                    "transformer_xl_policy", "gradient.w_r.rows()", g.w_r.rows(),
                    "gradient.w_r must be shaped like w_r() (use zero_gradient())");
  }

  /// One SGD step: parameters -= lr * gradient. Throws posenc::error on a shape mismatch.
  void sgd_step(const gradient_type& g, double lr) {
    check_gradient(g);
    u_ -= (lr * g.u).template cast<Scalar>();
    v_ -= (lr * g.v).template cast<Scalar>();
    if (projected()) w_r_ -= (lr * g.w_r).template cast<Scalar>();
  }

  /// Validates a call's shape, and makes sure the shared sinusoid cache covers the call's
  /// distances q_offset+Lq-1 .. q_offset-(Lk-1), so that every head reuses one R table
  /// (and decoding step by step extends it only now and then).
  void check(const attention_shape& shape) const {
    detail::require(shape.heads == heads_, "transformer_xl_policy", "heads", shape.heads,
                    "the call's query heads must equal the policy's heads");
    detail::require(shape.dim == dim_, "transformer_xl_policy", "dim", shape.dim,
                    "the call's head dim must equal the policy's dim");
    detail::require(shape.q_offset <= (Index(1) << 53) - shape.len_q, "transformer_xl_policy",
                    "q_offset", shape.q_offset,
                    "q_offset + len_q must be <= 2^53 (relative distances exact in double)");
    prepare(shape.q_offset + shape.len_q - 1, shape.len_q + shape.len_k - 1);
  }

  /// Drops the sinusoid cache (it grows to the largest distance range seen, plus 25 %).
  void clear_cache() const { std::atomic_store(&cache_, std::shared_ptr<const sinusoid_block>()); }

  /// Distances the sinusoid cache holds now, as {largest, smallest} ({0, 1} when empty).
  std::pair<Index, Index> cached_distances() const {
    const auto c = std::atomic_load(&cache_);
    return c ? std::pair<Index, Index>{c->hi, c->lo} : std::pair<Index, Index>{0, 1};
  }

  /// The hooks of one (batch, head).
  struct head_type : head_base {
    Index head = 0;
    Index dim = 0;
    Index first = 0;  ///< largest distance in the table, q_offset + Lq - 1
    Index len_k = 0;
    drow u, v;          ///< this head's biases
    dmatrix p;          ///< P for distances first .. first-(Lq+Lk-2), [Lq+Lk-1, d]
    dmatrix r;          ///< R for the same distances (kept only when projected, for dW_R)
    drow qv;            ///< q_i + v for the current row
    Index row_pos = 0;  ///< position of the current row
    mutable drow bd;    ///< (q_i + v) . P_{pos-j} for j < done: terms (b) + (d)
    mutable Index done = 0;
    drow dqv;  ///< dL/d(q_i + v) of the current row, [d] (backward scratch)
    drow rho;  ///< ds . R window, [d_R] (dW_R scratch)

    /// Terms (a) + (c): the kernel dots q + u with the keys.
    void transform_query(Index /*pos*/, Eigen::Ref<drow> q) const noexcept { q += u; }

    /// Starts a row; its terms (b) + (d) are products with a contiguous window of P.
    void begin_row(Index pos, const Eigen::Ref<const drow>& q) noexcept {
      qv = q + v;
      row_pos = pos;
      done = 0;
    }

    /// Terms (b) + (d) for key j. Computed in chunks of keys on first use, so keys the
    /// kernel never asks for (causal future, padding) cost nothing.
    double score(Index /*pos*/, Index j) const noexcept {
      if (j >= done) {
        const Index to = std::min(len_k, std::max(j + 1, done + chunk));
        bd.segment(done, to - done).noalias() =
            qv * p.middleRows(first - row_pos + done, to - done).transpose();
        done = to;
      }
      return bd(j);
    }

    /// q' = q + u, so dL/dq = dL/dq' and dL/du += dL/dq'.
    void backward_query(Index /*pos*/, Eigen::Ref<drow> dq, gradient_type& grad) const noexcept {
      grad.u.row(head) += dq;
    }

    /// dq += ds P_win; dv += ds P_win; dW_R[:, head] += (ds R_win)^T (q + v).
    void backward_score(Index pos, const Eigen::Ref<const drow>& q,
                        const Eigen::Ref<const drow>& ds, Eigen::Ref<drow> dq,
                        gradient_type& grad) noexcept {
      qv = q + v;
      Index n = len_k;  // masked keys have ds = 0: skip the tail
      while (n > 0 && ds(n - 1) == 0.0) --n;
      dqv.noalias() = ds.head(n) * p.middleRows(first - pos, n);
      dq += dqv;
      grad.v.row(head) += dqv;
      if (r.rows() > 0) {
        rho.noalias() = ds.head(n) * r.middleRows(first - pos, n);
        grad.w_r.middleCols(head * dim, dim).noalias() += rho.transpose() * qv;
      }
    }

    // Key j of the query at pos has distance pos - j: row first - pos + j of P (and R), so
    // a row's keys are a contiguous window. score() fills terms (b)+(d) this many keys at a time.
    static constexpr Index chunk = 64;
  };

  /// The hooks for (batch, head): builds this head's P table once.
  head_type head(Index /*batch*/, Index head, const attention_shape& shape) const {
    head_type h;
    h.head = head;
    h.dim = dim_;
    h.len_k = shape.len_k;
    h.first = shape.q_offset + shape.len_q - 1;
    const Index count = shape.len_q + shape.len_k - 1;
    dmatrix r;
    if (count <= 0) {
      r.resize(0, dim_r());
    } else if (const auto c = covering(h.first, count)) {
      r = c->r.middleRows(c->hi - h.first, count);  // same values as sinusoid(first, count)
    } else {
      r = sinusoid(h.first, count);
    }
    if (projected()) {
      h.p = r * w_r_.middleCols(head * dim_, dim_).template cast<double>();
      h.r = std::move(r);
    } else {
      h.p = std::move(r);
    }
    h.u = u_.row(head).template cast<double>();
    h.v = v_.row(head).template cast<double>();
    h.qv = drow::Zero(dim_);
    h.bd = drow::Zero(shape.len_k);
    h.dqv = drow::Zero(dim_);
    h.rho = drow::Zero(dim_r());
    return h;
  }

 private:
  Index heads_;
  Index dim_;
  Index dim_r_;
  double base_;
  /// R for the distances hi, hi-1, ..., lo; immutable once published.
  struct sinusoid_block {
    Index hi = 0;
    Index lo = 1;
    dmatrix r;
  };

  // The cache that covers [first-count+1, first], or null.
  std::shared_ptr<const sinusoid_block> covering(Index first, Index count) const {
    auto c = std::atomic_load(&cache_);
    if (c && c->hi >= first && c->lo <= first - count + 1) return c;
    return nullptr;
  }

  // Publishes a block covering the old range, the new one, and 25 % headroom above (the
  // positions of a decoder grow). Rows are computed per distance, so a row's values never
  // depend on the block it sits in. Concurrent calls may both build; either result is right.
  void prepare(Index first, Index count) const {
    if (count <= 0 || covering(first, count)) return;
    Index hi = first, lo = first - count + 1;
    if (const auto old = std::atomic_load(&cache_)) {
      // Grow the cached range only when the two are close (decoding, chunks): after a jump
      // to far positions (or back) the new range replaces it, so the cache never spans the
      // gap between them (which could be any size).
      const Index mhi = std::max(hi, old->hi), mlo = std::min(lo, old->lo);
      if (mhi - mlo + 1 <= 2 * (count + (old->hi - old->lo + 1))) {
        hi = mhi;
        lo = mlo;
      }
    }
    hi += std::max<Index>(16, (hi - lo + 1) / 4);
    auto block = std::make_shared<sinusoid_block>();
    block->hi = hi;
    block->lo = lo;
    block->r = txl_sinusoid<double>(dim_r(), hi, hi - lo + 1, base_);
    std::atomic_store(&cache_, std::shared_ptr<const sinusoid_block>(std::move(block)));
  }

  matrix u_;
  matrix v_;
  matrix w_r_;
  mutable std::shared_ptr<const sinusoid_block> cache_;
};

/// The former name of transformer_xl_policy.
template <class Scalar = float>
using transformer_xl_relative [[deprecated("use posenc::transformer_xl_policy")]] =
    transformer_xl_policy<Scalar>;

/// The segment memory of Transformer-XL: the last `mem_len` key and value rows.
///
/// Rows are tokens (row-major, [M, dim_k] and [M, dim_v]; multi-head callers store all
/// heads side by side, [M, H*d]). One segment step:
///
///     auto k_all = mem.keys_with(k_cur);     // [M + L, dim_k] = [memory; current]
///     auto v_all = mem.values_with(v_cur);
///     out = attention(q_cur, k_all, v_all, policy, {causal, q_offset = mem.size()});
///     mem.update(k_cur, v_cur);              // keep the last mem_len rows of [memory; current]
///
/// No gradient flows into the memory (the paper's stop-gradient).
template <class Scalar = float>
class txl_memory {
 public:
  using matrix = row_matrix<Scalar>;

  /// An empty memory holding up to `mem_len` rows of widths dim_k and dim_v.
  /// Throws posenc::error for mem_len < 0, dim_k < 1, dim_v < 1.
  txl_memory(Index mem_len, Index dim_k, Index dim_v) : mem_len_(mem_len) {
    detail::require(mem_len >= 0, "txl_memory", "mem_len", mem_len, "must be >= 0");
    detail::require(dim_k >= 1, "txl_memory", "dim_k", dim_k, "must be >= 1");
    detail::require(dim_v >= 1, "txl_memory", "dim_v", dim_v, "must be >= 1");
    keys_.resize(0, dim_k);
    values_.resize(0, dim_v);
  }

  Index mem_len() const noexcept { return mem_len_; }
  /// Rows held now (<= mem_len): also the q_offset of the next segment's queries.
  Index size() const noexcept { return keys_.rows(); }
  Index q_offset() const noexcept { return size(); }
  const matrix& keys() const noexcept { return keys_; }
  const matrix& values() const noexcept { return values_; }

  /// [memory; cur_k], [size() + L, dim_k]. Throws posenc::error on a width mismatch.
  template <class Derived>
  matrix keys_with(const Eigen::MatrixBase<Derived>& cur_k) const {
    return stacked(keys_, cur_k, "cur_k.cols()");
  }
  /// [memory; cur_v], [size() + L, dim_v].
  template <class Derived>
  matrix values_with(const Eigen::MatrixBase<Derived>& cur_v) const {
    return stacked(values_, cur_v, "cur_v.cols()");
  }

  /// memory <- the last mem_len rows of [memory; current]. Throws posenc::error on a
  /// width mismatch or differing row counts.
  template <class DK, class DV>
  void update(const Eigen::MatrixBase<DK>& cur_k, const Eigen::MatrixBase<DV>& cur_v) {
    detail::require(cur_k.rows() == cur_v.rows(), "txl_memory", "cur_v.rows()", cur_v.rows(),
                    "must equal cur_k.rows()");
    matrix k = keys_with(cur_k), v = values_with(cur_v);
    const Index keep = std::min(mem_len_, k.rows());
    keys_ = k.bottomRows(keep);
    values_ = v.bottomRows(keep);
  }

  /// Forgets everything (a new document).
  void clear() {
    keys_.resize(0, keys_.cols());
    values_.resize(0, values_.cols());
  }

 private:
  template <class Derived>
  static matrix stacked(const matrix& mem, const Eigen::MatrixBase<Derived>& cur,
                        const char* param) {
    detail::require(cur.cols() == mem.cols(), "txl_memory", param, cur.cols(),
                    "must equal the memory's width");
    matrix out(mem.rows() + cur.rows(), mem.cols());
    out.topRows(mem.rows()) = mem;
    out.bottomRows(cur.rows()) = cur.template cast<Scalar>();
    return out;
  }

  Index mem_len_;
  matrix keys_;
  matrix values_;
};

}  // namespace posenc
