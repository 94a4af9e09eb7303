#pragma once
/// \file
/// The AVX-512 RoPE rotation: rope_rotate() overloaded on `backend::avx512 const&`. float and double
/// tokens with contiguous dims run the packet kernel (backend/simd/rotary.hpp); anything
/// else falls back to the portable kernel. Declared only when POSENC_ARCH_AVX512 is 1.

#include <type_traits>

#include "../scalar/rotary.hpp"
#include "../simd/avx512.hpp"
#include "../simd/rotary.hpp"

#if POSENC_ARCH_AVX512
namespace posenc {
namespace backend {

/// Rotates all heads of one token with AVX-512 packets. Never throws.
template <class T>
inline void rope_rotate(avx512 const&, const rope_token<T>& t) noexcept {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    simd::rope_rotate<avx512>(t);
  else
    rope_rotate(scalar{}, t);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_AVX512
