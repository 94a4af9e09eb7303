#pragma once
/// \file
/// T5 relative position bias (Raffel et al. 2020, "Exploring the limits of transfer
/// learning with a unified text-to-text transformer"): each head h adds a learned scalar
/// table[bucket(j - pos_i), h] to its logits. T5 uses no 1/sqrt(d) scaling: call the
/// kernel with `attention_config::scale = 1`.
///
/// The bucket of relative = key - query (pos_i = q_offset + i), for num_buckets B and
/// max_distance D:
///
///     bidirectional:  B' = floor(B/2); offset = B' if relative > 0 else 0; n = |relative|
///     unidirectional: B' = B;          offset = 0;                        n = max(-relative, 0)
///     E = floor(B'/2)                                  (exact buckets: one per distance)
///     n <  E:  bucket = offset + n
///     n >= E:  bucket = offset + min(E + floor(ln(n/E) / ln(D/E) · (B' - E)), B' - 1)
///
/// so distances E..D share log-spaced buckets and everything >= D falls in the last one.
/// The logarithm is evaluated only for n >= E >= 1 (where it is defined), in double; over
/// |relative| <= 20000 this gives the same buckets as the float32 computation of the
/// Hugging Face / Mesh TensorFlow code for B in {8..320}, D in {16..1000} (checked).
/// Unidirectional buckets treat every key after the query (relative > 0) as distance 0.

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/policy.hpp"
#include "../core/types.hpp"
#include "../math/t5_bucket.hpp"

namespace posenc {

/// T5 bucket parameters (defaults: T5's 32 buckets, max distance 128, bidirectional
/// encoder; decoders use bidirectional = false).
struct t5_bucket_config {
  Index num_buckets = 32;
  Index max_distance = 128;
  bool bidirectional = true;

  /// Throws posenc::error unless the bucket function is well defined: at least one exact
  /// bucket (B' >= 2) and max_distance > E (the log's denominator is positive).
  void check(const char* where = "t5_bucket_config") const {
    detail::require(num_buckets >= (bidirectional ? 4 : 2), where, "num_buckets", num_buckets,
                    bidirectional ? "must be >= 4 when bidirectional" : "must be >= 2");
    const Index exact = (bidirectional ? num_buckets / 2 : num_buckets) / 2;
    detail::require(max_distance > exact, where, "max_distance", max_distance,
                    "must exceed the number of exact buckets (num_buckets/2, halved again "
                    "when bidirectional)");
  }
};

namespace detail {
/// The bucket function for an already checked configuration (math::t5_bucket).
inline Index t5_bucket_unchecked(Index relative, const t5_bucket_config& c) noexcept {
  return math::t5_bucket(relative, c.num_buckets, c.max_distance, c.bidirectional);
}
}  // namespace detail

/// The T5 bucket of `relative` = key position - query position. Throws for a bad config.
inline Index t5_bucket(Index relative, const t5_bucket_config& config) {
  config.check("t5_bucket");
  detail::require(relative != std::numeric_limits<Index>::min(), "t5_bucket", "relative", relative,
                  "must be > the smallest Index (its distance is not representable)");
  return detail::t5_bucket_unchecked(relative, config);
}

/// Bucket indices [Lq, Lk] for queries at q_offset + i and keys at j (int64 in the CLI).
inline row_matrix<Index> t5_buckets(Index len_q, Index len_k, const t5_bucket_config& config,
                                    Index q_offset = 0) {
  config.check("t5_buckets");
  detail::require(len_q >= 0, "t5_buckets", "len_q", len_q, "must be >= 0");
  detail::require(len_k >= 0, "t5_buckets", "len_k", len_k, "must be >= 0");
  detail::require(q_offset >= 0, "t5_buckets", "q_offset", q_offset, "must be >= 0");
  detail::require(q_offset <= std::numeric_limits<Index>::max() - len_q, "t5_buckets", "q_offset",
                  q_offset,
                  "must be <= the largest Index minus len_q (query positions "
                  "q_offset + i must be representable)");
  detail::check_elements("t5_buckets", "len_k", len_k, 1);
  detail::check_elements("t5_buckets", "len_q", len_q, len_k);
  row_matrix<Index> out(len_q, len_k);
  for (Index i = 0; i < len_q; ++i)
    for (Index j = 0; j < len_k; ++j)
      out(i, j) = detail::t5_bucket_unchecked(j - (q_offset + i), config);
  return out;
}

/// The head of a policy whose bias is a table by distance (position_bias::
/// distance_table): bias(pos, j) = bias_by_rel[j - pos - rel_min], with an entry for every
/// j - pos the call meets. The tiled kernels read `rel_min` and `bias_by_rel`; the
/// reference kernel calls bias().
struct distance_table_head : head_base {
  Index rel_min = 0;
  std::vector<double> bias_by_rel;
  double bias(Index pos, Index j) const noexcept {
    return bias_by_rel[static_cast<std::size_t>(j - pos - rel_min)];
  }
};

/// dL/d(table) of a t5_bias_policy: [num_buckets, H], accumulated by attention_backward.
struct t5_bias_gradient {
  dmatrix table;
};

/// T5 relative bias as an attention position policy with a learned table
/// [num_buckets, H] (row = bucket, column = head): bias_h(pos, j) = table(bucket(j - pos), h).
class t5_bias_policy : public policy_base {
 public:
  static constexpr bool has_bias = true;
  static constexpr position_bias bias_form = position_bias::distance_table;
  using gradient_type = t5_bias_gradient;

