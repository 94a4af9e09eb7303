#pragma once
/// \file
/// Relative position representations of Shaw, Uszkoreit and Vaswani (2018),
/// "Self-Attention with Relative Position Representations", as a position policy of the
/// attention kernel (attention/policy.hpp).
///
/// For query i at absolute position pos = q_offset + i and key j (absolute position j):
///
///     r_ij     = clip(j - pos, -left, right) + left           table row, 0 .. left+right
///     logit_ij = scale * q_i . (k_j + a^K[r_ij])              paper eq. (4)
///     out_i    = sum_j alpha_ij (v_j + a^V[r_ij])             paper eq. (3)
///
/// The paper clips symmetrically, clip(x, k) = max(-k, min(k, x)) with 2k+1 rows
/// (`shaw_clip::symmetric(k)`); `shaw_clip::asymmetric(left, right)` allows a different
/// window on each side (e.g. a causal model needs no right side: right = 0).
///
///     relative distance j - pos:   <=-left  -left+1 ...  -1   0   1  ... right-1  >=right
///     table row r:                     0       1    ... l-1   l  l+1 ... l+r-1     l+r
///
/// Tables: `a^K` is [rows, d], `a^V` is [rows, dv], row-major. They are either shared by
/// all heads (the paper's choice: "shared across attention heads", tables = 1) or one pair
/// per query head (tables = H), stacked head after head: rows h*rows .. (h+1)*rows-1.
///
/// Cost: no [L, L, d] tensor is formed. Per query row the policy computes q_i . a^K_r once
/// for every bucket r (O(rows * d)), then each logit's position term is a lookup; the
/// value term sums the weights per bucket first (O(Lk)) and then multiplies the bucket
/// weights with a^V (O(rows * dv)). Keys beyond the clip window fall into the two end
/// buckets, which are contiguous key ranges.

#include <Eigen/Core>
#include <algorithm>

#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/policy.hpp"
#include "../core/types.hpp"
#include "../math/clip.hpp"

namespace posenc {

/// The clip window [-left, right] of Shaw et al.'s relative distances j - i.
struct shaw_clip {
  Index left = 0;   ///< keys up to `left` positions before the query get their own row
  Index right = 0;  ///< keys up to `right` positions after the query get their own row
  /// The largest clip distance on either side.
  static constexpr Index max_clip = Index(1) << 31;

  /// The paper's symmetric window: clip(j - i, k) = max(-k, min(k, j - i)), 2k+1 rows.
  static shaw_clip symmetric(Index k) {
    detail::require(k >= 0, "shaw_clip", "k", k, "clip distance must be >= 0");
    detail::require(k <= max_clip, "shaw_clip", "k", k, "clip distance must be <= 2^31");
    return shaw_clip{k, k};
  }

  /// An asymmetric window [-left, right], left+right+1 rows.
  static shaw_clip asymmetric(Index left, Index right) {
    detail::require(left >= 0, "shaw_clip", "left", left, "must be >= 0");
    detail::require(right >= 0, "shaw_clip", "right", right, "must be >= 0");
    // One table row per distance: larger windows could never be allocated, and the bound
    // keeps rows() and the window arithmetic far from Index overflow.
    detail::require(left <= max_clip, "shaw_clip", "left", left, "must be <= 2^31");
    detail::require(right <= max_clip, "shaw_clip", "right", right, "must be <= 2^31");
    return shaw_clip{left, right};
  }

  /// Number of table rows, left + right + 1.
  Index rows() const noexcept { return left + right + 1; }

  /// Table row of relative distance `rel` = j - i: clip(rel, -left, right) + left.
  Index row(Index rel) const noexcept { return math::clip_row(rel, left, right); }
};

/// Shaw et al.'s learned relative key/value tables, and the attention policy using them.
///
/// `Scalar` is the storage type of the tables (float or double); the kernel's hooks work
/// in double. Construct, fill the tables (`key_table(t)`, `value_table(t)`, or the stacked
/// `key_tables()` / `value_tables()`), then pass the object as the kernel's policy:
///
///     posenc::shaw_policy<float> shaw(posenc::shaw_clip::symmetric(16), d, dv);
///     shaw.key_tables() = ...;  shaw.value_tables() = ...;
///     auto out = posenc::attention(q, k, v, config, shaw);
///
/// Gradients (attention/backward.hpp) accumulate into `gradient_type` (double tables of
/// the same shapes as the stacked tables); `sgd_step` applies one.
template <class Scalar = float>
class shaw_policy : public policy_base {
 public:
  /// Stacked tables: [tables * rows, dim] (keys) and [tables * rows, dim_v] (values).
  using matrix = row_matrix<Scalar>;

  static constexpr bool has_score_term = true;
  static constexpr bool has_value_term = true;
  static constexpr position_bias bias_form = position_bias::clipped_embeddings;

