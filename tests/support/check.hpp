#pragma once
// Small comparison helpers shared by the tests.

#include <Eigen/Core>
#include <cmath>
#include <posenc/core/error.hpp>
#include <string>

#include "catch.hpp"

namespace posenc_test {

/// max |a - b| over all elements, computed in double.
template <class A, class B>
double max_abs_diff(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  return (a.derived().template cast<double>() - b.derived().template cast<double>())
      .cwiseAbs()
      .maxCoeff();
}

/// ||a - b|| / ||b|| (Frobenius), computed in double.
template <class A, class B>
double rel_norm_err(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  const auto bd = b.derived().template cast<double>();
  const double den = bd.matrix().norm();
  const double num = (a.derived().template cast<double>() - bd).matrix().norm();
  return den == 0 ? num : num / den;
}

}  // namespace posenc_test

/// Requires that `expr` throws posenc::error whose message contains `needle`
/// (typically the parameter's name, or "name = value").
#define POSENC_REQUIRE_ERROR(expr, needle)                                               \
  do {                                                                                   \
    bool posenc_thrown_ = false;                                                         \
    try {                                                                                \
      (void)(expr);                                                                      \
    } catch (const posenc::error& e) {                                                   \
      posenc_thrown_ = true;                                                             \
      INFO("message: " << e.what());                                                     \
      CHECK(std::string(e.what()).find(needle) != std::string::npos);                    \
    }                                                                                    \
    if (!posenc_thrown_) FAIL("expected posenc::error containing '" << (needle) << "'"); \
  } while (0)
