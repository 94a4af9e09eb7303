#pragma once
/// \file
/// AArch64 Advanced SIMD packets: packet<float, backend::neon> (4 lanes) and
/// packet<double, backend::neon> (2 lanes). Defined only when POSENC_ARCH_NEON is 1.
/// NEON has no masked memory access, so partial loads and stores go lane by lane.
/// The operations are listed in packet.hpp.

#include <cstddef>

#include "packet.hpp"

#if POSENC_ARCH_NEON
#include <arm_neon.h>

namespace posenc {
namespace simd {

template <>
struct packet<float, backend::neon> {
  using value_type = float;
  static constexpr int size = 4;
  /// Vector registers of the architecture (register blocking sizes its tiles by it).
  static constexpr int registers = 32;
  float32x4_t v;

  static packet load(const float* p) noexcept { return {vld1q_f32(p)}; }
  static packet load_partial(const float* p, int n) noexcept {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n && i < 4; ++i) t[i] = p[i];
    return {vld1q_f32(t)};
  }
  static packet broadcast(float x) noexcept { return {vdupq_n_f32(x)}; }
  static packet zero() noexcept { return {vdupq_n_f32(0.0f)}; }
  void store(float* p) const noexcept { vst1q_f32(p, v); }
  void store_partial(float* p, int n) const noexcept {
    float t[4];
    vst1q_f32(t, v);
    for (int i = 0; i < n && i < 4; ++i) p[i] = t[i];
  }

  /// dst[c * ldd + r] = src[r * lds + c] for a 4 x 4 square: vtrn pairs, then halves.
  static void transpose(const float* src, std::ptrdiff_t lds, float* dst,
                        std::ptrdiff_t ldd) noexcept {
    // ab: [a0 b0 a2 b2], [a1 b1 a3 b3]; cd likewise
    const float32x4x2_t ab = vtrnq_f32(vld1q_f32(src), vld1q_f32(src + lds));
    const float32x4x2_t cd = vtrnq_f32(vld1q_f32(src + 2 * lds), vld1q_f32(src + 3 * lds));
    vst1q_f32(dst, vcombine_f32(vget_low_f32(ab.val[0]), vget_low_f32(cd.val[0])));
    vst1q_f32(dst + ldd, vcombine_f32(vget_low_f32(ab.val[1]), vget_low_f32(cd.val[1])));
    vst1q_f32(dst + 2 * ldd, vcombine_f32(vget_high_f32(ab.val[0]), vget_high_f32(cd.val[0])));
    vst1q_f32(dst + 3 * ldd, vcombine_f32(vget_high_f32(ab.val[1]), vget_high_f32(cd.val[1])));
  }
};

template <>
struct packet<double, backend::neon> {
  using value_type = double;
  static constexpr int size = 2;
  /// Vector registers of the architecture (register blocking sizes its tiles by it).
  static constexpr int registers = 32;
  float64x2_t v;

