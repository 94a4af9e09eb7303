#pragma once
/// \file
/// 16-bit storage for packet kernels: loads of Eigen::half / Eigen::bfloat16 memory widened
/// to float packets, and float packets rounded back to 16 bits, through one interface that
/// also serves float and double (as plain packet loads and stores).
///
///     storage_io<T, Arch>::available      true when T has packet loads/stores on Arch
///     storage_io<T, Arch>::packet_type    packet<real_t<T>, Arch>: float for half/bf16
///     load(p)  load_partial(p, n)         P::size values of T (lanes [0, n), the rest 0)
///     store(p, v)  store_partial(p, v, n) rounded to T; store_partial writes only n values
///
/// and row kernels on it, for T = float, half or bfloat16 (has_widening_ops_v):
///
///     widen(src, n, dst)              dst[i] = float(src[i])
///     dot(a, b, n)                    a · float(b), one row
///     dot_rows(a, b, ldb, keys, n, out)       one query row · consecutive key rows, dot's bits
///     dot_block(a, m, b, ldb, keys, n, out)   query rows · a block of key rows
///     dot_block_many(...)             the same bits, tiles of four rows (many rows, AVX-512)
///     dot_block_runs(...)             the same bits, 2 (AVX2) or 4 (AVX-512) runs of keys read
///                                     side by side
///     axpy(alpha, x, n, y)  axpy_rows(...)     y += alpha · float(x), and for a block of rows
///     axpy_rows_many(...)             the same bits, four rows x several packets held
///                                     widened in registers; the same bits as on float inputs
///                                     (a hook between its passes: the caller's prefetches)
///     dot_axpy(a, k, n, alpha, v, y[, ahead])   dot(a, k, n), then axpy(alpha, v, n, y),
///                                     the two rows loaded side by side (and asked for
///                                     `ahead` bytes on); the two calls' bits
///     dot_axpy_rows(a, k, ldk, alpha, v, ldv, keys, n, y, out[, ahead])   dot_axpy over
///                                     runs of key and value rows, a and y in registers
///     dot_group_rows(...)  axpy_group_rows(...)   a GQA group's 2-4 rows against
///                                     consecutive rows read whole, one at a time (AVX-512,
///                                     d 64 and 128); dot_block's and axpy's bits
///
/// Defined for 16-bit types:
///
///     Eigen::half     avx2 (needs F16C: vcvtph2ps / vcvtps2ph, 8 lanes), avx512 (16 lanes),
///                     neon (fcvtl / fcvtn, 4 lanes)
///     Eigen::bfloat16 avx2, avx512, neon (integer shifts and rounding)
///
/// The conversions equal Eigen's own scalar ones bit for bit, so a kernel that widens,
/// computes in float and narrows gives what `T(float expression)` gives:
///
///     half -> float, bf16 -> float     exact (bf16: the 16 bits shifted left by 16)
///     float -> half                    round to nearest even; overflow (>= 65520) to inf,
///                                      subnormals kept; NaN as Eigen's conversion in this
///                                      build: its software path (g++ on x86: Eigen 3.4
///                                      enables F16C only under clang; AArch64 without
///                                      +fp16) gives sign | 0x7e00, its hardware path
///                                      keeps the quieted payload; the packet code follows
///                                      whichever Eigen uses
///     float -> bf16                    round to nearest even on the bits
///                                      (bits + 0x7fff + lsb) >> 16, so overflow rounds to
///                                      inf and subnormals are kept; NaN -> sign | 0x7fc0
///                                      (Eigen's quiet NaN). With AVX512_BF16 (e.g.
///                                      -march=native on Zen 4 or Sapphire Rapids and
///                                      later; POSENC_NATIVE_BF16) one vcvtneps2bf16
///                                      does this rounding, and only vectors holding a
///                                      NaN or a subnormal take the bit arithmetic (the
///                                      instruction reads subnormals as 0 and keeps NaN
///                                      payloads): the same bits either way
///
/// Partial loads and stores never touch memory past the n values asked for (AVX-512 BW/VL
/// masked 16-bit moves when the flags allow, else a small stack buffer).

#include <Eigen/Core>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../../core/types.hpp"
#include "packets.hpp"

/// 1 when float -> bfloat16 packet narrowing uses AVX512_BF16 (see the file comment).
#if POSENC_ARCH_AVX512 && defined(__AVX512BF16__)
#define POSENC_NATIVE_BF16 1
#else
#define POSENC_NATIVE_BF16 0
#endif

namespace posenc {
namespace simd {

/// Converting loads and stores of storage type T as packets on Arch (see the file
/// comment). The primary template: not available.
template <class T, class Arch, class = void>
struct storage_io {
  static constexpr bool available = false;
};

/// float and double: the packet's own loads and stores.
template <class T, class Arch>
struct storage_io<T, Arch, std::enable_if_t<std::is_floating_point_v<T> && has_packet_v<T, Arch>>> {
  static constexpr bool available = true;
  using packet_type = packet<T, Arch>;
  static packet_type load(const T* p) noexcept { return packet_type::load(p); }
  static packet_type load_partial(const T* p, int n) noexcept {
    return packet_type::load_partial(p, n);
  }
  static void store(T* p, packet_type v) noexcept { v.store(p); }
  static void store_partial(T* p, packet_type v, int n) noexcept { v.store_partial(p, n); }
};

/// True when storage_io<T, Arch> has loads and stores.
template <class T, class Arch>
inline constexpr bool has_storage_io_v = storage_io<T, Arch>::available;

#if POSENC_ARCH_AVX2

namespace detail {

/// Lanes [0, n) (n <= 8) of 16-bit values from p, the rest 0; reads only n values.
inline __m128i load_u16_partial(const void* p, int n) noexcept {
#if POSENC_ARCH_AVX512
  return _mm_maskz_loadu_epi16(static_cast<__mmask8>((1u << n) - 1u), p);
#else
  alignas(16) std::uint16_t buf[8] = {};
  std::memcpy(buf, p, static_cast<std::size_t>(n) * 2);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
#endif
}

/// Writes lanes [0, n) (n <= 8) of 16-bit values to p; touches nothing past them.
inline void store_u16_partial(void* p, __m128i v, int n) noexcept {
#if POSENC_ARCH_AVX512
  _mm_mask_storeu_epi16(p, static_cast<__mmask8>((1u << n) - 1u), v);
#else
  alignas(16) std::uint16_t buf[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(buf), v);
  std::memcpy(p, buf, static_cast<std::size_t>(n) * 2);
#endif
}

/// bfloat16 bits (8 x 16) -> float lanes: exact.
inline __m256 bf16_to_f32(__m128i h) noexcept {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#if defined(__F16C__)
/// half bits (8 x 16) -> float lanes: exact.
inline __m256 f16_to_f32(__m128i h) noexcept { return _mm256_cvtph_ps(h); }

/// float lanes -> half bits, as Eigen::half(float): vcvtps2ph rounds to nearest even and
/// overflows to inf; NaN lanes become sign | 0x7e00 where Eigen converts in software (its
/// F16C path, EIGEN_HAS_FP16_C, keeps the quieted payload as vcvtps2ph does).
inline __m128i f32_to_f16(__m256 v) noexcept {
  const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#if defined(EIGEN_HAS_FP16_C)
  return h;
#else
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  // 32-bit all-ones / zero masks saturate to 16-bit ones / zeros
  const __m128i nan16 =
      _mm_packs_epi32(_mm256_castsi256_si128(is_nan), _mm256_extracti128_si256(is_nan, 1));
  const __m128i qnan = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))),
                                    _mm_set1_epi16(0x7e00));
  return _mm_blendv_epi8(h, qnan, nan16);
#endif
}
#endif  // __F16C__

#if POSENC_NATIVE_BF16
/// fpclass categories vcvtneps2bf16 converts unlike Eigen: QNaN, SNaN, subnormal.
inline constexpr int bf16_special = 0x01 | 0x80 | 0x20;
#endif

/// float lanes -> bfloat16 bits, as Eigen::bfloat16(float): round to nearest even on the
/// bits, NaN -> sign | 0x7fc0.
inline __m128i f32_to_bf16(__m256 v) noexcept {
#if POSENC_NATIVE_BF16
  if (_mm256_fpclass_ps_mask(v, bf16_special) == 0)
    return reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(v));
#endif
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(bits, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256 unordered = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  __m256i r = rounded;
  if (_mm256_movemask_ps(unordered) != 0) {  // NaN lanes (rare): Eigen's sign | 0x7fc0
    const __m256i qnan =
        _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7fc0));
    r = _mm256_blendv_epi8(rounded, qnan, _mm256_castps_si256(unordered));
  }
  // every lane is <= 0xffff, so the unsigned saturating pack only narrows
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

}  // namespace detail

#if defined(__F16C__)
/// Eigen::half on AVX2: F16C conversions (exact widening, round-to-nearest-even narrowing,
/// as Eigen's own conversion under F16C).
template <>
struct storage_io<Eigen::half, backend::avx2, void> {
  static constexpr bool available = true;
  using packet_type = packet<float, backend::avx2>;
  static packet_type load(const Eigen::half* p) noexcept {
    return {detail::f16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
  }
  static packet_type load_partial(const Eigen::half* p, int n) noexcept {
    return {detail::f16_to_f32(detail::load_u16_partial(p, n))};
  }
  static void store(Eigen::half* p, packet_type v) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), detail::f32_to_f16(v.v));
  }
  static void store_partial(Eigen::half* p, packet_type v, int n) noexcept {
    detail::store_u16_partial(p, detail::f32_to_f16(v.v), n);
  }
};
#endif  // __F16C__

