// Include-order check, program A: only the multi-axis RoPE and sinusoidal headers (the
// include set that once compiled multi_axis_rotary<float, avx512> to the AVX2 kernel).
#include "kernel_trace.hpp"
// clang-format off: kernel_trace.hpp must come first
#include <posenc/encoding/rotary/multi_axis.hpp>
#include <posenc/encoding/sinusoidal.hpp>
// clang-format on

#include "calls.hpp"

int main() {
  posenc_test::report_calls<posenc::default_backend>("default");
#if POSENC_ARCH_AVX512
  posenc_test::report_calls<posenc::backend::avx512>("avx512");
#endif
#if POSENC_ARCH_AVX2
  posenc_test::report_calls<posenc::backend::avx2>("avx2");
#endif
  posenc_test::report_calls<posenc::backend::scalar>("scalar");
  return 0;
}
