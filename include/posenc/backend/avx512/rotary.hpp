#pragma once
/// \file
/// The AVX-512 RoPE rotation: rope_rotate() overloaded on `backend::avx512 const&`. The
/// packet kernel (backend/simd/rotary.hpp) runs on 512-bit packets for the half
/// pairing of float and double, and for both pairings of Eigen::half and Eigen::bfloat16
/// (whose conversions, backend/simd/lowp.hpp, are compute-bound at 8 lanes). Float and
/// double with the interleaved pairing keep the avx2 kernel: there 512-bit packets are
/// faster in cache but 0.65x of a read-modify-write pass on a 64 MiB Q, against 0.8-1.0x
/// for 256-bit ones (docs/backends.md). Declared only when POSENC_ARCH_AVX512 is 1.

#include <type_traits>

#include <Eigen/Core>

#include "../avx2/rotary.hpp"
#include "../scalar/rotary.hpp"
#include "../simd/avx512.hpp"
#include "../simd/rotary.hpp"

#if POSENC_ARCH_AVX512
namespace posenc {
namespace backend {

/// Rotates all heads of one token (see the file comment for which packets). Never throws.
template <class T, class C>
inline void rope_rotate(avx512 const&, const rope_token<T, C>& t) noexcept {
  if constexpr (simd::has_storage_io_v<T, avx512> && std::is_same_v<C, rope_real_t<T>>) {
    if (std::is_floating_point_v<T> && t.pair_step != 1)
      rope_rotate(avx2{}, t);  // float/double interleaved: 256-bit streams DRAM faster
    else
      simd::rope_rotate<avx512>(t);
  } else {
    rope_rotate(avx2{}, t);
  }
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_AVX512