/// Eigen::bfloat16 on AVX2: integer widening and rounding.
template <>
struct storage_io<Eigen::bfloat16, backend::avx2, void> {
  static constexpr bool available = true;
  using packet_type = packet<float, backend::avx2>;
  static packet_type load(const Eigen::bfloat16* p) noexcept {
    return {detail::bf16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
  }
  static packet_type load_partial(const Eigen::bfloat16* p, int n) noexcept {
    return {detail::bf16_to_f32(detail::load_u16_partial(p, n))};
  }
  static void store(Eigen::bfloat16* p, packet_type v) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), detail::f32_to_bf16(v.v));
  }
  static void store_partial(Eigen::bfloat16* p, packet_type v, int n) noexcept {
    detail::store_u16_partial(p, detail::f32_to_bf16(v.v), n);
  }
};

#endif  // POSENC_ARCH_AVX2

#if POSENC_ARCH_AVX512
// AVX-512 (F/VL/BW): 16 lanes; the all-ones zero-masking forms throughout (see avx512.hpp:
// GCC 12's unmasked ones trip -Wmaybe-uninitialized once inlined).

namespace detail {

/// Lanes [0, n) (n <= 16) of 16-bit values from p, the rest 0; reads only n values.
inline __m256i load_u16_partial16(const void* p, int n) noexcept {
  return _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1u), p);
}

/// Writes lanes [0, n) (n <= 16) of 16-bit values to p; touches nothing past them.
inline void store_u16_partial16(void* p, __m256i v, int n) noexcept {
  _mm256_mask_storeu_epi16(p, static_cast<__mmask16>((1u << n) - 1u), v);
}

/// bfloat16 bits (16 x 16) -> float lanes: exact.
inline __m512 bf16_to_f32(__m256i h) noexcept {
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
}

/// float lanes -> bfloat16 bits, as the AVX2 version: round to nearest even on the bits,
/// NaN -> sign | 0x7fc0, then a truncating narrow (every lane is <= 0xffff).
inline __m256i f32_to_bf16(__m512 v) noexcept {
#if POSENC_NATIVE_BF16
  if (_mm512_fpclass_ps_mask(v, bf16_special) == 0)
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#endif
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i hi = _mm512_maskz_srli_epi32(0xFFFF, bits, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_maskz_srli_epi32(
      0xFFFF, _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (nan != 0)
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)),
                                              _mm512_set1_epi32(0x7fc0)));
  return _mm512_maskz_cvtepi32_epi16(0xFFFF, r);
}

/// half bits (16 x 16) -> float lanes: exact.
inline __m512 f16_to_f32(__m256i h) noexcept { return _mm512_maskz_cvtph_ps(0xFFFF, h); }

/// float lanes -> half bits, as the AVX2 version (NaN as Eigen's conversion in this build).
inline __m256i f32_to_f16(__m512 v) noexcept {
  const __m256i h = _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#if defined(EIGEN_HAS_FP16_C)
  return h;
#else
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (nan == 0) return h;
  return _mm256_mask_mov_epi16(
      h, nan,
      _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
                      _mm256_set1_epi16(0x7e00)));
#endif
}

}  // namespace detail

/// Eigen::half on AVX-512: vcvtph2ps / vcvtps2ph on 16 lanes.
template <>
struct storage_io<Eigen::half, backend::avx512, void> {
  static constexpr bool available = true;
  using packet_type = packet<float, backend::avx512>;
  static packet_type load(const Eigen::half* p) noexcept {
    return {detail::f16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static packet_type load_partial(const Eigen::half* p, int n) noexcept {
    return {detail::f16_to_f32(detail::load_u16_partial16(p, n))};
  }
  static void store(Eigen::half* p, packet_type v) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), detail::f32_to_f16(v.v));
  }
  static void store_partial(Eigen::half* p, packet_type v, int n) noexcept {
    detail::store_u16_partial16(p, detail::f32_to_f16(v.v), n);
  }
};

/// Eigen::bfloat16 on AVX-512: integer widening, and rounding (vcvtneps2bf16 where
/// POSENC_NATIVE_BF16) on 16 lanes.
template <>
struct storage_io<Eigen::bfloat16, backend::avx512, void> {
  static constexpr bool available = true;
  using packet_type = packet<float, backend::avx512>;
  static packet_type load(const Eigen::bfloat16* p) noexcept {
    return {detail::bf16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static packet_type load_partial(const Eigen::bfloat16* p, int n) noexcept {
    return {detail::bf16_to_f32(detail::load_u16_partial16(p, n))};
  }
  static void store(Eigen::bfloat16* p, packet_type v) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), detail::f32_to_bf16(v.v));
  }
  static void store_partial(Eigen::bfloat16* p, packet_type v, int n) noexcept {
    detail::store_u16_partial16(p, detail::f32_to_bf16(v.v), n);
  }
};

#endif  // POSENC_ARCH_AVX512

#if POSENC_ARCH_NEON

