#pragma once
/// \file
/// Argument handling shared by the absolute encodings (sinusoidal, learned_table): a vector
/// of integer positions read into a std::vector. Internal: the public headers use it,
/// callers do not.

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

}  // namespace posenc::detail
