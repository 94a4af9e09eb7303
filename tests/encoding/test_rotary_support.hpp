#pragma once
// Shared helpers of the rotary tests.

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <posenc/encoding/rotary.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/check.hpp"
#include "support/golden.hpp"

namespace posenc_test {

template <class T>
using rmat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A [rows, cols] matrix of N(0, 1) values from a fixed seed.
template <class T>
rmat<T> random_matrix(posenc::Index rows, posenc::Index cols, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  rmat<T> m(rows, cols);
  for (posenc::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(nd(gen));
  return m;
}

/// n random values, for strided buffers.
template <class T>
std::vector<T> random_buffer(std::size_t n, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<T> v(n);
  for (auto& e : v) e = static_cast<T>(nd(gen));
  return v;
}

/// Position ids from a golden int64 .npy.
inline std::vector<posenc::Index> golden_positions(const std::string& file) {
  const auto t = golden<std::int64_t>(file);
  return std::vector<posenc::Index>(t.data.begin(), t.data.end());
}

/// True when a and b hold the same bits.
template <class A, class B>
bool same_bits(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (posenc::Index i = 0; i < a.rows(); ++i)
    for (posenc::Index j = 0; j < a.cols(); ++j) {
      const auto x = a.derived().coeff(i, j);
      const auto y = b.derived().coeff(i, j);
      static_assert(sizeof(x) == sizeof(y), "same scalar sizes");
      if (std::memcmp(&x, &y, sizeof(x)) != 0) return false;
    }
  return true;
}

/// The largest per-row ||a_i - b_i|| / ||b_i||.
template <class A, class B>
double max_row_rel_err(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  double worst = 0;
  for (posenc::Index i = 0; i < a.rows(); ++i)
    worst = std::max(worst, rel_norm_err(a.derived().row(i), b.derived().row(i)));
  return worst;
}

}  // namespace posenc_test
