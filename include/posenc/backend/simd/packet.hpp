#pragma once
/// \file
/// The packet layer: a thin, fixed-width wrapper over one SIMD register per (scalar type,
/// architecture tag), on which the vectorised kernels are written once.
///
///     packet<float,  backend::avx2>    8 lanes, __m256       (avx2.hpp)
///     packet<double, backend::avx2>    4 lanes, __m256d
///     packet<float,  backend::avx512> 16 lanes, __m512       (avx512.hpp)
///     packet<double, backend::avx512>  8 lanes, __m512d
///     packet<float,  backend::neon>    4 lanes, float32x4_t  (neon.hpp)
///     packet<double, backend::neon>    2 lanes, float64x2_t
///
/// Each specialisation exists only when the compiler flags enable its instruction set
/// (POSENC_ARCH_*), so every header compiles everywhere. Every packet P offers the same
/// operations, all `noexcept` and never reading or writing outside the lanes asked for:
///
///     P::size                         lanes
///     P::registers                    vector registers of the architecture (16 or 32)
///     P::load(p)  P::broadcast(x)  P::zero()           unaligned load, splat, zeros
///     P::load_partial(p, n)           lanes [0, n) from p, the rest 0; reads only n values
///     a.store(p)  a.store_partial(p, n)                 unaligned store of all / n lanes
///     a.store_lanes(p, first, n)      (float, avx2 / avx512) lanes [first, first + n) to
///                                     p[0, n): a permute and a masked store
///     a + b   a - b   a * b   fmadd(a, b, c) = a*b + c (fused)   fnmadd(a, b, c) = c - a*b
///     swap_pairs(a)                   lanes (0 1)(2 3)... exchanged: [a1 a0 a3 a2 ...]
///     max(a, b)  min(a, b)            lane-wise (NaN handling follows the instruction set)
///     reduce_add(a)  reduce_max(a)    one scalar from all lanes, as a pairwise tree whose
///                                     order is per architecture (sums may differ between
///                                     backends in the last bits)
///     reduce_add_each(v)              (float) lane c = the sum of packet v[c]'s lanes, for
///                                     c < size: size sums at once, each by a fixed tree
///     store_interleaved(dst, a, b)    writes [a0 b0 a1 b1 ...] (2*size values) into a dst
///                                     of the packet's type; for double packets also into a
///                                     float dst (each value rounded once)
///     store_cvt(float* dst, a)        double packet rounded to float, `size` values
///
/// Float packets also have what a lane-wise softmax needs (backend/simd/flash.hpp):
///
///     P::transpose(src, lds, dst, ldd)  a size x size square: dst[c*ldd + r] = src[r*lds + c]
///     less(a, b)  equal(a, b)         ordered comparisons, false where either is NaN: a
///                                     lane mask (vector or k-mask) for select
///     select(m, a, b)                 m ? a : b, lane-wise
///     abs(a)  round_nearest(a)        |a|; nearest integer, ties to even
///     pow2(n)                         2^n for integral n in [-126, 127], built in the
///                                     exponent field; n = -127 gives +0 (the field's zero)
///
/// IEEE single/double arithmetic is the same on every architecture, so a kernel written
/// with the lane-wise operations gives bit-identical results on AVX2, AVX-512 and NEON
/// (fmadd is a true fused multiply-add everywhere); only the reductions' order differs.

#include <type_traits>

#include "../../core/backend.hpp"
#include "../../core/types.hpp"

namespace posenc {
namespace simd {

/// One SIMD register of `T` for architecture tag `Arch`; specialised in avx2.hpp,
/// avx512.hpp and neon.hpp. The primary template is never defined.
template <class T, class Arch>
struct packet;

/// True when packet<T, Arch> is defined in this compilation (the flags enable Arch).
template <class T, class Arch, class = void>
struct has_packet : std::false_type {};
template <class T, class Arch>
struct has_packet<T, Arch, std::void_t<decltype(sizeof(packet<T, Arch>))>> : std::true_type {};
template <class T, class Arch>
inline constexpr bool has_packet_v = has_packet<T, Arch>::value;

}  // namespace simd
}  // namespace posenc