namespace detail {

/// Lanes [0, n) (n <= 4) of 16-bit values from p, the rest 0; reads only n values.
inline uint16x4_t load_u16_partial(const void* p, int n) noexcept {
  std::uint16_t buf[4] = {0, 0, 0, 0};
  std::memcpy(buf, p, static_cast<std::size_t>(n) * 2);
  return vld1_u16(buf);
}

/// Writes lanes [0, n) (n <= 4) of 16-bit values to p; touches nothing past them.
inline void store_u16_partial(void* p, uint16x4_t v, int n) noexcept {
  std::uint16_t buf[4];
  vst1_u16(buf, v);
  std::memcpy(p, buf, static_cast<std::size_t>(n) * 2);
}

/// half bits -> float lanes: exact.
inline float32x4_t f16_to_f32(uint16x4_t h) noexcept {
  return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

/// float lanes -> half bits, as Eigen::half(float): round to nearest even (the FPCR
/// default), overflow to inf; NaN -> sign | 0x7e00 unless Eigen itself converts with the
/// hardware (+fp16), which keeps the quieted payload as fcvtn does.
inline uint16x4_t f32_to_f16(float32x4_t v) noexcept {
  const uint16x4_t h = vreinterpret_u16_f16(vcvt_f16_f32(v));
#if defined(EIGEN_HAS_ARM64_FP16_SCALAR_ARITHMETIC)
  return h;
#else
  const uint16x4_t is_num = vmovn_u32(vceqq_f32(v, v));
  const uint16x4_t qnan = vorr_u16(vand_u16(h, vdup_n_u16(0x8000)), vdup_n_u16(0x7e00));
  return vbsl_u16(is_num, h, qnan);
#endif
}

/// bfloat16 bits -> float lanes: exact.
inline float32x4_t bf16_to_f32(uint16x4_t h) noexcept {
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

/// float lanes -> bfloat16 bits, as Eigen::bfloat16(float) (see the file comment).
inline uint16x4_t f32_to_bf16(float32x4_t v) noexcept {
  const uint32x4_t bits = vreinterpretq_u32_f32(v);
  const uint32x4_t hi = vshrq_n_u32(bits, 16);
  const uint32x4_t lsb = vandq_u32(hi, vdupq_n_u32(1));
  const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(vaddq_u32(bits, vdupq_n_u32(0x7fff)), lsb), 16);
  const uint32x4_t qnan = vorrq_u32(vandq_u32(hi, vdupq_n_u32(0x8000)), vdupq_n_u32(0x7fc0));
  return vmovn_u32(vbslq_u32(vceqq_f32(v, v), rounded, qnan));
}

}  // namespace detail

/// Eigen::half on NEON: fcvtl / fcvtn.
template <>
struct storage_io<Eigen::half, backend::neon, void> {
  static constexpr bool available = true;
  using packet_type = packet<float, backend::neon>;
  static packet_type load(const Eigen::half* p) noexcept {
    return {detail::f16_to_f32(vld1_u16(reinterpret_cast<const std::uint16_t*>(p)))};
  }
  static packet_type load_partial(const Eigen::half* p, int n) noexcept {
    return {detail::f16_to_f32(detail::load_u16_partial(p, n))};
  }
  static void store(Eigen::half* p, packet_type v) noexcept {
    vst1_u16(reinterpret_cast<std::uint16_t*>(p), detail::f32_to_f16(v.v));
  }
  static void store_partial(Eigen::half* p, packet_type v, int n) noexcept {
    detail::store_u16_partial(p, detail::f32_to_f16(v.v), n);
  }
};

/// Eigen::bfloat16 on NEON: integer widening and rounding.
template <>
struct storage_io<Eigen::bfloat16, backend::neon, void> {
  static constexpr bool available = true;
  using packet_type = packet<float, backend::neon>;
  static packet_type load(const Eigen::bfloat16* p) noexcept {
    return {detail::bf16_to_f32(vld1_u16(reinterpret_cast<const std::uint16_t*>(p)))};
  }
  static packet_type load_partial(const Eigen::bfloat16* p, int n) noexcept {
    return {detail::bf16_to_f32(detail::load_u16_partial(p, n))};
  }
  static void store(Eigen::bfloat16* p, packet_type v) noexcept {
    vst1_u16(reinterpret_cast<std::uint16_t*>(p), detail::f32_to_bf16(v.v));
  }
  static void store_partial(Eigen::bfloat16* p, packet_type v, int n) noexcept {
    detail::store_u16_partial(p, detail::f32_to_bf16(v.v), n);
  }
};

#endif  // POSENC_ARCH_NEON

/// dst[i] = float(src[i]) for i < n (exact): packets through storage_io<T, Arch> where it
/// has them (T = float, half, bfloat16), else one value at a time (e.g. Eigen::half under
/// g++ on plain x86-64, where Eigen converts in software).
template <class Arch, class T>
inline void widen(const T* src, Index n, float* dst) noexcept {
  if constexpr (has_storage_io_v<T, Arch> && std::is_same_v<real_t<T>, float>) {
    using IO = storage_io<T, Arch>;
    constexpr Index W = IO::packet_type::size;
    Index i = 0;
    for (; i + W <= n; i += W) IO::load(src + i).store(dst + i);
    if (i < n)
      IO::load_partial(src + i, static_cast<int>(n - i))
          .store_partial(dst + i, static_cast<int>(n - i));
  } else {
    for (Index i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  }
}

/// True when dot and axpy below take T as stored: float packets on Arch and a converting
/// load of T (float itself, half, bfloat16).
template <class Arch, class T, class = void>
struct has_widening_ops : std::false_type {};
template <class Arch, class T>
struct has_widening_ops<Arch, T, std::enable_if_t<has_storage_io_v<T, Arch>>>
    : std::is_same<typename storage_io<T, Arch>::packet_type, packet<float, Arch>> {};
template <class Arch, class T>
inline constexpr bool has_widening_ops_v = has_widening_ops<Arch, T>::value;

/// sum_i a[i] * float(b[i]), i < n: each b packet widened in a register as it is loaded
/// (no converted copy). Four accumulators over whole groups of 4 packets, then single
/// packets and the partial tail into the first, summed as (a0 + a1) + (a2 + a3): the order
/// depends on n and the packet width only, not on T, so 16-bit b gives exactly the float
/// result of its widened values. Needs has_widening_ops_v<Arch, T>.
template <class Arch, class T>
inline float dot(const float* a, const T* b, Index n) noexcept {
  using IO = storage_io<T, Arch>;
  using P = packet<float, Arch>;
  constexpr Index W = P::size;
  P a0 = P::zero(), a1 = P::zero(), a2 = P::zero(), a3 = P::zero();
  Index i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 = fmadd(P::load(a + i), IO::load(b + i), a0);
    a1 = fmadd(P::load(a + i + W), IO::load(b + i + W), a1);
    a2 = fmadd(P::load(a + i + 2 * W), IO::load(b + i + 2 * W), a2);
    a3 = fmadd(P::load(a + i + 3 * W), IO::load(b + i + 3 * W), a3);
  }
  for (; i + W <= n; i += W) a0 = fmadd(P::load(a + i), IO::load(b + i), a0);
  if (i < n) {
    const int r = static_cast<int>(n - i);
    a0 = fmadd(P::load_partial(a + i, r), IO::load_partial(b + i, r), a0);
  }
  return reduce_add((a0 + a1) + (a2 + a3));
}

namespace detail {

/// f(std::integral_constant<int, 0>{}), ..., f(...<N - 1>{}): a loop unrolled at compile
/// time, so that arrays of packets indexed by it stay in registers (GCC keeps a W-key loop
/// of W x 8 FMAs rolled, and the accumulators in memory). Forced inline: left to GCC's
/// inliner, the expansion is a call in some translation units (dot_block 2.5x slower in a
/// small test program on Zen 4, the accumulators then in memory).
template <class F, int... I>
POSENC_INLINE void unrolled(F&& f, std::integer_sequence<int, I...>) noexcept {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
POSENC_INLINE void unrolled(F&& f) noexcept {
  unrolled(f, std::make_integer_sequence<int, N>{});
}

/// dot_block for every key of a full block (Full: keys == W, rows ldb apart) or for
/// `keys` < W of them (the missing keys repeat the last one; their lanes are not stored).
template <class Arch, class T, bool Full>
inline void dot_block_rows(const float* const* a, int m, const T* b, Index ldb, int keys, Index n,
                           float* const* out) noexcept {
  using IO = storage_io<T, Arch>;
  using P = packet<float, Arch>;
  constexpr int W = P::size;
  // query packets held per pass over the block's keys, with the W accumulators and one
  // key packet: 4 of 32 registers, 2 of 16 (Zen 4: 8 and 4 were 5-20 % slower, the row
  // pointers then spilling; docs/benchmarks-history.md, issue 27)
  constexpr int Q = P::registers >= 32 ? 4 : 2;
  constexpr std::size_t lanes = W, held = Q;  // array bounds are unsigned
  const T* rows[lanes];                       // key c's row; the missing keys repeat the last one
  for (int c = 0; c < W; ++c) rows[c] = b + (Full ? c : std::min(c, keys - 1)) * ldb;
  for (int i = 0; i < m; ++i) {
    const float* q = a[i];
    P acc[lanes];
    unrolled<W>([&](auto c) { acc[c] = P::zero(); });
    Index k = 0;
    for (; k + Q * W <= n; k += Q * W) {
      P x[held];
      unrolled<Q>([&](auto j) { x[j] = P::load(q + k + j * W); });
      unrolled<W>([&](auto c) {
        const T* r = rows[c] + k;
        unrolled<Q>([&](auto j) { acc[c] = fmadd(x[j], IO::load(r + j * W), acc[c]); });
      });
    }
    for (; k + W <= n; k += W) {
      const P x = P::load(q + k);
      unrolled<W>([&](auto c) { acc[c] = fmadd(x, IO::load(rows[c] + k), acc[c]); });
    }
    if (k < n) {
      const int rest = static_cast<int>(n - k);
      const P x = P::load_partial(q + k, rest);
      unrolled<W>([&](auto c) { acc[c] = fmadd(x, IO::load_partial(rows[c] + k, rest), acc[c]); });
    }
    const P sums = reduce_add_each(acc);
    if (Full)
      sums.store(out[i]);
    else
      sums.store_partial(out[i], keys);
  }
}

/// dot_block for R > 1 query rows at once against C = W / R keys (keys <= C of them, the
/// missing ones repeating the last, their lanes not stored), into out[i] + c0: each key
/// packet is loaded (and widened) once for the R rows, and each query packet once for the
/// C keys, so a step of R + C loads feeds R * C fused multiply-adds where a row at a
/// time loads a key packet per FMA (and, for 16-bit keys, widens it R times). Each dot
/// still has its own accumulator fed in increasing k, summed by reduce_add_each: the
/// same bits as dot_block_rows.
template <class Arch, class T, int R>
inline void dot_tile(const float* const* a, const T* b, Index ldb, int keys, Index n,
                     float* const* out, int c0) noexcept {
  using IO = storage_io<T, Arch>;
  using P = packet<float, Arch>;
  constexpr int W = P::size, C = W / R;
  static_assert(R > 1 && W % R == 0, "R divides the packet width");
  constexpr std::size_t lanes = W, rows_held = R, keys_held = C;  // array bounds are unsigned
  const float* q[rows_held];
  unrolled<R>([&](auto i) { q[i] = a[i]; });
  const T* rows[keys_held];
  unrolled<C>([&](auto c) { rows[c] = b + std::min<int>(c, keys - 1) * ldb; });
  P acc[lanes];
  unrolled<W>([&](auto l) { acc[l] = P::zero(); });
  Index k = 0;
  for (; k + W <= n; k += W) {
    P x[rows_held];
    unrolled<R>([&](auto i) { x[i] = P::load(q[i] + k); });
    unrolled<C>([&](auto c) {
      const P y = IO::load(rows[c] + k);
      unrolled<R>([&](auto i) { acc[i * C + c] = fmadd(x[i], y, acc[i * C + c]); });
    });
  }
  if (k < n) {
    const int rest = static_cast<int>(n - k);
    P x[rows_held];
    unrolled<R>([&](auto i) { x[i] = P::load_partial(q[i] + k, rest); });
    unrolled<C>([&](auto c) {
      const P y = IO::load_partial(rows[c] + k, rest);
      unrolled<R>([&](auto i) { acc[i * C + c] = fmadd(x[i], y, acc[i * C + c]); });
    });
  }
  const P sums = reduce_add_each(acc);  // lane i * C + c: row i with key c
  unrolled<R>([&](auto i) { sums.store_lanes(out[i] + c0, i * C, keys); });
}

/// The query rows [0, m) against keys [0, keys) in tiles of R rows by W / R keys.
template <class Arch, class T, int R>
inline int dot_tiles(const float* const* a, int m, const T* b, Index ldb, int keys, Index n,
                     float* const* out) noexcept {
  constexpr int C = packet<float, Arch>::size / R;
  int i = 0;
  for (; i + R <= m; i += R)
    for (int c0 = 0; c0 < keys; c0 += C)
      dot_tile<Arch, T, R>(a + i, b + c0 * ldb, ldb, std::min(C, keys - c0), n, out + i, c0);
  return i;
}

#if POSENC_ARCH_AVX512
/// in_register for a 512-bit packet (any of the 32 registers).
POSENC_INLINE void in_register(__m512& v) noexcept {
#if defined(__GNUC__)
  __asm__("" : "+v"(v));
#else
  static_cast<void>(v);
#endif
}
#endif

#if POSENC_ARCH_AVX2
/// Ties v to a register here. GCC folds a packet that several FMAs share back into each of
/// them as a memory operand, a load per FMA: on Zen 3, whose L1 gives about one 256-bit
/// load per cycle against two FMAs, a tile that loads each packet once then runs no
/// faster than a row at a time.
POSENC_INLINE void in_register(__m256& v) noexcept {
#if defined(__GNUC__)
  __asm__("" : "+x"(v));
#else
  static_cast<void>(v);
#endif
}
#endif  // POSENC_ARCH_AVX2

#if POSENC_ARCH_AVX2 || POSENC_ARCH_AVX512
/// in_register for each of a kernel step's packets (values it holds by copy).
template <class... V>
POSENC_INLINE void in_registers(V&... v) noexcept {
  (in_register(v), ...);
}
#endif

#if POSENC_ARCH_AVX2
/// The dots of four query rows with 8 key rows key(0) .. key(7) on AVX2 (a GQA group of
/// four, or four queries), as tiles of the 4 rows by 2 keys (key(2t), key(2t + 1)) of 8
/// accumulators: each step loads the 4 query packets and the 2 key packets once for its 8
/// FMAs (dot_block_rows, with 16 registers, loads a key packet per FMA: 18 loads for 16). Each
/// dot keeps its own accumulator fed in increasing k; a tile's 8 are summed by
/// reduce_add_each in registers (lane 2i + c), and the tiles' sums are transposed as 64-bit
/// pairs: rows[i] lane c holds q_i · key(c). Only the first `tiles` tiles are computed (the
/// other lanes are zero). Measured on Zen 3 with the rows in L1: 0.54-0.70 of the FMA peak
/// against 0.27-0.45 (docs/benchmarks.md). Forced inline: GCC kept it a call, the rows
/// then passed through memory. on_step(s, steps) before each of the 4 tiles' steps over the
/// packets (s = t · per_tile + packet; a no-op for the callers without a hook).
template <class T, class Key, class Step>
POSENC_INLINE void dot_tiles4_avx2(const float* const* a, Key&& key, int tiles, Index n,
                                   __m256 (&rows)[4], Step&& on_step) noexcept {
  using IO = storage_io<T, backend::avx2>;
  using P = packet<float, backend::avx2>;
  const float *q0 = a[0], *q1 = a[1], *q2 = a[2], *q3 = a[3];
  const Index whole = n / 8 * 8;
  const int rest = static_cast<int>(n - whole);
  const int per_tile = static_cast<int>(whole / 8) + (rest > 0 ? 1 : 0), steps = 4 * per_tile;
  __m256 sums[4];
  for (int t = 0; t < 4; ++t) {
    if (t >= tiles) {
      sums[t] = _mm256_setzero_ps();
      continue;
    }
    const T* k0 = key(2 * t);
    const T* k1 = key(2 * t + 1);
    P s00 = P::zero(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00;
    const auto step = [&](P x0, P x1, P x2, P x3, P y0, P y1) POSENC_LAMBDA_INLINE {
      in_registers(x0.v, x1.v, x2.v, x3.v, y0.v, y1.v);
      s00 = fmadd(x0, y0, s00);
      s10 = fmadd(x1, y0, s10);
      s20 = fmadd(x2, y0, s20);
      s30 = fmadd(x3, y0, s30);
      s01 = fmadd(x0, y1, s01);
      s11 = fmadd(x1, y1, s11);
      s21 = fmadd(x2, y1, s21);
      s31 = fmadd(x3, y1, s31);
    };
    for (Index i = 0; i < whole; i += 8) {
      on_step(t * per_tile + static_cast<int>(i / 8), steps);
      step(P::load(q0 + i), P::load(q1 + i), P::load(q2 + i), P::load(q3 + i), IO::load(k0 + i),
           IO::load(k1 + i));
    }
    if (rest > 0) {
      on_step(t * per_tile + per_tile - 1, steps);
      step(P::load_partial(q0 + whole, rest), P::load_partial(q1 + whole, rest),
           P::load_partial(q2 + whole, rest), P::load_partial(q3 + whole, rest),
           IO::load_partial(k0 + whole, rest), IO::load_partial(k1 + whole, rest));
    }
    sums[t] = reduce_add_each(s00, s01, s10, s11, s20, s21, s30, s31).v;
  }
  // 64-bit pair i of sums[t] is row i's keys 2t, 2t + 1: a 4 x 4 transpose of pairs
  const __m256d p0 = _mm256_castps_pd(sums[0]), p1 = _mm256_castps_pd(sums[1]),
                p2 = _mm256_castps_pd(sums[2]), p3 = _mm256_castps_pd(sums[3]);
  const __m256d lo01 = _mm256_unpacklo_pd(p0, p1), hi01 = _mm256_unpackhi_pd(p0, p1),
                lo23 = _mm256_unpacklo_pd(p2, p3), hi23 = _mm256_unpackhi_pd(p2, p3);
  rows[0] = _mm256_castpd_ps(_mm256_permute2f128_pd(lo01, lo23, 0x20));
  rows[1] = _mm256_castpd_ps(_mm256_permute2f128_pd(hi01, hi23, 0x20));
  rows[2] = _mm256_castpd_ps(_mm256_permute2f128_pd(lo01, lo23, 0x31));
  rows[3] = _mm256_castpd_ps(_mm256_permute2f128_pd(hi01, hi23, 0x31));
}

/// dot_block for four query rows on AVX2 (dot_tiles4_avx2 over keys 2t, 2t + 1), the same
/// bits; a block ends in 4 stores instead of dot_tile's masked stores per tile. Full:
/// keys == 8; else keys < 8, the missing keys repeating the last, not stored.
template <class T, bool Full>
inline void dot_block4_avx2(const float* const* a, const T* b, Index ldb, int keys, Index n,
                            float* const* out) noexcept {
  const auto key = [&](int c) { return b + (Full ? c : std::min(c, keys - 1)) * ldb; };
  __m256 rows[4];
  dot_tiles4_avx2<T>(a, key, Full ? 4 : (keys + 1) / 2, n, rows, [](int, int) noexcept {});
  for (int i = 0; i < 4; ++i) {
    if (Full)
      _mm256_storeu_ps(out[i], rows[i]);
    else
      packet<float, backend::avx2>{rows[i]}.store_partial(out[i], keys);
  }
}

/// dot_block4_avx2 over two runs of 4 keys, rows b + t · ldb and b + (run_rows + t) · ldb
/// (t < 4): tile t pairs key t of each run, so that the rows come as two ascending streams.
/// The same FMAs per dot: the same bits. Run r's scores go to out[i] + r · run_rows.
/// step(s, steps) before each of the 4 tiles' steps over the packets.
template <class T, class Step>
inline void dot_block4_two_runs_avx2(const float* const* a, const T* b, Index ldb, Index run_rows,
                                     Index n, float* const* out, Step&& step) noexcept {
  const T* b1 = b + run_rows * ldb;
  const auto key = [&](int c) { return (c % 2 == 0 ? b : b1) + c / 2 * ldb; };
  __m256 rows[4];
  dot_tiles4_avx2<T>(a, key, 4, n, rows, step);
  const __m256i runs = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);  // run 0's lanes, run 1's
  for (int i = 0; i < 4; ++i) {
    const __m256 r = _mm256_permutevar8x32_ps(rows[i], runs);
    _mm_storeu_ps(out[i], _mm256_castps256_ps128(r));
    _mm_storeu_ps(out[i] + run_rows, _mm256_extractf128_ps(r, 1));
  }
}
#endif  // POSENC_ARCH_AVX2

#if POSENC_ARCH_AVX512
/// The dots of four query rows with four runs of 4 keys on AVX-512, key t of run r at
/// b + (r · run_rows + t) · ldb, as 4 tiles of the 4 rows by 4 keys (tile t: key t of each
/// run, so that each tile reads four rows far apart and the runs come as four ascending
/// streams). Each dot has dot_tile's accumulator, fed in increasing k, and its lane of
/// reduce_add_each: the same bits as dot_block. A tile's sums (lane 4i + r: row i, run r)
/// are transposed in 128-bit quarters, so that row i's 4 keys of run r are one store to
/// out[i] + r · run_rows. step(s, steps) before each of the 4 tiles' passes over the
/// packets (s = t · per_tile + packet). Tie: each step's query and key packets loaded once
/// into registers for their 16 FMAs. Left to itself GCC hoists the query packets of every
/// step out of the loop, spills them, and folds each key packet into its four FMAs as
/// memory operands (20 loads for 16 FMAs): with K in the caches the kernel then ran at
/// about half the speed (Zen 5, 6.0-7.8 against 11-14 ns a key), but over rows coming
/// from memory the untied form read as fast or faster (one query's GQA at 64k keys:
/// 0.84-0.95x tied), so the caller ties where the rows are in the caches
/// (dot_block_runs; docs/benchmarks.md). The tie takes copies passed by value: tied in
/// place, as elements of the step's arrays, the packets kept a home in memory, and GCC
/// stored all 8 of them to the stack at every step, which on Zen 4 (whose store path is
/// 256 bits wide) held the tied kernel to about a third of the FMA peak (a profile); by
/// value a GQA group's 4 and 8 queries ran 1.23-1.49x there (docs/benchmarks.md).
template <bool Tie, class T, class Step>
inline void dot_block4_four_runs_avx512(const float* const* a, const T* b, Index ldb,
                                        Index run_rows, Index n, float* const* out,
                                        Step&& step) noexcept {
  using IO = storage_io<T, backend::avx512>;
  using P = packet<float, backend::avx512>;
  constexpr Index W = P::size;
  const Index whole = n / W * W;
  const int rest = static_cast<int>(n - whole);
  const int per_tile = static_cast<int>(whole / W) + (rest > 0 ? 1 : 0), steps = 4 * per_tile;
  __m512 sums[4];
  for (int t = 0; t < 4; ++t) {
    const T* k[4];
    for (int r = 0; r < 4; ++r) k[r] = b + (r * run_rows + t) * ldb;
    P acc[16];
    unrolled<16>([&](auto l) { acc[l] = P::zero(); });
    // forced inline all the way down: where GCC kept the inner lambdas calls, the
    // accumulators went through memory on every step
    const auto add = [&](const P(&x)[4], const P(&y)[4]) POSENC_LAMBDA_INLINE {
      unrolled<4>([&](auto i) POSENC_LAMBDA_INLINE {
        unrolled<4>([&](auto r) POSENC_LAMBDA_INLINE {
          acc[i * 4 + r] = fmadd(x[i], y[r], acc[i * 4 + r]);
        });
      });
    };
    // the tie on copies passed by value: on the arrays' elements it kept them in memory,
    // and GCC stored the 8 packets of every step to the stack
    const auto tied = [&](P x0, P x1, P x2, P x3, P y0, P y1, P y2, P y3) POSENC_LAMBDA_INLINE {
      in_registers(x0.v, x1.v, x2.v, x3.v, y0.v, y1.v, y2.v, y3.v);
      const P x[4] = {x0, x1, x2, x3}, y[4] = {y0, y1, y2, y3};
      add(x, y);
    };
    for (Index i = 0; i < whole; i += W) {
      step(t * per_tile + static_cast<int>(i / W), steps);
      if constexpr (Tie) {
        tied(P::load(a[0] + i), P::load(a[1] + i), P::load(a[2] + i), P::load(a[3] + i),
             IO::load(k[0] + i), IO::load(k[1] + i), IO::load(k[2] + i), IO::load(k[3] + i));
      } else {
        P x[4], y[4];
        unrolled<4>([&](auto q) { x[q] = P::load(a[q] + i); });
        unrolled<4>([&](auto r) { y[r] = IO::load(k[r] + i); });
        add(x, y);
      }
    }
    if (rest > 0) {
      step(t * per_tile + per_tile - 1, steps);
      P x[4], y[4];
      unrolled<4>([&](auto q) { x[q] = P::load_partial(a[q] + whole, rest); });
      unrolled<4>([&](auto r) { y[r] = IO::load_partial(k[r] + whole, rest); });
      add(x, y);
    }
    sums[t] = reduce_add_each(acc).v;
  }
  // quarter i of sums[t] holds row i's keys t of runs 0..3: a 4 x 4 transpose per quarter
  // (the maskz forms: GCC 12 warns on the plain ones' undefined passthrough)
  const auto lo = [](__m512 x, __m512 y) { return _mm512_maskz_unpacklo_ps(0xFFFF, x, y); };
  const auto hi = [](__m512 x, __m512 y) { return _mm512_maskz_unpackhi_ps(0xFFFF, x, y); };
  const auto lo2 = [](__m512 x, __m512 y) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpacklo_pd(0xFF, _mm512_castps_pd(x), _mm512_castps_pd(y)));
  };
  const auto hi2 = [](__m512 x, __m512 y) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpackhi_pd(0xFF, _mm512_castps_pd(x), _mm512_castps_pd(y)));
  };
  const __m512 t0 = lo(sums[0], sums[1]), t1 = hi(sums[0], sums[1]), t2 = lo(sums[2], sums[3]),
               t3 = hi(sums[2], sums[3]);
  const __m512 run[4] = {lo2(t0, t2), hi2(t0, t2), lo2(t1, t3), hi2(t1, t3)};
  unrolled<4>([&](auto r) {
    _mm_storeu_ps(out[0] + r * run_rows, _mm512_maskz_extractf32x4_ps(0xF, run[r], 0));
    _mm_storeu_ps(out[1] + r * run_rows, _mm512_maskz_extractf32x4_ps(0xF, run[r], 1));
    _mm_storeu_ps(out[2] + r * run_rows, _mm512_maskz_extractf32x4_ps(0xF, run[r], 2));
    _mm_storeu_ps(out[3] + r * run_rows, _mm512_maskz_extractf32x4_ps(0xF, run[r], 3));
  });
}
#endif  // POSENC_ARCH_AVX512

}  // namespace detail