  static packet load(const double* p) noexcept { return {vld1q_f64(p)}; }
  static packet load_partial(const double* p, int n) noexcept {
    return {n >= 2   ? vld1q_f64(p)
            : n == 1 ? vsetq_lane_f64(p[0], vdupq_n_f64(0.0), 0)
                     : vdupq_n_f64(0.0)};
  }
  static packet broadcast(double x) noexcept { return {vdupq_n_f64(x)}; }
  static packet zero() noexcept { return {vdupq_n_f64(0.0)}; }
  void store(double* p) const noexcept { vst1q_f64(p, v); }
  void store_partial(double* p, int n) const noexcept {
    if (n >= 2)
      vst1q_f64(p, v);
    else if (n == 1)
      p[0] = vgetq_lane_f64(v, 0);
  }
};

using neon_f32 = packet<float, backend::neon>;
using neon_f64 = packet<double, backend::neon>;

// float
inline neon_f32 operator+(neon_f32 a, neon_f32 b) noexcept { return {vaddq_f32(a.v, b.v)}; }
inline neon_f32 operator-(neon_f32 a, neon_f32 b) noexcept { return {vsubq_f32(a.v, b.v)}; }
inline neon_f32 operator*(neon_f32 a, neon_f32 b) noexcept { return {vmulq_f32(a.v, b.v)}; }
inline neon_f32 fmadd(neon_f32 a, neon_f32 b, neon_f32 c) noexcept {
  return {vfmaq_f32(c.v, a.v, b.v)};
}
inline neon_f32 fnmadd(neon_f32 a, neon_f32 b, neon_f32 c) noexcept {
  return {vfmsq_f32(c.v, a.v, b.v)};
}
inline neon_f32 swap_pairs(neon_f32 a) noexcept { return {vrev64q_f32(a.v)}; }
inline void store_interleaved(float* dst, neon_f32 a, neon_f32 b) noexcept {
  vst1q_f32(dst, vzip1q_f32(a.v, b.v));
  vst1q_f32(dst + 4, vzip2q_f32(a.v, b.v));
}
inline neon_f32 max(neon_f32 a, neon_f32 b) noexcept { return {vmaxq_f32(a.v, b.v)}; }
inline neon_f32 min(neon_f32 a, neon_f32 b) noexcept { return {vminq_f32(a.v, b.v)}; }
inline float reduce_add(neon_f32 a) noexcept { return vaddvq_f32(a.v); }
/// Lane c: the sum of v[c]'s lanes, for c < 4 (pairwise adds of neighbours, twice).
inline neon_f32 reduce_add_each(const neon_f32* v) noexcept {
  return {vpaddq_f32(vpaddq_f32(v[0].v, v[1].v), vpaddq_f32(v[2].v, v[3].v))};
}
inline float reduce_max(neon_f32 a) noexcept { return vmaxvq_f32(a.v); }
inline uint32x4_t less(neon_f32 a, neon_f32 b) noexcept { return vcltq_f32(a.v, b.v); }
inline uint32x4_t equal(neon_f32 a, neon_f32 b) noexcept { return vceqq_f32(a.v, b.v); }
inline neon_f32 select(uint32x4_t m, neon_f32 a, neon_f32 b) noexcept {
  return {vbslq_f32(m, a.v, b.v)};
}
inline neon_f32 abs(neon_f32 a) noexcept { return {vabsq_f32(a.v)}; }
inline neon_f32 round_nearest(neon_f32 a) noexcept { return {vrndnq_f32(a.v)}; }
inline neon_f32 pow2(neon_f32 n) noexcept {
  const int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n.v), vdupq_n_s32(127));
  return {vreinterpretq_f32_s32(vshlq_n_s32(e, 23))};
}

// double
inline neon_f64 operator+(neon_f64 a, neon_f64 b) noexcept { return {vaddq_f64(a.v, b.v)}; }
inline neon_f64 operator-(neon_f64 a, neon_f64 b) noexcept { return {vsubq_f64(a.v, b.v)}; }
inline neon_f64 operator*(neon_f64 a, neon_f64 b) noexcept { return {vmulq_f64(a.v, b.v)}; }
inline neon_f64 fmadd(neon_f64 a, neon_f64 b, neon_f64 c) noexcept {
  return {vfmaq_f64(c.v, a.v, b.v)};
}
inline neon_f64 fnmadd(neon_f64 a, neon_f64 b, neon_f64 c) noexcept {
  return {vfmsq_f64(c.v, a.v, b.v)};
}
inline neon_f64 swap_pairs(neon_f64 a) noexcept { return {vextq_f64(a.v, a.v, 1)}; }
inline neon_f64 max(neon_f64 a, neon_f64 b) noexcept { return {vmaxq_f64(a.v, b.v)}; }
inline neon_f64 min(neon_f64 a, neon_f64 b) noexcept { return {vminq_f64(a.v, b.v)}; }
inline double reduce_add(neon_f64 a) noexcept { return vaddvq_f64(a.v); }
inline double reduce_max(neon_f64 a) noexcept { return vmaxvq_f64(a.v); }

inline void store_interleaved(double* dst, neon_f64 a, neon_f64 b) noexcept {
  vst1q_f64(dst, vzip1q_f64(a.v, b.v));
  vst1q_f64(dst + 2, vzip2q_f64(a.v, b.v));
}
inline void store_interleaved(float* dst, neon_f64 a, neon_f64 b) noexcept {
  const float32x2_t fa = vcvt_f32_f64(a.v), fb = vcvt_f32_f64(b.v);
  vst1q_f32(dst, vcombine_f32(vzip1_f32(fa, fb), vzip2_f32(fa, fb)));
}
inline void store_cvt(float* dst, neon_f64 a) noexcept { vst1_f32(dst, vcvt_f32_f64(a.v)); }

}  // namespace simd
}  // namespace posenc

#endif  // POSENC_ARCH_NEON
