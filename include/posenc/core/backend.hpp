#pragma once
/// \file
/// Backends are compile-time tags (empty structs). Inheritance says which backend
/// builds on which, so a kernel written as an overload taking `backend::scalar const&`
/// serves every tag that has no kernel of its own: overload resolution picks the nearest
/// base that has an implementation.
///
///     scalar            portable C++, every platform, the reference for all others
///       +- avx2         x86-64-v3: AVX2 + FMA
///       |    +- avx512  x86-64-v4: AVX-512 F/VL/BW/DQ
///       +- neon         AArch64 Advanced SIMD
///     cuda              device kernels, only when compiled by nvcc
///
/// The default backend is the best one the compiler flags allow (no run-time dispatch).
/// Override it for a whole program with `-DPOSENC_DEFAULT_BACKEND=scalar` (any tag name
/// below), or per call with an explicit template argument, e.g.
/// `posenc::sinusoidal<float, posenc::backend::scalar>`.

#include "../config.hpp"

namespace posenc {
namespace backend {

/// Portable scalar code: always available.
struct scalar {
  static constexpr const char* name() { return "scalar"; }
  static constexpr bool supported() { return true; }
};

/// AVX2 + FMA (x86-64-v3).
struct avx2 : scalar {
  static constexpr const char* name() { return "avx2"; }
  static constexpr bool supported() { return POSENC_ARCH_AVX2 == 1; }
};

/// AVX-512 F/VL/BW/DQ (x86-64-v4).
struct avx512 : avx2 {
  static constexpr const char* name() { return "avx512"; }
  static constexpr bool supported() { return POSENC_ARCH_AVX512 == 1; }
};

/// AArch64 NEON.
struct neon : scalar {
  static constexpr const char* name() { return "neon"; }
  static constexpr bool supported() { return POSENC_ARCH_NEON == 1; }
};

/// CUDA device kernels; usable only in translation units compiled by nvcc.
struct cuda {
  static constexpr const char* name() { return "cuda"; }
  static constexpr bool supported() { return POSENC_ARCH_CUDA == 1; }
};

/// The best CPU backend the compiler flags allow.
#if POSENC_ARCH_AVX512
using best_cpu = avx512;
#elif POSENC_ARCH_AVX2
using best_cpu = avx2;
#elif POSENC_ARCH_NEON
using best_cpu = neon;
#else
using best_cpu = scalar;
#endif

}  // namespace backend

/// The backend used when none is named. Override with -DPOSENC_DEFAULT_BACKEND=<tag>.
#ifdef POSENC_DEFAULT_BACKEND
using default_backend = backend::POSENC_DEFAULT_BACKEND;
#else
using default_backend = backend::best_cpu;
#endif

static_assert(default_backend::supported(),
              "posenc: POSENC_DEFAULT_BACKEND names a backend this compilation does not support "
              "(check -march / the POSENC_ARCH_* macros)");

}  // namespace posenc