/// out[i][c] = sum_k a[i][k] * float(b[c * ldb + k]), k < n, for query rows i < m and
/// key rows c < keys <= W (the packet width): a block of keys against the query rows that
/// share them (a GQA group's heads, several queries), each b packet widened in a register
/// as it is loaded (no converted copy). Every dot has one accumulator packet, fed the
/// packets of k in increasing order (a partial last packet zero-filled), and the W
/// accumulators of a row are summed lane-wise at once (reduce_add_each): a fixed order per
/// architecture that does not depend on T, on where the key sits in a block or on how many
/// keys the block has, so 16-bit b gives exactly the float result of its widened values
/// and a key gives the same dot alone (keys = 1, ldb = 0) as in any block. A block's W
/// independent accumulators keep the FMA units busy, and each query packet is loaded once
/// per pass over the keys (the query rows stay in L1 across blocks). Writes out[i][c] for
/// c < keys only. Needs has_widening_ops_v<Arch, T>.
template <class Arch, class T>
inline void dot_block(const float* const* a, int m, const T* b, Index ldb, int keys, Index n,
                      float* const* out) noexcept {
  if (keys == packet<float, Arch>::size)
    detail::dot_block_rows<Arch, T, true>(a, m, b, ldb, keys, n, out);
  else
    detail::dot_block_rows<Arch, T, false>(a, m, b, ldb, keys, n, out);
}

