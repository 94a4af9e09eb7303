#pragma once
/// \file
/// The NEON RoPE rotation: rope_rotate() overloaded on `backend::neon const&`. float,
/// double, Eigen::half and Eigen::bfloat16 tokens with contiguous dims run the packet kernel
/// (backend/simd/rotary.hpp; 16-bit storage widened to float packets,
/// backend/simd/lowp.hpp); anything else falls back to the portable kernel. Declared only
/// when POSENC_ARCH_NEON is 1.

#include <type_traits>

#include "../scalar/rotary.hpp"
#include "../simd/neon.hpp"
#include "../simd/rotary.hpp"

#if POSENC_ARCH_NEON
namespace posenc {
namespace backend {

/// Rotates all heads of one token with NEON packets. Never throws.
template <class T, class C>
inline void rope_rotate(neon const&, const rope_token<T, C>& t) noexcept {
  if constexpr (simd::has_storage_io_v<T, neon> && std::is_same_v<C, rope_real_t<T>>)
    simd::rope_rotate<neon>(t);
  else
    rope_rotate(scalar{}, t);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_NEON
