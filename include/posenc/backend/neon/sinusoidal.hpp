#pragma once
/// \file
/// The NEON sinusoidal-table kernel: sinusoidal_rows() overloaded on `backend::neon const&`.
/// float and double tables with contiguous columns run the packet kernel
/// (backend/simd/sinusoidal.hpp, angle addition in double); anything else falls back to the
/// portable kernel. Declared only when POSENC_ARCH_NEON is 1.

#include <type_traits>

#include "../scalar/sinusoidal.hpp"
#include "../simd/neon.hpp"
#include "../simd/sinusoidal.hpp"

#if POSENC_ARCH_NEON
namespace posenc {
namespace backend {

/// Writes or accumulates sinusoidal rows with NEON packets. Never throws.
template <class T>
inline void sinusoidal_rows(neon const&, const sinusoidal_rows_args<T>& a) noexcept {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    simd::sinusoidal_rows<neon>(a);
  else
    sinusoidal_rows(scalar{}, a);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_NEON
