#pragma once
/// \file
/// AVX2 + FMA packets (x86-64-v3): packet<float, backend::avx2> (8 lanes) and
/// packet<double, backend::avx2> (4 lanes). Defined only when POSENC_ARCH_AVX2 is 1.
/// Partial loads and stores use vmaskmov, which never touches the masked-off lanes' memory.
/// The operations are listed in packet.hpp.

#include <cstddef>

#include "packet.hpp"

#if POSENC_ARCH_AVX2
#include <immintrin.h>

namespace posenc {
namespace simd {

template <>
struct packet<float, backend::avx2> {
  using value_type = float;
  static constexpr int size = 8;
  /// Vector registers of the architecture (register blocking sizes its tiles by it).
  static constexpr int registers = 16;
  __m256 v;

  /// Lane mask with lanes [0, n) set, for vmaskmov.
  static __m256i mask(int n) noexcept {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static packet load(const float* p) noexcept { return {_mm256_loadu_ps(p)}; }
  static packet load_partial(const float* p, int n) noexcept {
    return {_mm256_maskload_ps(p, mask(n))};
  }
  static packet broadcast(float x) noexcept { return {_mm256_set1_ps(x)}; }
  static packet zero() noexcept { return {_mm256_setzero_ps()}; }
  void store(float* p) const noexcept { _mm256_storeu_ps(p, v); }
  void store_partial(float* p, int n) const noexcept { _mm256_maskstore_ps(p, mask(n), v); }
  /// p[c] = lane first + c, c < n (first + n <= 8): one lane permute and a masked store,
  /// where storing the packet and reading lanes back would wait on store forwarding.
  void store_lanes(float* p, int first, int n) const noexcept {
    const __m256i lanes =
        _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(p, mask(n), _mm256_permutevar8x32_ps(v, lanes));
  }

  /// dst[c * ldd + r] = src[r * lds + c] for an 8 x 8 square: pairs interleaved, then
  /// quads, then 128-bit halves exchanged (24 shuffles for 64 values).
  static void transpose(const float* src, std::ptrdiff_t lds, float* dst,
                        std::ptrdiff_t ldd) noexcept {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      const __m256 a = _mm256_loadu_ps(src + i * lds), b = _mm256_loadu_ps(src + (i + 1) * lds);
      t[i] = _mm256_unpacklo_ps(a, b);      // a0 b0 a1 b1 | a4 b4 a5 b5
      t[i + 1] = _mm256_unpackhi_ps(a, b);  // a2 b2 a3 b3 | a6 b6 a7 b7
    }
    for (int i = 0; i < 8; i += 4) {  // rows i .. i + 3, column k in 128-bit lane k % 4
      u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
      u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(dst + k * ldd, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
      _mm256_storeu_ps(dst + (k + 4) * ldd, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
  }
};

template <>
struct packet<double, backend::avx2> {
  using value_type = double;
  static constexpr int size = 4;
  /// Vector registers of the architecture (register blocking sizes its tiles by it).
  static constexpr int registers = 16;
  __m256d v;

  static __m256i mask(int n) noexcept {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static packet load(const double* p) noexcept { return {_mm256_loadu_pd(p)}; }
  static packet load_partial(const double* p, int n) noexcept {
    return {_mm256_maskload_pd(p, mask(n))};
  }
  static packet broadcast(double x) noexcept { return {_mm256_set1_pd(x)}; }
  static packet zero() noexcept { return {_mm256_setzero_pd()}; }
  void store(double* p) const noexcept { _mm256_storeu_pd(p, v); }
  void store_partial(double* p, int n) const noexcept { _mm256_maskstore_pd(p, mask(n), v); }
};

using avx2_f32 = packet<float, backend::avx2>;
using avx2_f64 = packet<double, backend::avx2>;

// float
inline avx2_f32 operator+(avx2_f32 a, avx2_f32 b) noexcept { return {_mm256_add_ps(a.v, b.v)}; }
inline avx2_f32 operator-(avx2_f32 a, avx2_f32 b) noexcept { return {_mm256_sub_ps(a.v, b.v)}; }
inline avx2_f32 operator*(avx2_f32 a, avx2_f32 b) noexcept { return {_mm256_mul_ps(a.v, b.v)}; }
inline avx2_f32 fmadd(avx2_f32 a, avx2_f32 b, avx2_f32 c) noexcept {
  return {_mm256_fmadd_ps(a.v, b.v, c.v)};
}
inline avx2_f32 fnmadd(avx2_f32 a, avx2_f32 b, avx2_f32 c) noexcept {
  return {_mm256_fnmadd_ps(a.v, b.v, c.v)};
}
inline avx2_f32 swap_pairs(avx2_f32 a) noexcept { return {_mm256_permute_ps(a.v, 0xB1)}; }
inline void store_interleaved(float* dst, avx2_f32 a, avx2_f32 b) noexcept {
  const __m256 lo = _mm256_unpacklo_ps(a.v, b.v);  // a0 b0 a1 b1 | a4 b4 a5 b5
  const __m256 hi = _mm256_unpackhi_ps(a.v, b.v);  // a2 b2 a3 b3 | a6 b6 a7 b7
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
inline avx2_f32 max(avx2_f32 a, avx2_f32 b) noexcept { return {_mm256_max_ps(a.v, b.v)}; }
inline avx2_f32 min(avx2_f32 a, avx2_f32 b) noexcept { return {_mm256_min_ps(a.v, b.v)}; }
inline float reduce_add(avx2_f32 a) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
/// Lane c: the sum of v_c's lanes, for c < 8, as a transposed tree (half-vector, pair and
/// neighbour sums of every input at once; 21 operations for 8 sums). Taking the packets as
/// values lets a kernel that holds its accumulators in registers sum them there.
inline avx2_f32 reduce_add_each(avx2_f32 v0, avx2_f32 v1, avx2_f32 v2, avx2_f32 v3, avx2_f32 v4,
                                avx2_f32 v5, avx2_f32 v6, avx2_f32 v7) noexcept {
  // 128-bit halves: lanes i + (i + 4) of v_k and v_(k + 4) side by side
  const auto halves = [](avx2_f32 a, avx2_f32 b) {
    return _mm256_add_ps(_mm256_permute2f128_ps(a.v, b.v, 0x20),
                         _mm256_permute2f128_ps(a.v, b.v, 0x31));
  };
  const __m256 u0 = halves(v0, v4), u1 = halves(v1, v5), u2 = halves(v2, v6), u3 = halves(v3, v7);
  // pairs within each half, then neighbours
  const __m256 x0 = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x44), _mm256_shuffle_ps(u0, u1, 0xEE));
  const __m256 x1 = _mm256_add_ps(_mm256_shuffle_ps(u2, u3, 0x44), _mm256_shuffle_ps(u2, u3, 0xEE));
  return {_mm256_add_ps(_mm256_shuffle_ps(x0, x1, 0x88), _mm256_shuffle_ps(x0, x1, 0xDD))};
}
inline avx2_f32 reduce_add_each(const avx2_f32* v) noexcept {
  return reduce_add_each(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}
inline float reduce_max(avx2_f32 a) noexcept {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
inline __m256 less(avx2_f32 a, avx2_f32 b) noexcept { return _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ); }
inline __m256 equal(avx2_f32 a, avx2_f32 b) noexcept { return _mm256_cmp_ps(a.v, b.v, _CMP_EQ_OQ); }
inline avx2_f32 select(__m256 m, avx2_f32 a, avx2_f32 b) noexcept {
  return {_mm256_blendv_ps(b.v, a.v, m)};
}
inline avx2_f32 abs(avx2_f32 a) noexcept { return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v)}; }
inline avx2_f32 round_nearest(avx2_f32 a) noexcept {
  return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
inline avx2_f32 pow2(avx2_f32 n) noexcept {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}

// double
inline avx2_f64 operator+(avx2_f64 a, avx2_f64 b) noexcept { return {_mm256_add_pd(a.v, b.v)}; }
inline avx2_f64 operator-(avx2_f64 a, avx2_f64 b) noexcept { return {_mm256_sub_pd(a.v, b.v)}; }
inline avx2_f64 operator*(avx2_f64 a, avx2_f64 b) noexcept { return {_mm256_mul_pd(a.v, b.v)}; }
inline avx2_f64 fmadd(avx2_f64 a, avx2_f64 b, avx2_f64 c) noexcept {
  return {_mm256_fmadd_pd(a.v, b.v, c.v)};
}
inline avx2_f64 fnmadd(avx2_f64 a, avx2_f64 b, avx2_f64 c) noexcept {
  return {_mm256_fnmadd_pd(a.v, b.v, c.v)};
}
inline avx2_f64 swap_pairs(avx2_f64 a) noexcept { return {_mm256_permute_pd(a.v, 0x5)}; }
inline avx2_f64 max(avx2_f64 a, avx2_f64 b) noexcept { return {_mm256_max_pd(a.v, b.v)}; }
inline avx2_f64 min(avx2_f64 a, avx2_f64 b) noexcept { return {_mm256_min_pd(a.v, b.v)}; }
inline double reduce_add(avx2_f64 a) noexcept {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a.v), _mm256_extractf128_pd(a.v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
inline double reduce_max(avx2_f64 a) noexcept {
  const __m128d s = _mm_max_pd(_mm256_castpd256_pd128(a.v), _mm256_extractf128_pd(a.v, 1));
  return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
}

inline void store_interleaved(double* dst, avx2_f64 a, avx2_f64 b) noexcept {
  const __m256d lo = _mm256_unpacklo_pd(a.v, b.v);  // a0 b0 a2 b2
  const __m256d hi = _mm256_unpackhi_pd(a.v, b.v);  // a1 b1 a3 b3
  _mm256_storeu_pd(dst, _mm256_permute2f128_pd(lo, hi, 0x20));
  _mm256_storeu_pd(dst + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
}
inline void store_interleaved(float* dst, avx2_f64 a, avx2_f64 b) noexcept {
  const __m128 fa = _mm256_cvtpd_ps(a.v), fb = _mm256_cvtpd_ps(b.v);
  _mm256_storeu_ps(dst, _mm256_set_m128(_mm_unpackhi_ps(fa, fb), _mm_unpacklo_ps(fa, fb)));
}
inline void store_cvt(float* dst, avx2_f64 a) noexcept { _mm_storeu_ps(dst, _mm256_cvtpd_ps(a.v)); }

}  // namespace simd
}  // namespace posenc

#endif  // POSENC_ARCH_AVX2
