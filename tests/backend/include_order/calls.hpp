#pragma once
// The calls both include-order programs make, each followed by a line naming the kernel it
// ran. Included after the program's own set of posenc headers.
#include <Eigen/Core>

#include "kernel_trace.hpp"

namespace posenc_test {

template <class Backend>
void report_calls(const char* tag) {
  using posenc::Index;
  std::printf("backend %s\n", tag);
  // M-RoPE on one head [L, D] (row-major, then column-major: strided dims), float
  auto mrope = posenc::mrope<float, Backend>(16, {2, 3, 3});
  posenc::rope_axis_positions pos(3, 5);
  pos << 0, 1, 2, 3, 4, 0, 0, 1, 1, 2, 0, 1, 0, 1, 0;
  posenc::row_matrix<float> x = posenc::row_matrix<float>::Random(5, 16);
  mrope.apply(x, pos);
  report("multi_axis_rotary<float> row-major");
  Eigen::MatrixXf xc = Eigen::MatrixXf::Random(5, 16);
  mrope.apply(xc, pos);
  report("multi_axis_rotary<float> column-major");
  // sinusoidal tables, float and double
  (void)posenc::sinusoidal<float, Backend>(32).table(7, 3);
  report("sinusoidal<float>::table");
  (void)posenc::sinusoidal<double, Backend>(32).table(7, 3);
  report("sinusoidal<double>::table");
}

}  // namespace posenc_test
