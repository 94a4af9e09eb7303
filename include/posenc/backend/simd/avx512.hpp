#pragma once
/// \file
/// AVX-512 packets (x86-64-v4: F/VL/BW/DQ): packet<float, backend::avx512> (16 lanes) and
/// packet<double, backend::avx512> (8 lanes). Defined only when POSENC_ARCH_AVX512 is 1.
/// Partial loads and stores use k-masks (masked-off lanes are never accessed). Shuffles,
/// conversions, max/min and half extraction use the all-ones zero-masking forms: the same
/// instructions, but GCC 12's unmasked forms start from _mm512_undefined_*() and trip
/// -Wmaybe-uninitialized (-Werror) once inlined. Prefer them in new AVX-512 code too.
/// The operations are listed in packet.hpp.

#include <cstddef>

#include "avx2.hpp"
#include "packet.hpp"

#if POSENC_ARCH_AVX512
#include <immintrin.h>

namespace posenc {
namespace simd {

template <>
struct packet<float, backend::avx512> {
  using value_type = float;
  static constexpr int size = 16;
  /// Vector registers of the architecture (register blocking sizes its tiles by it).
  static constexpr int registers = 32;
  __m512 v;

  static __mmask16 mask(int n) noexcept {
    return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
  }
  static packet load(const float* p) noexcept { return {_mm512_loadu_ps(p)}; }
  static packet load_partial(const float* p, int n) noexcept {
    return {_mm512_maskz_loadu_ps(mask(n), p)};
  }
  static packet broadcast(float x) noexcept { return {_mm512_set1_ps(x)}; }
  static packet zero() noexcept { return {_mm512_setzero_ps()}; }
  void store(float* p) const noexcept { _mm512_storeu_ps(p, v); }
  void store_partial(float* p, int n) const noexcept { _mm512_mask_storeu_ps(p, mask(n), v); }
  /// p[c] = lane first + c, c < n (first + n <= 16): one lane permute and a masked store,
  /// where storing the packet and reading lanes back would wait on store forwarding.
  void store_lanes(float* p, int first, int n) const noexcept {
    const __m512i lanes =
        _mm512_add_epi32(_mm512_set1_epi32(first),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    _mm512_mask_storeu_ps(p, mask(n), _mm512_permutexvar_ps(lanes, v));
  }

  /// dst[c * ldd + r] = src[r * lds + c] for a 16 x 16 square, as four 8 x 8 squares on
  /// AVX2 registers (every AVX-512 target has AVX2, see config.hpp).
  static void transpose(const float* src, std::ptrdiff_t lds, float* dst,
                        std::ptrdiff_t ldd) noexcept {
    using half = packet<float, backend::avx2>;
    for (int r = 0; r < 16; r += 8)
      for (int c = 0; c < 16; c += 8)
        half::transpose(src + r * lds + c, lds, dst + c * ldd + r, ldd);
  }
};

template <>
struct packet<double, backend::avx512> {
  using value_type = double;
  static constexpr int size = 8;
  /// Vector registers of the architecture (register blocking sizes its tiles by it).
  static constexpr int registers = 32;
  __m512d v;

