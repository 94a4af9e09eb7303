#pragma once
/// \file
/// The vocabulary every layer shares: the index type, row-major matrices, and what a
/// storage type computes in.
///
///     row_matrix<T>   Eigen::Matrix<T, Dynamic, Dynamic, RowMajor>: one token, position or
///                     head per row, posenc's layout everywhere (dmatrix = row_matrix<double>)
///     real_t<T>       the arithmetic of storage T: double for double; float for float,
///                     Eigen::half and Eigen::bfloat16 (16-bit storage computes in float)
///     to_real<R>(x)   a stored value in arithmetic type R (exact for every widening)

#include <Eigen/Core>
#include <type_traits>

#include "../config.hpp"

namespace posenc {

/// Signed type of every size, position, index and stride (Eigen's).
using Index = Eigen::Index;

/// Row-major dynamic matrix: one token (or position, or head) per row.
template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Row-major double matrix: the precision of every policy hook and of the reference kernel.
using dmatrix = row_matrix<double>;
/// Double row vector (one query, key or output row).
using drow = Eigen::Matrix<double, 1, Eigen::Dynamic>;

/// The arithmetic type of storage type T: double for double; float for float, Eigen::half
/// and Eigen::bfloat16.
template <class T>
using real_t = std::conditional_t<std::is_same_v<std::remove_cv_t<T>, double>, double, float>;

/// True for the storage types of activations: float, double, Eigen::half, Eigen::bfloat16.
template <class T>
inline constexpr bool is_storage_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Eigen::half> ||
    std::is_same_v<T, Eigen::bfloat16>;

/// A stored element (float, double, half, bfloat16) in arithmetic type Real; the 16-bit
/// types widen through float, exactly.
template <class Real, class T>
inline Real to_real(const T& x) noexcept {
  if constexpr (std::is_arithmetic_v<T>)
    return static_cast<Real>(x);
  else
    return static_cast<Real>(static_cast<float>(x));
}

}  // namespace posenc
