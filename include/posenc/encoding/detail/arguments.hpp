#pragma once
/// \file
/// Argument handling shared by the absolute encodings (sinusoidal, learned_table): a vector
/// of integer positions read into a std::vector, and a caller's writable matrix as a
/// [seq, dim] view. Internal: the public headers use these, callers do not.

#include <Eigen/Core>
#include <type_traits>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/view.hpp"

namespace posenc::detail {

/// The entries of an integer row or column vector `p` as positions, in order; a
/// posenc::error from `where` (naming positions.rows) when `p` is not a vector.
template <class Derived>
std::vector<Index> positions_from(const Eigen::DenseBase<Derived>& p, const char* where) {
  static_assert(std::is_integral_v<typename Derived::Scalar>, "posenc: positions must be integers");
  require(p.rows() == 1 || p.cols() == 1 || p.size() == 0, where, "positions.rows", p.rows(),
          "positions must be a vector");
  std::vector<Index> out(static_cast<std::size_t>(p.size()));
  for (Index i = 0; i < p.size(); ++i)
    out[static_cast<std::size_t>(i)] = static_cast<Index>(p.derived().coeff(i));
  return out;
}

/// A [rows, cols] view of a caller's writable matrix, map or block of `Scalar` (row- or
/// column-major; the view keeps its real strides). Eigen's documented way to write through
/// a `const MatrixBase&` argument, so that blocks and maps (temporaries) are accepted.
template <class Scalar, class Derived>
seq_view<Scalar> writable_seq_view(const Eigen::MatrixBase<Derived>& m) {
  static_assert(std::is_same_v<typename Derived::Scalar, Scalar>,
                "posenc: the matrix's scalar type must match the encoding's");
  static_assert((Derived::Flags & Eigen::DirectAccessBit) && (Derived::Flags & Eigen::LvalueBit),
                "posenc: output must be a writable matrix, map or block");
  return view_of(const_cast<Eigen::MatrixBase<Derived>&>(m));
}

}  // namespace posenc::detail
