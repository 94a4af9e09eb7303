// Include-order check, program B: the umbrella header. Must print exactly what program A
// prints: which kernel runs may not depend on which headers a file included.
#include "kernel_trace.hpp"
// clang-format off: kernel_trace.hpp must come first
#include <posenc/posenc.hpp>
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
