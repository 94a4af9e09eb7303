#pragma once
/// \file
/// The AVX2 + FMA sinusoidal-table kernel: sinusoidal_rows() overloaded on `backend::avx2 const&`.
/// float and double tables with contiguous columns run the packet kernel
/// (backend/simd/sinusoidal.hpp, angle addition in double); anything else falls back to the
/// portable kernel. Declared only when POSENC_ARCH_AVX2 is 1.

#include <type_traits>

#include "../scalar/sinusoidal.hpp"
#include "../simd/avx2.hpp"
#include "../simd/sinusoidal.hpp"

#if POSENC_ARCH_AVX2
namespace posenc {
namespace backend {

/// Writes or accumulates sinusoidal rows with AVX2 + FMA packets. Never throws.
template <class T>
inline void sinusoidal_rows(avx2 const&, const sinusoidal_rows_args<T>& a) noexcept {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    simd::sinusoidal_rows<avx2>(a);
  else
    sinusoidal_rows(scalar{}, a);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_AVX2