  /// `table` [num_buckets, H], row-major, any scalar type (held in double).
  template <class Derived>
  t5_bias_policy(const Eigen::MatrixBase<Derived>& table, const t5_bucket_config& config)
      : table_(table.template cast<double>()), config_(config) {
    config_.check("t5_bias_policy");
    detail::require(table_.rows() == config_.num_buckets, "t5_bias_policy", "table.rows()",
                    table_.rows(), "must equal num_buckets");
    detail::require(table_.cols() >= 1, "t5_bias_policy", "table.cols()", table_.cols(),
                    "must be >= 1 (one column per head)");
  }

  /// A one-head policy with column h of the table, for single-head attention().
  t5_bias_policy only_head(Index h) const {
    detail::require(h >= 0 && h < heads(), "t5_bias_policy::only_head", "h", h,
                    "must be in [0, heads)");
    return t5_bias_policy(table_.col(h), config_);
  }

  Index heads() const noexcept { return table_.cols(); }
  const dmatrix& table() const noexcept { return table_; }
  /// The learned parameters, for an optimiser step.
  dmatrix& table() noexcept { return table_; }
  const t5_bucket_config& config() const noexcept { return config_; }

  /// A zero gradient of the table's shape.
  t5_bias_gradient zero_gradient() const { return {dmatrix::Zero(table_.rows(), table_.cols())}; }

  void check(const attention_shape& s) const {
    detail::require(s.heads == heads(), "t5_bias_policy", "heads", s.heads,
                    "must equal table.cols()");
  }
  void check_gradient(const t5_bias_gradient& g) const {
    detail::require(g.table.rows() == table_.rows(), "t5_bias_policy", "grad.table.rows()",
                    g.table.rows(), "must equal num_buckets (use zero_gradient())");
    detail::require(g.table.cols() == table_.cols(), "t5_bias_policy", "grad.table.cols()",
                    g.table.cols(), "must equal the number of heads (use zero_gradient())");
  }

  /// Per head: the bias and bucket of every relative distance the call can meet,
  /// relative = j - pos in [-(q_offset + Lq - 1), Lk - 1 - q_offset], computed once (no log
  /// per logit; Lq + Lk - 1 entries, independent of the offset).
  struct head_type : distance_table_head {
    Index h = 0;
    std::vector<Index> bucket_by_rel;
    void backward_bias(Index pos, const Eigen::Ref<const drow>& dlogit,
                       t5_bias_gradient& grad) const noexcept {
      for (Index j = 0; j < dlogit.size(); ++j)
        if (dlogit(j) != 0.0)
          grad.table(bucket_by_rel[static_cast<std::size_t>(j - pos - rel_min)], h) += dlogit(j);
    }
  };
  head_type head(Index /*batch*/, Index h, const attention_shape& s) const {
    head_type t;
    t.h = h;
    // Only Lq + Lk - 1 distances occur, whatever the offset: j - pos for j < Lk and
    // pos in [q_offset, q_offset + Lq).
    const Index lq = std::max<Index>(s.len_q, 1), lk = std::max<Index>(s.len_k, 1);
    t.rel_min = -(s.q_offset + lq - 1);
    const auto n = static_cast<std::size_t>(lq + lk - 1);
    t.bias_by_rel.resize(n);
    t.bucket_by_rel.resize(n);
    for (std::size_t r = 0; r < n; ++r) {
      const Index b = detail::t5_bucket_unchecked(t.rel_min + static_cast<Index>(r), config_);
      t.bucket_by_rel[r] = b;
      t.bias_by_rel[r] = table_(b, h);
    }
    return t;
  }

 private:
  dmatrix table_;
  t5_bucket_config config_;
};

}  // namespace posenc
