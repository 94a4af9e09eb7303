#pragma once
/// \file
/// The AVX-512 sinusoidal-table kernel: sinusoidal_rows() overloaded on `backend::avx512 const&`.
/// float and double tables with contiguous columns run the packet kernel
/// (backend/simd/sinusoidal.hpp, angle addition in double); anything else falls back to the
/// portable kernel. Declared only when POSENC_ARCH_AVX512 is 1.

#include <type_traits>

#include "../scalar/sinusoidal.hpp"
#include "../simd/avx512.hpp"
#include "../simd/sinusoidal.hpp"

#if POSENC_ARCH_AVX512
namespace posenc {
namespace backend {

/// Writes or accumulates sinusoidal rows with AVX-512 packets. Never throws.
template <class T>
inline void sinusoidal_rows(avx512 const&, const sinusoidal_rows_args<T>& a) noexcept {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    simd::sinusoidal_rows<avx512>(a);
  else
    sinusoidal_rows(scalar{}, a);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_AVX512
