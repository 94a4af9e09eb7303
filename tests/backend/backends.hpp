#pragma once
// The SIMD backends this compilation enables, for tests that compare each against scalar.

#include <posenc/core/backend.hpp>
#include <random>
#include <vector>

namespace posenc_test {

/// Calls f(tag) for every SIMD backend the compiler flags enable (none on baseline x86-64).
template <class F>
void for_each_simd_backend(F&& f) {
#if POSENC_ARCH_AVX2
  f(posenc::backend::avx2{});
#endif
#if POSENC_ARCH_AVX512
  f(posenc::backend::avx512{});
#endif
#if POSENC_ARCH_NEON
  f(posenc::backend::neon{});
#endif
  (void)f;
}

/// Deterministic values in [-1, 1) (mt19937 bits, our own transform).
template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(static_cast<double>(gen()) / 2147483648.0 - 1.0);
  return v;
}

}  // namespace posenc_test