/// dot_block for many query rows (several queries of a GQA group), the same bits: rows
/// four at a time against W / 4 keys at once (detail::dot_tile; on AVX2 dot_block4_avx2,
/// which holds its tiles in registers), where the packet holds at least two keys per row,
/// the rest by dot_block. Each key packet then feeds four rows from one load, but a tile
/// asks for fewer key rows at once than dot_block's pass over a whole block, which costs
/// where K comes from memory and the hardware does not follow the rows (a token's heads
/// side by side): the caller chooses by shape (kv_row_source::many_rows,
/// docs/benchmarks.md).
template <class Arch, class T>
inline void dot_block_many(const float* const* a, int m, const T* b, Index ldb, int keys, Index n,
                           float* const* out) noexcept {
  constexpr int W = packet<float, Arch>::size;
  constexpr bool avx2 = std::is_same_v<Arch, backend::avx2>;
  int i = 0;
#if POSENC_ARCH_AVX2
  if constexpr (avx2)
    for (; i + 4 <= m; i += 4) {
      if (keys == W)
        detail::dot_block4_avx2<T, true>(a + i, b, ldb, keys, n, out + i);
      else
        detail::dot_block4_avx2<T, false>(a + i, b, ldb, keys, n, out + i);
    }
#endif
  if constexpr (!avx2 && W % 4 == 0 && W / 4 >= 2)
    i = detail::dot_tiles<Arch, T, 4>(a, m, b, ldb, keys, n, out);
  if (i < m) dot_block<Arch>(a + i, m - i, b, ldb, keys, n, out + i);
}

/// How many runs of keys dot_block_runs reads side by side on Arch: 2 on AVX2 (register
/// tiles of 4 rows by 2 keys), 4 on AVX-512 (4 rows by 4 keys); 0 where it has no kernel.
template <class Arch>
inline constexpr int dot_runs_v = (POSENC_ARCH_AVX512 != 0 && std::is_same_v<Arch, backend::avx512>)
                                      ? 4
                                  : (POSENC_ARCH_AVX2 != 0 && std::is_same_v<Arch, backend::avx2>)
                                      ? 2
                                      : 0;

/// dot_block_many for m rows (a multiple of 4) against R = dot_runs_v<Arch> runs of W / R
/// key rows each, key c of run r at b + (r · run_rows + c) · ldb, its score to
/// out[i][r · run_rows + c] (c < W / R): every tile takes a row of each run, so the runs
/// are read side by side, R ascending streams where each run's rows lie back to back
/// (a 256-key tile's dots as runs 256 / R keys apart). Each dot has the FMAs and the sum
/// of dot_block: the same bits. step(s, steps) is called once for each s < steps, in
/// order, during the first four rows' work: on AVX-512 before each step of the kernel
/// over the packets, key c of every run taking steps [c · steps / (W / R), (c + 1) · steps
/// / (W / R)) in order of its packets (AVX2 and AVX-512 alike), so that a caller can ask
/// for memory in step with the reads (decode asks for each key's value row a share at a
/// time beside its key row: backend/scalar/flash.hpp). Needs
/// dot_runs_v<Arch> > 0 and has_widening_ops_v<Arch, T>.
template <class Arch, class T, class Step>
inline void dot_block_runs(const float* const* a, int m, const T* b, Index ldb, Index run_rows,
                           Index n, float* const* out, Step&& step) noexcept {
  static_assert(dot_runs_v<Arch> > 0, "dot_block_runs: AVX2 and AVX-512 only");
  assert(m % 4 == 0);  // the caller's precondition (kv_row_source::dot_runs): no row left out
  // the kernel's four rows at a time, the hook during the first four's work only
  const auto by_fours = [&](auto&& kernel) {
    for (int i = 0; i + 4 <= m; i += 4) {
      if (i == 0)
        kernel(a, out, step);
      else
        kernel(a + i, out + i, [](int, int) noexcept {});
    }
  };
#if POSENC_ARCH_AVX512
  if constexpr (std::is_same_v<Arch, backend::avx512>) {
    // the first four rows read the keys from wherever they are, the others from the
    // caches: those tie their packets to registers (several queries of a GQA group)
    for (int i = 0; i + 4 <= m; i += 4) {
      if (i == 0)
        detail::dot_block4_four_runs_avx512<false>(a, b, ldb, run_rows, n, out, step);
      else
        detail::dot_block4_four_runs_avx512<true>(a + i, b, ldb, run_rows, n, out + i,
                                                  [](int, int) noexcept {});
    }
    return;
  }
#endif
#if POSENC_ARCH_AVX2
  if constexpr (std::is_same_v<Arch, backend::avx2>)
    return by_fours([&](const float* const* a4, float* const* out4, auto&& step4) {
      detail::dot_block4_two_runs_avx2(a4, b, ldb, run_rows, n, out4, step4);
    });
#endif
  static_cast<void>(by_fours);
  static_cast<void>(a), static_cast<void>(m), static_cast<void>(b), static_cast<void>(ldb);
  static_cast<void>(run_rows), static_cast<void>(n), static_cast<void>(out);
  static_cast<void>(step);
}

