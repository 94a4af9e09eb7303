#pragma once
/// \file
/// The AVX-512 RoPE rotation: rope_rotate() overloaded on `backend::avx512 const&`. The
/// packet kernel (backend/simd/rotary.hpp) runs on 512-bit packets for float, double,
/// Eigen::half and Eigen::bfloat16 in both pairings (docs/backends.md has the A/B runs
/// behind the choice); any other storage type takes the avx2 kernel. Declared only when
/// POSENC_ARCH_AVX512 is 1.

#include <Eigen/Core>
#include <type_traits>

#include "../avx2/rotary.hpp"
#include "../scalar/rotary.hpp"
#include "../simd/avx512.hpp"
#include "../simd/rotary.hpp"

#if POSENC_ARCH_AVX512
namespace posenc {
namespace backend {

/// Rotates all heads of one token (see the file comment for which kernel). Never throws.
template <class T, class C>
inline void rope_rotate(avx512 const&, const rope_token<T, C>& t) noexcept {
  if constexpr (simd::has_storage_io_v<T, avx512> && std::is_same_v<C, rope_real_t<T>>) {
    simd::rope_rotate<avx512>(t);
  } else {
    rope_rotate(avx2{}, t);
  }
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_AVX512
