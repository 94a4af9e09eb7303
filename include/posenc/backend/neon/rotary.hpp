#pragma once
/// \file
/// The NEON RoPE rotation: rope_rotate() overloaded on `backend::neon const&`. float and double
/// tokens with contiguous dims run the packet kernel (backend/simd/rotary.hpp); anything
/// else falls back to the portable kernel. Declared only when POSENC_ARCH_NEON is 1.

#include <type_traits>

#include "../scalar/rotary.hpp"
#include "../simd/neon.hpp"
#include "../simd/rotary.hpp"

#if POSENC_ARCH_NEON
namespace posenc {
namespace backend {

/// Rotates all heads of one token with NEON packets. Never throws.
template <class T>
inline void rope_rotate(neon const&, const rope_token<T>& t) noexcept {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    simd::rope_rotate<neon>(t);
  else
    rope_rotate(scalar{}, t);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_NEON