  static __mmask8 mask(int n) noexcept {
    return n >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << n) - 1u);
  }
  static packet load(const double* p) noexcept { return {_mm512_loadu_pd(p)}; }
  static packet load_partial(const double* p, int n) noexcept {
    return {_mm512_maskz_loadu_pd(mask(n), p)};
  }
  static packet broadcast(double x) noexcept { return {_mm512_set1_pd(x)}; }
  static packet zero() noexcept { return {_mm512_setzero_pd()}; }
  void store(double* p) const noexcept { _mm512_storeu_pd(p, v); }
  void store_partial(double* p, int n) const noexcept { _mm512_mask_storeu_pd(p, mask(n), v); }
};

using avx512_f32 = packet<float, backend::avx512>;
using avx512_f64 = packet<double, backend::avx512>;

// float
inline avx512_f32 operator+(avx512_f32 a, avx512_f32 b) noexcept {
  return {_mm512_add_ps(a.v, b.v)};
}
inline avx512_f32 operator-(avx512_f32 a, avx512_f32 b) noexcept {
  return {_mm512_sub_ps(a.v, b.v)};
}
inline avx512_f32 operator*(avx512_f32 a, avx512_f32 b) noexcept {
  return {_mm512_mul_ps(a.v, b.v)};
}
inline avx512_f32 fmadd(avx512_f32 a, avx512_f32 b, avx512_f32 c) noexcept {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}
inline avx512_f32 fnmadd(avx512_f32 a, avx512_f32 b, avx512_f32 c) noexcept {
  return {_mm512_fnmadd_ps(a.v, b.v, c.v)};
}
inline avx512_f32 swap_pairs(avx512_f32 a) noexcept {
  return {_mm512_maskz_permute_ps(0xFFFF, a.v, 0xB1)};
}
inline void store_interleaved(float* dst, avx512_f32 a, avx512_f32 b) noexcept {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  _mm512_storeu_ps(dst, _mm512_maskz_permutex2var_ps(0xFFFF, a.v, lo, b.v));
  _mm512_storeu_ps(dst + 16, _mm512_maskz_permutex2var_ps(0xFFFF, a.v, hi, b.v));
}
inline avx512_f32 max(avx512_f32 a, avx512_f32 b) noexcept {
  return {_mm512_maskz_max_ps(0xFFFF, a.v, b.v)};
}
inline avx512_f32 min(avx512_f32 a, avx512_f32 b) noexcept {
  return {_mm512_maskz_min_ps(0xFFFF, a.v, b.v)};
}
inline float reduce_add(avx512_f32 a) noexcept {
  __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, a.v, 0),
                           _mm512_maskz_extractf32x8_ps(0xFF, a.v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
/// reduce_add_each's tree in two steps, for kernels that have its 16 inputs a column at a
/// time: reduce_add_column(v[t], v[4 + t], v[8 + t], v[12 + t]) is column t's half-vector
/// and quarter sums (w_t), and reduce_add_columns(w_0, w_1, w_2, w_3) the pair and
/// neighbour sums of all four: reduce_add_each's bits, with 4 packets live between them
/// instead of 16.
inline avx512_f32 reduce_add_column(avx512_f32 a, avx512_f32 b, avx512_f32 c,
                                    avx512_f32 d) noexcept {
  const auto half = [](__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  };
  const __m512 u0 = half(a.v, b.v), u1 = half(c.v, d.v);
  return {_mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xDD))};
}
inline avx512_f32 reduce_add_columns(avx512_f32 w0, avx512_f32 w1, avx512_f32 w2,
                                     avx512_f32 w3) noexcept {
  const __m512 x0 =
      _mm512_add_ps(_mm512_shuffle_ps(w0.v, w1.v, 0x44), _mm512_shuffle_ps(w0.v, w1.v, 0xEE));
  const __m512 x1 =
      _mm512_add_ps(_mm512_shuffle_ps(w2.v, w3.v, 0x44), _mm512_shuffle_ps(w2.v, w3.v, 0xEE));
  return {_mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x88), _mm512_shuffle_ps(x0, x1, 0xDD))};
}
/// Lane c: the sum of v[c]'s lanes, for c < 16, as a transposed tree (half-vector, quarter,
/// pair and neighbour sums of every input at once; 45 operations for 16 sums). The tree
/// leaves input slot 4t + q in lane 4q + t, so slot s takes v[4 (s % 4) + s / 4]: column t
/// of reduce_add_column is v[t], v[4 + t], v[8 + t], v[12 + t]. (Written out: GCC at -O2
/// kept loops over arrays here, and the caller's accumulators in memory.)
inline avx512_f32 reduce_add_each(const avx512_f32* v) noexcept {
  return reduce_add_columns(
      reduce_add_column(v[0], v[4], v[8], v[12]), reduce_add_column(v[1], v[5], v[9], v[13]),
      reduce_add_column(v[2], v[6], v[10], v[14]), reduce_add_column(v[3], v[7], v[11], v[15]));
}
inline float reduce_max(avx512_f32 a) noexcept {
  __m256 h = _mm256_max_ps(_mm512_maskz_extractf32x8_ps(0xFF, a.v, 0),
                           _mm512_maskz_extractf32x8_ps(0xFF, a.v, 1));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
inline __mmask16 less(avx512_f32 a, avx512_f32 b) noexcept {
  return _mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ);
}
inline __mmask16 equal(avx512_f32 a, avx512_f32 b) noexcept {
  return _mm512_cmp_ps_mask(a.v, b.v, _CMP_EQ_OQ);
}
inline avx512_f32 select(__mmask16 m, avx512_f32 a, avx512_f32 b) noexcept {
  return {_mm512_mask_mov_ps(b.v, m, a.v)};
}
inline avx512_f32 abs(avx512_f32 a) noexcept {
  return {_mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(0x7FFFFFFF)))};
}
inline avx512_f32 round_nearest(avx512_f32 a) noexcept {
  return {_mm512_maskz_roundscale_ps(0xFFFF, a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
inline avx512_f32 pow2(avx512_f32 n) noexcept {
  // the exponent field, as on AVX2 and NEON (scalef would give 2^-127 a subnormal, not 0)
  const __m512i e = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(0xFFFF, n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, e, 23))};
}

// double
inline avx512_f64 operator+(avx512_f64 a, avx512_f64 b) noexcept {
  return {_mm512_add_pd(a.v, b.v)};
}
inline avx512_f64 operator-(avx512_f64 a, avx512_f64 b) noexcept {
  return {_mm512_sub_pd(a.v, b.v)};
}
inline avx512_f64 operator*(avx512_f64 a, avx512_f64 b) noexcept {
  return {_mm512_mul_pd(a.v, b.v)};
}
inline avx512_f64 fmadd(avx512_f64 a, avx512_f64 b, avx512_f64 c) noexcept {
  return {_mm512_fmadd_pd(a.v, b.v, c.v)};
}
inline avx512_f64 fnmadd(avx512_f64 a, avx512_f64 b, avx512_f64 c) noexcept {
  return {_mm512_fnmadd_pd(a.v, b.v, c.v)};
}
inline avx512_f64 swap_pairs(avx512_f64 a) noexcept {
  return {_mm512_maskz_permute_pd(0xFF, a.v, 0x55)};
}
inline avx512_f64 max(avx512_f64 a, avx512_f64 b) noexcept {
  return {_mm512_maskz_max_pd(0xFF, a.v, b.v)};
}
inline avx512_f64 min(avx512_f64 a, avx512_f64 b) noexcept {
  return {_mm512_maskz_min_pd(0xFF, a.v, b.v)};
}
inline double reduce_add(avx512_f64 a) noexcept {
  const __m256d h = _mm256_add_pd(_mm512_maskz_extractf64x4_pd(0xF, a.v, 0),
                                  _mm512_maskz_extractf64x4_pd(0xF, a.v, 1));
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
inline double reduce_max(avx512_f64 a) noexcept {
  const __m256d h = _mm256_max_pd(_mm512_maskz_extractf64x4_pd(0xF, a.v, 0),
                                  _mm512_maskz_extractf64x4_pd(0xF, a.v, 1));
  const __m128d s = _mm_max_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
  return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
}

inline void store_interleaved(double* dst, avx512_f64 a, avx512_f64 b) noexcept {
  const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  _mm512_storeu_pd(dst, _mm512_permutex2var_pd(a.v, lo, b.v));
  _mm512_storeu_pd(dst + 8, _mm512_permutex2var_pd(a.v, hi, b.v));
}
inline void store_interleaved(float* dst, avx512_f64 a, avx512_f64 b) noexcept {
  // [a0..a7 b0..b7] as floats, then one permute to a0 b0 a1 b1 ...
  const __m512 ab = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_maskz_cvtpd_ps(0xFF, a.v)),
                                       _mm512_maskz_cvtpd_ps(0xFF, b.v), 1);
  const __m512i idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  _mm512_storeu_ps(dst, _mm512_maskz_permutexvar_ps(0xFFFF, idx, ab));
}
inline void store_cvt(float* dst, avx512_f64 a) noexcept {
  _mm256_storeu_ps(dst, _mm512_maskz_cvtpd_ps(0xFF, a.v));
}

}  // namespace simd
}  // namespace posenc

#endif  // POSENC_ARCH_AVX512
