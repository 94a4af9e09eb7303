#pragma once
// Helpers shared by the attention tests: deterministic random matrices, central-difference
// gradients and a naive O(Lq·Lk·d) attention written independently of the kernel (loops,
// no policies).

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <posenc/attention.hpp>
#include <random>
#include <vector>

namespace posenc_test {

template <class Scalar = double>
using rmat = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Uniform [-1, 1) entries from a fixed 64-bit LCG: same values on every platform.
template <class Scalar = double>
rmat<Scalar> random_matrix(posenc::Index rows, posenc::Index cols, std::uint64_t seed) {
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  rmat<Scalar> m(rows, cols);
  for (posenc::Index i = 0; i < m.size(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    m.data()[i] = static_cast<Scalar>(static_cast<double>(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return m;
}

/// Standard normal entries drawn from `gen` (the relative-attention tests' inputs).
inline rmat<double> normal_matrix(posenc::Index rows, posenc::Index cols, std::mt19937& gen) {
  std::normal_distribution<double> n(0.0, 1.0);
  rmat<double> m(rows, cols);
  for (posenc::Index i = 0; i < rows; ++i)
    for (posenc::Index j = 0; j < cols; ++j) m(i, j) = n(gen);
  return m;
}

/// Central differences (step h) of loss() with respect to every element of x, which is
/// perturbed in place and restored.
inline rmat<double> numeric_grad(rmat<double>& x, const std::function<double()>& loss,
                                 double h = 1e-6) {
  rmat<double> g(x.rows(), x.cols());
  for (posenc::Index e = 0; e < x.size(); ++e) {
    const double keep = x.data()[e];
    x.data()[e] = keep + h;
    const double up = loss();
    x.data()[e] = keep - h;
    const double down = loss();
    x.data()[e] = keep;
    g.data()[e] = (up - down) / (2 * h);
  }
  return g;
}

/// numeric_grad() of L = sum(dout .* f()), f() returning a matrix shaped like dout.
template <class F>
rmat<double> numeric_gradient(rmat<double>& x, const rmat<double>& dout, F&& f) {
  return numeric_grad(x, [&] { return dout.cwiseProduct(f()).sum(); });
}

/// Naive attention with an explicit bias function and visibility predicate.
inline rmat<double> naive_attention(
    const rmat<double>& q, const rmat<double>& k, const rmat<double>& v, double scale,
    const std::function<double(posenc::Index, posenc::Index)>& bias,
    const std::function<bool(posenc::Index, posenc::Index)>& visible,
    rmat<double>* weights = nullptr) {
  rmat<double> out = rmat<double>::Zero(q.rows(), v.cols());
  if (weights) *weights = rmat<double>::Zero(q.rows(), k.rows());
  for (posenc::Index i = 0; i < q.rows(); ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    std::vector<double> l(static_cast<std::size_t>(k.rows()), mx);
    for (posenc::Index j = 0; j < k.rows(); ++j)
      if (visible(i, j)) {
        l[static_cast<std::size_t>(j)] = scale * q.row(i).dot(k.row(j)) + bias(i, j);
        mx = std::max(mx, l[static_cast<std::size_t>(j)]);
      }
    if (mx == -std::numeric_limits<double>::infinity()) continue;
    double sum = 0;
    for (auto& x : l) sum += (x = std::exp(x - mx));
    for (posenc::Index j = 0; j < k.rows(); ++j) {
      const double p = l[static_cast<std::size_t>(j)] / sum;
      out.row(i) += p * v.row(j);
      if (weights) (*weights)(i, j) = p;
    }
  }
  return out;
}

}  // namespace posenc_test
