#pragma once
/// \file
/// The AVX-512 RoPE rotation for 16-bit storage: rope_rotate() overloaded on
/// `backend::avx512 const&`. Eigen::half and Eigen::bfloat16 tokens with contiguous dims run
/// the packet kernel (backend/simd/rotary.hpp) on 16-lane float packets, whose conversions
/// (backend/simd/lowp.hpp) are compute-bound at 8 lanes; float and double keep the avx2
/// kernel (256-bit packets stream the memory-bound float rotation faster on the machine it
/// was tuned on, see backend/avx2/rotary.hpp). Declared only when POSENC_ARCH_AVX512 is 1.

#include <type_traits>

#include <Eigen/Core>

#include "../avx2/rotary.hpp"
#include "../scalar/rotary.hpp"
#include "../simd/avx512.hpp"
#include "../simd/rotary.hpp"

#if POSENC_ARCH_AVX512
namespace posenc {
namespace backend {

/// Rotates all heads of one token: 16-bit storage with AVX-512 packets, everything else as
/// the avx2 backend does. Never throws.
template <class T, class C>
inline void rope_rotate(avx512 const&, const rope_token<T, C>& t) noexcept {
  if constexpr ((std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) &&
                simd::has_storage_io_v<T, avx512> && std::is_same_v<C, rope_real_t<T>>)
    simd::rope_rotate<avx512>(t);
  else
    rope_rotate(avx2{}, t);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_AVX512
