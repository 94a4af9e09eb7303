// 02: a learned position table (GPT-2 style): seeded N(0, 0.02) init, lookup + add, one
// backward/SGD step, and stretching it to a longer context by interpolation — each result
// checked against a naive computation. Exits non-zero on any mismatch.

#include <cmath>
#include <cstdio>
#include <posenc/encoding/learned.hpp>
#include <vector>

int main() {
  using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  posenc::learned_table<double> wpe(16, 4, /*seed=*/2024);
  std::printf("W(0, :) = %.6f %.6f %.6f %.6f (seed 2024: the same on every platform)\n",
              wpe.weights()(0, 0), wpe.weights()(0, 1), wpe.weights()(0, 2), wpe.weights()(0, 3));

  // Forward: out = E + W[positions]; positions may repeat.
  const std::vector<Eigen::Index> pos = {0, 5, 5, 15};
  matrix e = matrix::Ones(4, 4);
  matrix out = e;
  wpe.add_at(out, pos);
  double fwd = 0;
  for (Eigen::Index r = 0; r < 4; ++r)
    for (Eigen::Index c = 0; c < 4; ++c)
      fwd = std::fmax(
          fwd, std::fabs(out(r, c) - (1.0 + wpe.weights()(pos[static_cast<std::size_t>(r)], c))));

  // Backward of L = sum(out): dL/dout = 1, so dL/dW(p, :) counts how often p was used.
  wpe.backward(matrix::Ones(4, 4), pos);
  const double grad = std::fabs(wpe.gradient()(5, 0) - 2.0) +
                      std::fabs(wpe.gradient()(0, 3) - 1.0) + std::fabs(wpe.gradient()(3, 0));
  const matrix before = wpe.weights();
  wpe.sgd_step(0.5);
  const double sgd = std::fabs(wpe.weights()(5, 1) - (before(5, 1) - 1.0));

  // A longer context: 16 -> 31 rows; old row i lands on new row 2i, midpoints between.
  const auto longer = wpe.interpolated(31);
  double interp = 0;
  for (Eigen::Index i = 0; i < 16; ++i)
    interp = std::fmax(interp,
                       (longer.weights().row(2 * i) - wpe.weights().row(i)).cwiseAbs().maxCoeff());
  interp = std::fmax(interp,
                     (longer.weights().row(1) - 0.5 * (wpe.weights().row(0) + wpe.weights().row(1)))
                         .cwiseAbs()
                         .maxCoeff());

  std::printf("forward %.3g, gradient %.3g, sgd %.3g, interpolation %.3g\n", fwd, grad, sgd,
              interp);
  const bool ok = fwd == 0 && grad == 0 && sgd < 1e-15 && interp < 1e-15;
  std::printf("%s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
