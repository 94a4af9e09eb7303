#pragma once
/// \file
/// A position row added to a token's embedding in place, shared by the absolute encodings
/// (sinusoidal's batches, learned_table). Internal: the public headers use it, callers do
/// not.

#include <Eigen/Core>

#include "../../core/types.hpp"

namespace posenc::detail {

/// y[j · stride] = s · y[j · stride] + w[j] for j < n. Contiguous rows go through Eigen's
/// packets: GCC at -O2 does not vectorise the strided loop (it would have to version it for
/// stride 1), and ran 1.5-4x slower than at -O3 (docs/benchmarks.md).
template <class Scalar>
void scale_add_row(Scalar* y, Index stride, const Scalar* w, Index n, Scalar s) noexcept {
  if (stride == 1) {
    using row = Eigen::Array<Scalar, 1, Eigen::Dynamic>;
    Eigen::Map<row> yr(y, n);
    yr = s * yr + Eigen::Map<const row>(w, n);
    return;
  }
  for (Index j = 0; j < n; ++j) y[j * stride] = s * y[j * stride] + w[j];
}

}  // namespace posenc::detail
