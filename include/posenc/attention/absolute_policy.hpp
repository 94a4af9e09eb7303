#pragma once
/// \file
/// Absolute position encodings inside the attention kernel, in one call: a position policy
/// that adds row p of a table P [max_len, d] to the query at position p = q_offset + i and
/// to the key at position j before the dot product (Vaswani et al. 2017 add sinusoidal or
/// learned P to the token embeddings; with identity projections this is that model):
///
///     logit_ij = scale · (q_i + P[q_offset + i]) · (k_j + P[j])
///
/// Values are not touched (a model that adds P before its value projection adds it to V
/// itself). P is any [max_len, d] table: posenc::sinusoidal's, a learned_table's weights,
/// or a checkpoint's. Learned tables get their gradient: dP[p] accumulates dL/dq'_i for
/// every query at p and dL/dk'_j for every key at p (absolute_gradient).

#include <Eigen/Core>
#include <algorithm>
#include <memory>

#include "../core/error.hpp"
#include "../core/policy.hpp"

namespace posenc {

/// dL/dP of an absolute_policy: [max_len, d].
struct absolute_gradient {
  dmatrix table;
};

/// Adds table rows to queries and keys at their absolute positions (see the file comment).
class absolute_policy : public policy_base {
 public:
  static constexpr bool transforms_keys = true;
  static constexpr bool keys_per_query_head = false;  // head() ignores the head index
  static constexpr bool transforms_queries = true;
  using gradient_type = absolute_gradient;

  /// `table` [max_len, d], any scalar type (held in double); finite.
  template <class Derived>
  explicit absolute_policy(const Eigen::MatrixBase<Derived>& table)
      : table_(std::make_shared<dmatrix>(table.template cast<double>())) {
    detail::require(table_->rows() >= 1, "absolute_policy", "table.rows()", table_->rows(),
                    "must be >= 1");
    detail::require(table_->allFinite(), "absolute_policy", "table", "non-finite",
                    "every entry must be finite");
  }

  const dmatrix& table() const noexcept { return *table_; }
  /// A zero gradient of the table's shape.
  absolute_gradient zero_gradient() const {
    return {dmatrix::Zero(table_->rows(), table_->cols())};
  }

  /// The table must have the call's head dim as width and a row for every position.
  void check(const attention_shape& s) const {
    detail::require(s.dim == table_->cols(), "absolute_policy", "dim", s.dim,
                    "must equal the table's width");
    const Index last = std::max(s.len_k, s.q_offset + s.len_q);
    detail::require(last <= table_->rows(), "absolute_policy", "max position + 1", last,
                    "must not exceed the table's rows (max_len)");
  }
  void check_gradient(const absolute_gradient& g) const {
    detail::require(g.table.rows() == table_->rows() && g.table.cols() == table_->cols(),
                    "absolute_policy", "grad.table.rows()", g.table.rows(),
                    "must match the table's shape (use zero_gradient())");
  }

  struct head_type : head_base {
    const dmatrix* table = nullptr;
    void transform_keys(Eigen::Ref<dmatrix> k) const noexcept { k += table->topRows(k.rows()); }
    void transform_query(Index pos, Eigen::Ref<drow> q) const noexcept { q += table->row(pos); }
    void backward_query(Index pos, Eigen::Ref<drow> dq, absolute_gradient& g) const noexcept {
      g.table.row(pos) += dq;
    }
    void backward_keys(Eigen::Ref<dmatrix> dk, absolute_gradient& g) const noexcept {
      g.table.topRows(dk.rows()) += dk;
    }
  };
  head_type head(Index /*batch*/, Index /*head*/, const attention_shape& /*shape*/) const {
    head_type t;
    t.table = table_.get();
    return t;
  }

 private:
  std::shared_ptr<const dmatrix> table_;
};

}  // namespace posenc