  /// dL/da^K and dL/da^V, shaped like key_tables() and value_tables(), in double.
  struct gradient_type {
    dmatrix key;    ///< [tables * rows, dim]
    dmatrix value;  ///< [tables * rows, dim_v]
  };

  /// Zero tables for a window `clip`, head dims `dim` (queries/keys) and `dim_v`
  /// (values), and `tables` sets: 1 = shared by every head (Shaw et al.), H = one per
  /// query head. Throws posenc::error for dim < 1, dim_v < 1 or tables < 1.
  shaw_policy(shaw_clip clip, Index dim, Index dim_v, Index tables = 1)
      : clip_(validated(clip)), dim_(dim), dim_v_(dim_v), tables_(tables) {
    detail::require(dim >= 1, "shaw_policy", "dim", dim, "must be >= 1");
    detail::require(dim_v >= 1, "shaw_policy", "dim_v", dim_v, "must be >= 1");
    detail::require(tables >= 1, "shaw_policy", "tables", tables,
                    "must be >= 1 (1 = shared by all heads, H = one per head)");
    detail::check_heads_limit("shaw_policy", "tables", tables);
    detail::check_dim_limit("shaw_policy", "dim", dim);
    detail::check_dim_limit("shaw_policy", "dim_v", dim_v);
    // clip up to 2^31 each side: the window's rows times the widest table must fit
    detail::check_elements("shaw_policy", "clip rows * tables", tables * clip_.rows(),
                           std::max(dim, dim_v));
    key_ = matrix::Zero(tables * clip_.rows(), dim);
    value_ = matrix::Zero(tables * clip_.rows(), dim_v);
  }

  const shaw_clip& clip() const noexcept { return clip_; }
  Index dim() const noexcept { return dim_; }
  Index dim_v() const noexcept { return dim_v_; }
  /// Number of table sets: 1 (shared) or the number of query heads.
  Index tables() const noexcept { return tables_; }
  /// Rows per table: left + right + 1.
  Index rows() const noexcept { return clip_.rows(); }

  /// All key tables stacked, [tables * rows, dim].
  matrix& key_tables() noexcept { return key_; }
  const matrix& key_tables() const noexcept { return key_; }
  /// All value tables stacked, [tables * rows, dim_v].
  matrix& value_tables() noexcept { return value_; }
  const matrix& value_tables() const noexcept { return value_; }

  /// Key table a^K of set t, [rows, dim]; row r holds relative distance r - left (clipped).
  auto key_table(Index t) { return key_.middleRows(checked_set(t) * rows(), rows()); }
  auto key_table(Index t) const { return key_.middleRows(checked_set(t) * rows(), rows()); }
  /// Value table a^V of set t, [rows, dim_v].
  auto value_table(Index t) { return value_.middleRows(checked_set(t) * rows(), rows()); }
  auto value_table(Index t) const { return value_.middleRows(checked_set(t) * rows(), rows()); }

  /// The table set query head `head` uses (0 when shared).
  Index set_of_head(Index head) const noexcept { return tables_ == 1 ? 0 : head; }

  /// A zero gradient of the right shapes.
  gradient_type zero_gradient() const {
    return {dmatrix::Zero(key_.rows(), dim_), dmatrix::Zero(value_.rows(), dim_v_)};
  }

  /// Validates a gradient's shapes (the backward entry points call this before any work).
  void check_gradient(const gradient_type& g) const {
    detail::require(g.key.rows() == key_.rows() && g.key.cols() == key_.cols(), "shaw_policy",
                    "gradient.key.rows()", g.key.rows(),
                    "gradient.key must be shaped like key_tables() (use zero_gradient())");
    detail::require(g.value.rows() == value_.rows() && g.value.cols() == value_.cols(),
                    "shaw_policy", "gradient.value.rows()", g.value.rows(),
                    "gradient.value must be shaped like value_tables() (use zero_gradient())");
  }

  /// One SGD step: tables -= lr * gradient. Throws posenc::error on a shape mismatch.
  void sgd_step(const gradient_type& g, double lr) {
    check_gradient(g);
    key_ -= (lr * g.key).template cast<Scalar>();
    value_ -= (lr * g.value).template cast<Scalar>();
  }

  /// Validates the tables against a call's shape (called once by the kernel's entry points).
  void check(const attention_shape& shape) const {
    detail::require(shape.dim == dim_, "shaw_policy", "dim", shape.dim,
                    "the call's head dim must equal the key tables' dim");
    detail::require(shape.dim_v == dim_v_, "shaw_policy", "dim_v", shape.dim_v,
                    "the call's value head dim must equal the value tables' dim_v");
    detail::require(tables_ == 1 || tables_ == shape.heads, "shaw_policy", "heads", shape.heads,
                    "per-head tables need exactly one table set per query head");
  }