/// dot_block_runs without a step hook.
template <class Arch, class T>
inline void dot_block_runs(const float* const* a, int m, const T* b, Index ldb, Index run_rows,
                           Index n, float* const* out) noexcept {
  dot_block_runs<Arch>(a, m, b, ldb, run_rows, n, out, [](int, int) noexcept {});
}

namespace detail {

/// dot_rows with a's 4 * G packets (n = 4 * G * W) held in registers over the keys.
template <class Arch, class T, int G>
inline void dot_rows_held(const float* a, const T* b, Index ldb, int keys, float* out) noexcept {
  using IO = storage_io<T, Arch>;
  using P = packet<float, Arch>;
  constexpr int W = P::size;
  constexpr std::size_t held = 4 * G;  // array bounds are unsigned
  P x[held];
  unrolled<4 * G>([&](auto i) { x[i] = P::load(a + i * W); });
  for (int c = 0; c < keys; ++c) {
    const T* r = b + c * ldb;
    P a0 = P::zero(), a1 = P::zero(), a2 = P::zero(), a3 = P::zero();
    unrolled<G>([&](auto g) {  // dot's four accumulators over its groups of 4 packets
      a0 = fmadd(x[4 * g], IO::load(r + (4 * g) * W), a0);
      a1 = fmadd(x[4 * g + 1], IO::load(r + (4 * g + 1) * W), a1);
      a2 = fmadd(x[4 * g + 2], IO::load(r + (4 * g + 2) * W), a2);
      a3 = fmadd(x[4 * g + 3], IO::load(r + (4 * g + 3) * W), a3);
    });
    out[c] = reduce_add((a0 + a1) + (a2 + a3));
  }
}

}  // namespace detail

/// out[c] = dot(a, b + c * ldb, n) for c < keys: one query row against consecutive key
/// rows (MHA decode over a head-major cache, one head at a time), the bits of `keys`
/// calls of dot. Where a's packets fit in the register file beside dot's four
/// accumulators (n = 4, 8 or, with 32 registers, 16 whole packets: d = 64, 128 and 256
/// on AVX-512, 32 and 64 on AVX2, 16, 32 and 64 on NEON) they are loaded once for all
/// the keys, so each key packet is one load for one FMA where dot loads a query packet
/// beside it; other widths take dot per key. Needs has_widening_ops_v<Arch, T>.
template <class Arch, class T>
inline void dot_rows(const float* a, const T* b, Index ldb, int keys, Index n,
                     float* out) noexcept {
  using P = packet<float, Arch>;
  constexpr Index W = P::size;
  if (n == 4 * W) return detail::dot_rows_held<Arch, T, 1>(a, b, ldb, keys, out);
  if (n == 8 * W) return detail::dot_rows_held<Arch, T, 2>(a, b, ldb, keys, out);
  if constexpr (P::registers >= 32)
    if (n == 16 * W) return detail::dot_rows_held<Arch, T, 4>(a, b, ldb, keys, out);
  for (int c = 0; c < keys; ++c) out[c] = dot<Arch>(a, b + c * ldb, n);
}

/// y[i] += alpha * float(x[i]), i < n, one fused multiply-add per value (so, like dot,
/// the same bits for 16-bit x as for its widened values). Needs has_widening_ops_v<Arch, T>.
template <class Arch, class T>
inline void axpy(float alpha, const T* x, Index n, float* y) noexcept {
  using IO = storage_io<T, Arch>;
  using P = packet<float, Arch>;
  constexpr Index W = P::size;
  const P a = P::broadcast(alpha);
  Index i = 0;
  for (; i + W <= n; i += W) fmadd(a, IO::load(x + i), P::load(y + i)).store(y + i);
  if (i < n) {
    const int r = static_cast<int>(n - i);
    fmadd(a, IO::load_partial(x + i, r), P::load_partial(y + i, r)).store_partial(y + i, r);
  }
}

namespace detail {

/// dot_axpy's request ahead: one prefetch per cache line of the 4 W values of row r at i,
/// `ahead` bytes on (none where ahead is 0).
template <class Arch, class T>
POSENC_INLINE void ask_step_ahead(const T* r, Index i, Index ahead) noexcept {
  if (ahead > 0) {
    constexpr int step = static_cast<int>(4 * packet<float, Arch>::size * sizeof(T));
    const char* b = reinterpret_cast<const char*>(r + i) + ahead;
    for (int off = 0; off < step; off += 64) POSENC_PREFETCH(b + off);
  }
}

}  // namespace detail

/// dot(a, k, n) and then axpy(alpha, v, n, y) in one pass: the packets of the key row k
/// and of the value row v loaded side by side, so that two streams from memory are in
/// flight together (decode's key and value passes, backend/scalar/flash.hpp). The dot's
/// accumulators and order are dot's and each y value takes the one FMA of axpy: the bits
/// of the two calls. ahead > 0: each cache line of k and v read is asked for again ahead
/// bytes on (rows that continue in memory: a token's next heads, the next token's, or a
/// head's next rows). Needs has_widening_ops_v<Arch, TK> and <Arch, TV>.
template <class Arch, class TK, class TV>
inline float dot_axpy(const float* a, const TK* k, Index n, float alpha, const TV* v, float* y,
                      Index ahead = 0) noexcept {
  using IK = storage_io<TK, Arch>;
  using IV = storage_io<TV, Arch>;
  using P = packet<float, Arch>;
  constexpr Index W = P::size;
  const P al = P::broadcast(alpha);
  const auto update = [&](Index i) { fmadd(al, IV::load(v + i), P::load(y + i)).store(y + i); };
  P a0 = P::zero(), a1 = P::zero(), a2 = P::zero(), a3 = P::zero();
  Index i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    detail::ask_step_ahead<Arch>(k, i, ahead);  // one prefetch per cache line of the step
    detail::ask_step_ahead<Arch>(v, i, ahead);
    a0 = fmadd(P::load(a + i), IK::load(k + i), a0);
    update(i);
    a1 = fmadd(P::load(a + i + W), IK::load(k + i + W), a1);
    update(i + W);
    a2 = fmadd(P::load(a + i + 2 * W), IK::load(k + i + 2 * W), a2);
    update(i + 2 * W);
    a3 = fmadd(P::load(a + i + 3 * W), IK::load(k + i + 3 * W), a3);
    update(i + 3 * W);
  }
  for (; i + W <= n; i += W) {
    a0 = fmadd(P::load(a + i), IK::load(k + i), a0);
    update(i);
  }
  if (i < n) {
    const int r = static_cast<int>(n - i);
    a0 = fmadd(P::load_partial(a + i, r), IK::load_partial(k + i, r), a0);
    fmadd(al, IV::load_partial(v + i, r), P::load_partial(y + i, r)).store_partial(y + i, r);
  }
  return reduce_add((a0 + a1) + (a2 + a3));
}

namespace detail {

/// dot_axpy_rows with a's and y's 4 * G packets (n = 4 * G * W) held in registers over the
/// keys: per key the packets of the key and value rows only, and y stored once.
template <class Arch, class TK, class TV, int G>
inline void dot_axpy_rows_held(const float* a, const TK* k, Index ldk, const float* alpha,
                               const TV* v, Index ldv, int keys, float* y, float* out,
                               Index ahead) noexcept {
  using IK = storage_io<TK, Arch>;
  using IV = storage_io<TV, Arch>;
  using P = packet<float, Arch>;
  constexpr int W = P::size;
  constexpr std::size_t held = 4 * G;  // array bounds are unsigned
  P x[held], o[held];
  unrolled<4 * G>([&](auto i) {
    x[i] = P::load(a + i * W);
    o[i] = P::load(y + i * W);
  });
  for (int c = 0; c < keys; ++c) {
    const TK* kr = k + c * ldk;
    const TV* vr = v + c * ldv;
    const P al = P::broadcast(alpha[c]);
    P a0 = P::zero(), a1 = P::zero(), a2 = P::zero(), a3 = P::zero();
    unrolled<G>([&](auto g) {  // dot_axpy's four accumulators and one FMA per y value
      constexpr int i = 4 * g;
      ask_step_ahead<Arch>(kr, i * W, ahead);  // dot_axpy's prefetches
      ask_step_ahead<Arch>(vr, i * W, ahead);
      a0 = fmadd(x[i], IK::load(kr + i * W), a0);
      o[i] = fmadd(al, IV::load(vr + i * W), o[i]);
      a1 = fmadd(x[i + 1], IK::load(kr + (i + 1) * W), a1);
      o[i + 1] = fmadd(al, IV::load(vr + (i + 1) * W), o[i + 1]);
      a2 = fmadd(x[i + 2], IK::load(kr + (i + 2) * W), a2);
      o[i + 2] = fmadd(al, IV::load(vr + (i + 2) * W), o[i + 2]);
      a3 = fmadd(x[i + 3], IK::load(kr + (i + 3) * W), a3);
      o[i + 3] = fmadd(al, IV::load(vr + (i + 3) * W), o[i + 3]);
    });
    out[c] = reduce_add((a0 + a1) + (a2 + a3));
  }
  unrolled<4 * G>([&](auto i) { o[i].store(y + i * W); });
}

}  // namespace detail

