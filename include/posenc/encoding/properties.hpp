#pragma once
/// \file
/// Properties of positional tables that the classic tutorials demonstrate, as library
/// functions: the offset rotation T_k of a sinusoidal encoding, the cosine-similarity
/// matrix of any table, the closest pair of positions, and the dot product PE(p).PE(p+k)
/// as a function of the offset k. Tables are [positions, d], one position per row; all
/// results are computed and returned in double.

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <string>

#include "../core/error.hpp"
#include "../core/view.hpp"
#include "sinusoidal.hpp"

namespace posenc {

/// A row-major double matrix, the result type of the property helpers.
using property_matrix = row_matrix<double>;

/// The block-diagonal rotation T_k with PE(p + k) = T_k PE(p) (column vectors) for every
/// position p: for a table with one position per row, table(p + k, :) = table(p, :) T_k^T.
/// Each (sin, cos) pair of frequency w_i is rotated by the angle k w_i,
///
///     [ sin((p+k) w) ]   [  cos(k w)  sin(k w) ] [ sin(p w) ]
///     [ cos((p+k) w) ] = [ -sin(k w)  cos(k w) ] [ cos(p w) ],
///
/// acting on columns (sin_column(i), cos_column(i)): adjacent 2x2 blocks for the vaswani
/// layout, the same blocks permuted for fairseq/t2t. A zero padding column maps to itself
/// (entry 1). T_k depends on k only, not on p; T_{-k} = T_k^T. The relation does not hold
/// at fairseq's padding row, which is zero by definition.
template <class Scalar, class Backend>
property_matrix offset_rotation(const sinusoidal<Scalar, Backend>& enc, Index k) {
  detail::require(k >= -sinusoidal_max_position && k <= sinusoidal_max_position, "offset_rotation",
                  "k", k, "must be within +-2^53");
  const Index d = enc.dim();
  property_matrix t = property_matrix::Zero(d, d);
  for (Index i = 0; i < enc.pairs(); ++i) {
    const double angle = static_cast<double>(k) * enc.frequencies()[static_cast<std::size_t>(i)];
    const double c = std::cos(angle), s = std::sin(angle);
    const Index a = enc.sin_column(i), b = enc.cos_column(i);
    t(a, a) = c;
    t(a, b) = s;
    t(b, a) = -s;
    t(b, b) = c;
  }
  for (Index j = 2 * enc.pairs(); j < d; ++j) t(j, j) = 1.0;
  return t;
}

/// PE(p) . PE(p + k) for k = 0 .. max_offset as the closed form sum_i cos(k w_i), which
/// does not depend on p (padding columns add nothing). Returns max_offset + 1 values.
template <class Scalar, class Backend>
Eigen::VectorXd offset_dot_products(const sinusoidal<Scalar, Backend>& enc, Index max_offset) {
  detail::require(max_offset >= 0 && max_offset <= sinusoidal_max_position, "offset_dot_products",
                  "max_offset", max_offset, "must be in [0, 2^53]");
  Eigen::VectorXd out(max_offset + 1);
  for (Index k = 0; k <= max_offset; ++k) {
    double sum = 0.0;
    for (double w : enc.frequencies()) sum += std::cos(static_cast<double>(k) * w);
    out(k) = sum;
  }
  return out;
}

/// Dot products table(start, :) . table(start + k, :) for k = 0 .. max_offset, for any
/// table (sinusoidal, learned, ...). Throws posenc::error when start < 0 or
/// start + max_offset is not a row of the table.
template <class Derived>
Eigen::VectorXd offset_dot_products(const Eigen::MatrixBase<Derived>& table, Index start,
                                    Index max_offset) {
  detail::require(start >= 0 && start < table.rows(), "offset_dot_products", "start", start,
                  "must be a row of the table (rows = " + std::to_string(table.rows()) + ")");
  detail::require(max_offset >= 0 && max_offset < table.rows() - start, "offset_dot_products",
                  "max_offset", max_offset,
                  "start + max_offset must be a row of the table (start = " +
                      std::to_string(start) + ", rows = " + std::to_string(table.rows()) + ")");
  Eigen::VectorXd out(max_offset + 1);
  const Eigen::RowVectorXd base = table.row(start).template cast<double>();
  for (Index k = 0; k <= max_offset; ++k)
    out(k) = base.dot(table.row(start + k).template cast<double>());
  return out;
}

/// Cosine similarity of every pair of rows: S(i, j) = <t_i, t_j> / (|t_i| |t_j|), [L, L].
/// A zero row (fairseq's padding row) has similarity 0 with every row, itself included.
template <class Derived>
property_matrix cosine_similarity(const Eigen::MatrixBase<Derived>& table) {
  property_matrix unit = table.template cast<double>();
  for (Index r = 0; r < unit.rows(); ++r) {
    const double n = unit.row(r).norm();
    if (n > 0) unit.row(r) /= n;  // zero rows stay zero: similarity 0
  }
  return unit * unit.transpose();
}

/// The closest pair of distinct rows of a table.
struct closest_pair {
  double distance = 0;  ///< |t_first - t_second| (Euclidean)
  Index first = 0;      ///< row index, first < second
  Index second = 0;
};

/// The minimum Euclidean distance between two distinct rows of `table` ([L, d], L >= 2),
/// and which rows attain it (the first such pair in row order). Differences are formed
/// directly (no |a|^2 + |b|^2 - 2ab cancellation); O(L^2 d).
template <class Derived>
closest_pair min_pairwise_distance(const Eigen::MatrixBase<Derived>& table) {
  detail::require(table.rows() >= 2, "min_pairwise_distance", "rows", table.rows(),
                  "needs at least 2 rows");
  const property_matrix t = table.template cast<double>();
  closest_pair best;
  double best_d2 = std::numeric_limits<double>::infinity();
  for (Index i = 0; i + 1 < t.rows(); ++i) {
    const Index rest = t.rows() - i - 1;
    const Eigen::VectorXd d2 = (t.bottomRows(rest).rowwise() - t.row(i)).rowwise().squaredNorm();
    Index j = 0;
    const double m = d2.minCoeff(&j);  // first minimum on ties
    if (m < best_d2) {
      best_d2 = m;
      best.first = i;
      best.second = i + 1 + j;
    }
  }
  best.distance = std::sqrt(best_d2);
  return best;
}

}  // namespace posenc