  /// The hooks of one (batch, head): its tables in double and per-row scratch.
  struct head_type : head_base {
    shaw_clip clip;
    Index set = 0;    ///< table set of this head (row block in the gradient)
    Index len_k = 0;  ///< keys per row
    dmatrix ak;       ///< a^K [rows, dim]
    dmatrix av;       ///< a^V [rows, dim_v]
    drow qa;          ///< q_i . a^K_r for the current row, [rows]
    drow bucket;      ///< per-bucket sums of a row (weights or score gradients), [rows]
    drow tv;          ///< dout . a^V_r for the current row, [rows]

    /// Per-row precompute: q_i . a^K_r for every bucket r.
    void begin_row(Index /*pos*/, const Eigen::Ref<const drow>& q) noexcept {
      qa.noalias() = q * ak.transpose();
    }

    /// Pre-scale position term q_i . a^K[clip(j - pos) + left], a lookup.
    double score(Index pos, Index j) const noexcept { return qa(clip.row(j - pos)); }

    /// out_i += sum_r (sum_{j in bucket r} p_j) a^V_r.
    void add_values(Index pos, const Eigen::Ref<const drow>& p, Eigen::Ref<drow> out) noexcept {
      sum_buckets(pos, p);
      out.noalias() += bucket * av;
    }

    /// dp_j += dout . a^V[r_ij]; dL/da^V_r += (sum_{j in r} p_j) dout.
    void backward_values(Index pos, const Eigen::Ref<const drow>& p,
                         const Eigen::Ref<const drow>& dout, Eigen::Ref<drow> dp,
                         gradient_type& grad) noexcept {
      tv.noalias() = dout * av.transpose();
      for (Index j = 0; j < len_k; ++j) dp(j) += tv(clip.row(j - pos));
      sum_buckets(pos, p);
      grad.value.middleRows(set * clip.rows(), clip.rows()).noalias() += bucket.transpose() * dout;
    }

    /// dq += sum_j ds_j a^K[r_ij]; dL/da^K_r += (sum_{j in r} ds_j) q.
    void backward_score(Index pos, const Eigen::Ref<const drow>& q,
                        const Eigen::Ref<const drow>& ds, Eigen::Ref<drow> dq,
                        gradient_type& grad) noexcept {
      sum_buckets(pos, ds);
      dq.noalias() += bucket * ak;
      grad.key.middleRows(set * clip.rows(), clip.rows()).noalias() += bucket.transpose() * q;
    }

   private:
    // Buckets 0 and rows-1 collect contiguous key ranges (everything beyond the window),
    // the buckets in between hold one key each: O(Lk) per row.
    void sum_buckets(Index pos, const Eigen::Ref<const drow>& x) noexcept {
      bucket.setZero();
      const Index lo_end = std::clamp(pos - clip.left + 1, Index(0), len_k);  // j - pos <= -left
      // j - pos >= right; pos + right is formed only when it stays below len_k (no overflow
      // at far query positions)
      const Index hi_begin =
          std::clamp(pos >= len_k - clip.right ? len_k : pos + clip.right, lo_end, len_k);
      if (lo_end > 0) bucket(0) = x.head(lo_end).sum();
      for (Index j = lo_end; j < hi_begin; ++j) bucket(clip.row(j - pos)) += x(j);
      if (hi_begin < len_k) bucket(clip.rows() - 1) += x.segment(hi_begin, len_k - hi_begin).sum();
    }
  };

  /// The hooks for (batch, head): copies this head's tables to double once.
  head_type head(Index /*batch*/, Index head, const attention_shape& shape) const {
    head_type h;
    h.clip = clip_;
    h.set = set_of_head(head);
    h.len_k = shape.len_k;
    h.ak = key_.middleRows(h.set * rows(), rows()).template cast<double>();
    h.av = value_.middleRows(h.set * rows(), rows()).template cast<double>();
    h.qa = drow::Zero(rows());
    h.bucket = drow::Zero(rows());
    h.tv = drow::Zero(rows());
    return h;
  }

 private:
  static shaw_clip validated(shaw_clip c) { return shaw_clip::asymmetric(c.left, c.right); }

  Index checked_set(Index t) const {
    detail::require(t >= 0 && t < tables_, "shaw_policy", "table", t, "must be in [0, tables())");
    return t;
  }

  shaw_clip clip_;
  Index dim_;
  Index dim_v_;
  Index tables_;
  matrix key_;
  matrix value_;
};

/// The former name of shaw_policy.
template <class Scalar = float>
using shaw_relative [[deprecated("use posenc::shaw_policy")]] = shaw_policy<Scalar>;

}  // namespace posenc