/// out[c] = dot_axpy(a, k + c · ldk, n, alpha[c], v + c · ldv, y, ahead) for c < keys, in
/// order: one query row against a run of key rows while a run of value rows is added to
/// one output row (MHA decode, one head at a time: a tile's dots beside the tile before
/// it's values), the bits of `keys` calls of dot_axpy. Where the query and output packets
/// fit in the register file beside the dot's four accumulators (n = 4 or 8 whole packets
/// on 32 registers: d = 64 and 128 on AVX-512) they are loaded once for the run and y is
/// stored once at its end, so each key holds the loads of its two rows and their FMAs
/// only, where dot_axpy also loads each query packet and loads and stores each output
/// packet; other widths take dot_axpy per key. out and alpha must not overlap y. Needs
/// has_widening_ops_v<Arch, TK> and <Arch, TV>.
template <class Arch, class TK, class TV>
inline void dot_axpy_rows(const float* a, const TK* k, Index ldk, const float* alpha, const TV* v,
                          Index ldv, int keys, Index n, float* y, float* out,
                          Index ahead = 0) noexcept {
  using P = packet<float, Arch>;
  constexpr Index W = P::size;
  if constexpr (P::registers >= 32) {
    if (n == 4 * W)
      return detail::dot_axpy_rows_held<Arch, TK, TV, 1>(a, k, ldk, alpha, v, ldv, keys, y, out,
                                                         ahead);
    if (n == 8 * W)
      return detail::dot_axpy_rows_held<Arch, TK, TV, 2>(a, k, ldk, alpha, v, ldv, keys, y, out,
                                                         ahead);
  }
  for (int c = 0; c < keys; ++c)
    out[c] = dot_axpy<Arch>(a, k + c * ldk, n, alpha[c], v + c * ldv, y, ahead);
}

namespace detail {

/// axpy_rows on the W values at i of every row (Full) or the last n % W of them.
template <class Arch, class T, bool Full>
inline void axpy_rows_at(const T* const* x, int keys, const float* const* p, int m, float* const* y,
                         Index i, int r) noexcept {
  using IO = storage_io<T, Arch>;
  using P = packet<float, Arch>;
  auto load_y = [&](const float* q) { return Full ? P::load(q + i) : P::load_partial(q + i, r); };
  auto load_x = [&](const T* q) { return Full ? IO::load(q + i) : IO::load_partial(q + i, r); };
  auto store_y = [&](float* q, P v) {
    if (Full)
      v.store(q + i);
    else
      v.store_partial(q + i, r);
  };
  int k = 0;
  for (; k + 4 <= m; k += 4) {  // four rows: each value row loaded once for all four
    P a0 = load_y(y[k]), a1 = load_y(y[k + 1]), a2 = load_y(y[k + 2]), a3 = load_y(y[k + 3]);
    for (int c = 0; c < keys; ++c) {
      const P v = load_x(x[c]);
      a0 = fmadd(P::broadcast(p[k][c]), v, a0);
      a1 = fmadd(P::broadcast(p[k + 1][c]), v, a1);
      a2 = fmadd(P::broadcast(p[k + 2][c]), v, a2);
      a3 = fmadd(P::broadcast(p[k + 3][c]), v, a3);
    }
    store_y(y[k], a0);
    store_y(y[k + 1], a1);
    store_y(y[k + 2], a2);
    store_y(y[k + 3], a3);
  }
  for (; k < m; ++k) {
    P a = load_y(y[k]);
    for (int c = 0; c < keys; ++c) a = fmadd(P::broadcast(p[k][c]), load_x(x[c]), a);
    store_y(y[k], a);
  }
}

/// axpy_rows for four rows on NP whole packets at i (NP * W values): 4 x NP accumulators
/// held over the keys, each key's NP value packets loaded (widened) once and each row's
/// probability broadcast once for them, so a key feeds 4 * NP independent FMAs (the
/// per-packet loop above chains four, and broadcasts every probability again for each
/// packet). The same FMAs in the same order as axpy_rows_at: the same bits.
template <class Arch, class T, int NP>
inline void axpy_rows4_wide(const T* const* x, int keys, const float* const* p, float* const* y,
                            Index i) noexcept {
  using IO = storage_io<T, Arch>;
  using P = packet<float, Arch>;
  constexpr int W = P::size;
  constexpr std::size_t held = 4 * NP, packets = NP;  // array bounds are unsigned
  P acc[held];
  unrolled<4>(
      [&](auto r) { unrolled<NP>([&](auto j) { acc[r * NP + j] = P::load(y[r] + i + j * W); }); });
  const float* pr[4] = {p[0], p[1], p[2], p[3]};
  for (int c = 0; c < keys; ++c) {
    P v[packets];
    unrolled<NP>([&](auto j) { v[j] = IO::load(x[c] + i + j * W); });
    unrolled<4>([&](auto r) {
      const P b = P::broadcast(pr[r][c]);
      unrolled<NP>([&](auto j) { acc[r * NP + j] = fmadd(b, v[j], acc[r * NP + j]); });
    });
  }
  unrolled<4>(
      [&](auto r) { unrolled<NP>([&](auto j) { acc[r * NP + j].store(y[r] + i + j * W); }); });
}

/// axpy_rows on the values [i0, n) of every row: whole packets, then the partial last one.
template <class Arch, class T>
inline void axpy_rows_from(const T* const* x, int keys, const float* const* p, int m,
                           float* const* y, Index i0, Index n) noexcept {
  constexpr Index W = packet<float, Arch>::size;
  Index i = i0;
  for (; i + W <= n; i += W) axpy_rows_at<Arch, T, true>(x, keys, p, m, y, i, static_cast<int>(W));
  if (i < n) axpy_rows_at<Arch, T, false>(x, keys, p, m, y, i, static_cast<int>(n - i));
}

}  // namespace detail

/// y[k][i] += sum_c p[k][c] * float(x[c][i]) for rows k < m, i < n, the keys c < `keys` in
/// increasing order, one fused multiply-add each: the same bits as keys · m calls of axpy
/// (key-major), with each y packet kept in a register over the keys and each x packet
/// loaded once per four rows (a GQA group's or several queries' outputs against a block
/// of value rows). Needs has_widening_ops_v<Arch, T>.
template <class Arch, class T>
inline void axpy_rows(const T* const* x, int keys, const float* const* p, int m, float* const* y,
                      Index n) noexcept {
  detail::axpy_rows_from<Arch>(x, keys, p, m, y, 0, n);
}

/// axpy_rows for many output rows (see dot_block_many), the same bits: rows four at a
/// time over NP packets at once (detail::axpy_rows4_wide), where the register file holds
/// 4 x NP accumulators beside NP value packets (32 registers: 4, 16: 2), the rest by
/// axpy_rows. step(s, steps) is called once for each s < steps, in order, before the s-th
/// of the first four rows' passes over the value rows (steps: their passes, NP packets
/// each, and the partial last one; 1 where no four rows go together), so that a caller
/// can spread its software prefetches over the call instead of issuing them all before
/// it (decode's value blocks, backend/scalar/flash.hpp: a block of rows asked for at once
/// filled this CPU's queue of misses, and the prefetch instructions waited on it).
template <class Arch, class T, class Step>
inline void axpy_rows_many(const T* const* x, int keys, const float* const* p, int m,
                           float* const* y, Index n, Step&& step) noexcept {
  constexpr Index W = packet<float, Arch>::size;
  constexpr int NP = packet<float, Arch>::registers >= 32 ? 4 : 2;
  const Index wide = n / (NP * W) * (NP * W);
  int k = 0;
  if (wide > 0 && m >= 4) {
    const int steps = static_cast<int>(wide / (NP * W)) + (wide < n ? 1 : 0);
    for (; k + 4 <= m; k += 4) {
      for (Index i = 0; i < wide; i += NP * W) {
        if (k == 0) step(static_cast<int>(i / (NP * W)), steps);
        detail::axpy_rows4_wide<Arch, T, NP>(x, keys, p + k, y + k, i);
      }
      if (k == 0 && wide < n) step(steps - 1, steps);
      detail::axpy_rows_from<Arch>(x, keys, p + k, 4, y + k, wide, n);
    }
  } else {
    step(0, 1);
  }
  if (k < m) axpy_rows<Arch>(x, keys, p + k, m - k, y + k, n);
}

/// axpy_rows_many without a step hook.
template <class Arch, class T>
inline void axpy_rows_many(const T* const* x, int keys, const float* const* p, int m,
                           float* const* y, Index n) noexcept {
  axpy_rows_many<Arch>(x, keys, p, m, y, n, [](int, int) noexcept {});
}

