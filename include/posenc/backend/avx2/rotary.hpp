#pragma once
/// \file
/// The AVX2 + FMA RoPE rotation: rope_rotate() overloaded on `backend::avx2 const&`. float,
/// double, Eigen::bfloat16 and (with F16C, part of x86-64-v3) Eigen::half tokens with
/// contiguous dims run the packet kernel (backend/simd/rotary.hpp; 16-bit storage widened
/// to float packets, backend/simd/lowp.hpp); anything else falls back to the portable
/// kernel. Declared only when POSENC_ARCH_AVX2 is 1.
///
/// The avx512 tag runs this kernel for float and double (backend/avx512/rotary.hpp passes
/// them here): on the AMD EPYC (Zen 4 class) this was tuned on, 256-bit packets stream the
/// memory-bound rotation faster than 512-bit ones (Q [4096, 32, 128] in place: ~1.0x vs
/// ~0.75x of a plain read-modify-write pass; the 512-bit version also suffers more from
/// buffers that are not 64-byte aligned), and the code still gets AVX-512 encodings under
/// -march=x86-64-v4. Its own 16-lane kernel serves only 16-bit storage, where the
/// conversions, not memory, bound the 8-lane version.

#include <type_traits>

#include "../scalar/rotary.hpp"
#include "../simd/avx2.hpp"
#include "../simd/rotary.hpp"

#if POSENC_ARCH_AVX2
namespace posenc {
namespace backend {

/// Rotates all heads of one token with AVX2 + FMA packets. Never throws.
template <class T, class C>
inline void rope_rotate(avx2 const&, const rope_token<T, C>& t) noexcept {
  if constexpr (simd::has_storage_io_v<T, avx2> && std::is_same_v<C, rope_real_t<T>>)
    simd::rope_rotate<avx2>(t);
  else
    rope_rotate(scalar{}, t);
}

}  // namespace backend
}  // namespace posenc
#endif  // POSENC_ARCH_AVX2