/// Whether dot_group_rows and axpy_group_rows take m query (output) rows of n values on
/// Arch in registers: AVX-512, 2 to 4 rows of 64 or 128 values (4 or 8 packets).
template <class Arch>
constexpr bool group_rows_take(int m, Index n) noexcept {
  return POSENC_ARCH_AVX512 != 0 && std::is_same_v<Arch, backend::avx512> && m >= 2 && m <= 4 &&
         (n == 64 || n == 128);
}

#if POSENC_ARCH_AVX512
namespace detail {

/// dot_group_rows for M rows of NP packets. The first H query rows are held in registers
/// (3 rows of 8 packets beside a key row's 8; 4 of 4), the others' packets are memory operands
/// of their FMAs. Each key's M sums go through their column of reduce_add_each's tree at
/// once (reduce_add_column) and every four keys' columns are finished together, each row's
/// four sums stored as one 128-bit store: so few packets stay live that the held query rows
/// fit beside them (16 sums live over four keys spilled the third row, and the 16 scalar
/// stores of the sums cost as much again: 52-59 cycles a key row in L1/L2 where this takes
/// 38-41, Zen 4, docs/benchmarks.md).
template <class T, int NP, int M>
inline void dot_group_rows_avx512(const float* const* a, const T* b, Index ldb, int keys,
                                  float* const* out) noexcept {
  using IO = storage_io<T, backend::avx512>;
  using P = packet<float, backend::avx512>;
  constexpr int W = P::size;
  constexpr int H = M < 24 / NP ? M : 24 / NP;
  constexpr std::size_t held = H * NP, row = NP;  // array bounds are unsigned
  __m512 q[held];
  unrolled<H * NP>([&](auto k) { q[k] = _mm512_loadu_ps(a[k / NP] + (k % NP) * W); });
  // column t of reduce_add_each over slots 4i + t: row i's packet sum for key t
  const auto column = [&](const T* r) POSENC_LAMBDA_INLINE {
    __m512 x[row];
    unrolled<NP>([&](auto k) {
      x[k] = IO::load(r + k * W).v;
      in_register(x[k]);
    });
    P sums[4] = {P::zero(), P::zero(), P::zero(), P::zero()};
    unrolled<M>([&](auto i) {
      __m512 acc = _mm512_setzero_ps();
      unrolled<NP>([&](auto k) {  // dot_block's one accumulator, fed in increasing k
        if constexpr (std::decay_t<decltype(i)>::value < H)
          acc = _mm512_fmadd_ps(q[i * NP + k], x[k], acc);
        else
          acc = _mm512_fmadd_ps(_mm512_loadu_ps(a[i] + k * W), x[k], acc);
      });
      sums[i] = P{acc};
    });
    return reduce_add_column(sums[0], sums[1], sums[2], sums[3]);
  };
  int c0 = 0;
  for (; c0 + 4 <= keys; c0 += 4) {
    const T* r = b + static_cast<Index>(c0) * ldb;
    const P w0 = column(r), w1 = column(r + ldb), w2 = column(r + 2 * ldb),
            w3 = column(r + 3 * ldb);
    const __m512 s = reduce_add_columns(w0, w1, w2, w3).v;  // lane 4i + t: row i, key t
    unrolled<M>([&](auto i) { _mm_storeu_ps(out[i] + c0, _mm512_extractf32x4_ps(s, i)); });
  }
  if (c0 < keys) {
    const int kk = keys - c0;
    P w[4] = {P::zero(), P::zero(), P::zero(), P::zero()};
    for (int t = 0; t < kk; ++t) w[t] = column(b + static_cast<Index>(c0 + t) * ldb);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, reduce_add_columns(w[0], w[1], w[2], w[3]).v);
    for (int i = 0; i < M; ++i)
      for (int t = 0; t < kk; ++t) out[i][c0 + t] = lanes[4 * i + t];
  }
}

/// axpy_group_rows for M rows of NP packets: the first 28 of the output rows' packets (row
/// i's packet k is slot i · NP + k) held in registers beside a value packet and the M
/// broadcast weights (FMAs take those as memory operands where registers run out), the
/// rest loaded, updated and stored per packet: 4 rows of 8 packets keep 4 in memory. (Whole
/// rows only, 3 of 4 rows of 8: 38-49 cycles a value row in L1/L2 on Zen 4 where this takes
/// 35-37.)
template <class T, int NP, int M>
inline void axpy_group_rows_avx512(const T* b, Index ldb, int keys, const float* const* p,
                                   float* const* y) noexcept {
  using IO = storage_io<T, backend::avx512>;
  constexpr int W = packet<float, backend::avx512>::size;
  constexpr int H = M * NP < 28 ? M * NP : 28;
  constexpr std::size_t held = H, rows = M;  // array bounds are unsigned
  __m512 o[held];
  unrolled<H>([&](auto s) { o[s] = _mm512_loadu_ps(y[s / NP] + (s % NP) * W); });
  for (int c = 0; c < keys; ++c) {
    const T* r = b + static_cast<Index>(c) * ldb;
    __m512 w[rows];
    unrolled<M>([&](auto i) { w[i] = _mm512_set1_ps(p[i][c]); });
    unrolled<NP>([&](auto k) {
      __m512 x = IO::load(r + k * W).v;
      in_register(x);
      unrolled<M>([&](auto i) {  // axpy's FMA per value, keys in order
        constexpr int s = decltype(i)::value * NP + decltype(k)::value;
        if constexpr (s < H) {
          o[s] = _mm512_fmadd_ps(w[i], x, o[s]);
        } else {
          float* yk = y[i] + k * W;
          _mm512_storeu_ps(yk, _mm512_fmadd_ps(w[i], x, _mm512_loadu_ps(yk)));
        }
      });
    });
  }
  unrolled<H>([&](auto s) { _mm512_storeu_ps(y[s / NP] + (s % NP) * W, o[s]); });
}

/// f(integral_constant NP, integral_constant M) for rows of n = 64 or 128 values (NP 4 or
/// 8 packets) and m = 2, 3 or 4 of them (group_rows_take).
template <class F>
POSENC_INLINE void with_group_shape(int m, Index n, F&& f) noexcept {
  const auto rows = [&](auto np) {
    if (m == 2) f(np, std::integral_constant<int, 2>{});
    if (m == 3) f(np, std::integral_constant<int, 3>{});
    if (m == 4) f(np, std::integral_constant<int, 4>{});
  };
  if (n == 128)
    rows(std::integral_constant<int, 8>{});
  else
    rows(std::integral_constant<int, 4>{});
}

}  // namespace detail
#endif  // POSENC_ARCH_AVX512

/// out[i][c] = a[i] · float(b + c · ldb), i < m, c < keys: the query rows of a GQA group
/// against consecutive key rows, each key row read whole, once, in address order, and
/// widened once (where group_rows_take(m, n); elsewhere dot_block). Zen 4's hardware
/// prefetchers follow that order at the read roofline with a group's FMAs beside it, and
/// lose more than half of it where a kernel reads a few rows side by side, a packet of
/// each at a time (dot_block_many, dot_block_runs; docs/benchmarks.md). Each dot has
/// dot_block's one accumulator fed in increasing k and its lane of reduce_add_each (over
/// four keys): dot_block's bits.
template <class Arch, class T>
inline void dot_group_rows(const float* const* a, int m, const T* b, Index ldb, int keys, Index n,
                           float* const* out) noexcept {
#if POSENC_ARCH_AVX512
  if constexpr (std::is_same_v<Arch, backend::avx512>) {
    if (group_rows_take<Arch>(m, n)) {
      detail::with_group_shape(m, n, [&](auto np, auto rows) {
        detail::dot_group_rows_avx512<T, decltype(np)::value, decltype(rows)::value>(a, b, ldb,
                                                                                     keys, out);
      });
      return;
    }
  }
#endif
  constexpr int W = packet<float, Arch>::size;
  for (int i0 = 0; i0 < m; i0 += 8)
    for (int c0 = 0; c0 < keys; c0 += W) {
      float* o[8];
      const int rows = std::min(8, m - i0);
      for (int i = 0; i < rows; ++i) o[i] = out[i0 + i] + c0;
      dot_block<Arch>(a + i0, rows, b + static_cast<Index>(c0) * ldb, ldb, std::min(W, keys - c0),
                      n, o);
    }
}

/// y[i] += sum_c p[i][c] · float(b + c · ldb), i < m, c < keys in order: each value row
/// read whole, once, in address order (see dot_group_rows; elsewhere axpy per key and
/// row), the bits of keys · m calls of axpy.
template <class Arch, class T>
inline void axpy_group_rows(const T* b, Index ldb, int keys, const float* const* p, int m,
                            float* const* y, Index n) noexcept {
#if POSENC_ARCH_AVX512
  if constexpr (std::is_same_v<Arch, backend::avx512>) {
    if (group_rows_take<Arch>(m, n)) {
      detail::with_group_shape(m, n, [&](auto np, auto rows) {
        detail::axpy_group_rows_avx512<T, decltype(np)::value, decltype(rows)::value>(b, ldb, keys,
                                                                                      p, y);
      });
      return;
    }
  }
#endif
  for (int c = 0; c < keys; ++c)
    for (int i = 0; i < m; ++i) axpy<Arch>(p[i][c], b + static_cast<Index>(c) * ldb, n, y[i]);
}

}  // namespace simd
}  // namespace posenc
