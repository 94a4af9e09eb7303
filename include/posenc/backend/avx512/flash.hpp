#pragma once
/// \file
/// The AVX-512 tiled attention kernel: begin_block / accumulate / finish_block overloaded
/// on `backend::avx512 const&`, with the same online softmax as the portable kernel
/// (backend/scalar/flash.hpp) but its own register-blocked products, so no tile is
/// re-packed the way a general GEMM must.
///
/// Layout: one query row per SIMD lane. A block's queries are transposed once, and every
/// per-tile quantity then keeps rows in lanes:
///
///     Qt [d, 128]     scale · Q_Rᵀ                    (once per block)
///     St [nk, 128]    St[j] = Σ_c K[j, c] · Qt[c]     16 rows per vector, K broadcast
///     m, l            running max / sum, one lane per row (l in double)
///     Ot [dv, 128]    Ot[c] = α·Ot[c] + Σ_j V[j, c] · Pt[j]
///
/// so the row max, the exp and the row sum are vertical (lane-wise) operations on whole
/// vectors, the rescale by α = exp(m_old − m_new) is fused into the P·V kernel's loads, and K
/// and V are read in place (one broadcast per element, no packing). The register tiles are
/// 4 vectors of rows (64 queries) by 6 keys (Q·Kᵀ) or 6 value columns (P·V): 24 of the 32
/// zmm registers hold accumulators.
///
/// Used for float working precision (float, half and bfloat16 storage); policies without a
/// bias, score or value term (none, rotary, absolute: their transforms are applied when the
/// block is loaded), ALiBi and T5 (bias generated per lane); masks made of `causal` and
/// `key_lengths` only; blocks of more than `tiles::decode_rows` queries. Anything else
/// (Shaw, other bias policies, boolean or additive masks, double, decode) takes the
/// portable kernel; begin_block records which in `ws.lanes`, so accumulate and finish_block follow
/// the same path.
///
/// Numerics: the products sum over d in order with one FMA per term; exp is a degree-7
/// polynomial after reduction by ln 2 (about 2 ulp, masked keys exactly 0). Results are
/// deterministic (no dependence on threads) and within the flash parity bound of the
/// reference, but not bit-identical to the portable kernel.
///
/// Not for direct inclusion: use posenc/attention/flash.hpp.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../../config.hpp"
#include "../scalar/flash.hpp"

#if POSENC_ARCH_AVX512
#include <immintrin.h>

namespace posenc {
namespace detail {
namespace flash {
namespace avx512_lanes {

constexpr int lanes = 16;
constexpr int row_vectors = 4;  ///< register tile: 4 vectors of 16 query rows
constexpr int cols = 6;         ///< register tile: 6 keys (Q·Kᵀ) or 6 value dims (P·V)
constexpr __mmask16 all = 0xFFFF;
/// α = 1 for every row of a register tile (a P·V segment after the rescale).
alignas(64) inline constexpr float ones[row_vectors * lanes] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/// Which calls this kernel takes (see the file comment).
template <class Policy, class Real>
constexpr bool supports() {
  return std::is_same_v<Real, float> &&
         (!Policy::has_bias || std::is_same_v<Policy, alibi_policy> ||
          std::is_same_v<Policy, t5_bias_policy>) &&
         !Policy::has_score_term && !Policy::has_value_term && !is_shaw<Policy>::value;
}

/// ALiBi inside the tile, per lane: bias = -m · |ref - j|, j counted from the tile's first
/// key. ref is the row's position (symmetric form, while the row sees its own position)
/// or its last visible key (causal form, or a symmetric row past every visible key),
/// minus the tile's first key: the portable kernel's row shift, and the same float
/// values, since integer distances below 2^24 are exact. (In the last two cases ref - j
/// >= 0 at every visible key, so one |.| serves all three.)
///
/// T5 inside the tile: the bias of lane i (position p0 + i) at key j0 + j is
/// bias_by_rel[j0 + j - p0 - i - rel_min]: in the reversed float table (head_context::
/// t5_reversed) the 16 lanes are 16 consecutive entries starting at t5 - j.
struct lane_bias {
  bool on = false;
  float m = 0.0f;
  const std::int32_t* ref = nullptr;  ///< ALiBi: per lane
  const float* t5 = nullptr;          ///< T5: key 0's entries (nullptr: ALiBi)
};

/// exp(x) for x <= 0 or NaN (the softmax's arguments): x = n ln2 + r, |r| <= ln2 / 2,
/// exp(r) by its degree-7 Taylor polynomial (truncation < 6e-9), 2^n by scalef. Arguments
/// below -110 give exactly 0 (2^-159 underflows); NaN stays NaN. The maskz forms avoid
/// GCC 12's -Wmaybe-uninitialized on the unmasked intrinsics (see simd/avx512.hpp).
inline __m512 exp_nonpositive(__m512 x) noexcept {
  x = _mm512_maskz_max_ps(all, _mm512_set1_ps(-110.0f), x);  // NaN in x: x is returned
  const __m512 n = _mm512_maskz_roundscale_ps(
      all, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 in two parts: n · 0.693359375 is exact for |n| < 2^15
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(all, p, n);
}

/// St[j, rows] = Σ_c K[j, c] Qt[c, rows] for C keys and R vectors of rows.
template <int R, int C>
inline void qk_tile(const float* qt, Index ldq, const float* k, Index ldk, Index d, float* st,
                    Index lds) noexcept {
  __m512 acc[C][R];
  for (int j = 0; j < C; ++j)
    for (int r = 0; r < R; ++r) acc[j][r] = _mm512_setzero_ps();
  for (Index c = 0; c < d; ++c) {
    __m512 q[R];
    for (int r = 0; r < R; ++r) q[r] = _mm512_loadu_ps(qt + c * ldq + r * lanes);
    for (int j = 0; j < C; ++j) {
      const __m512 kb = _mm512_set1_ps(k[j * ldk + c]);
      for (int r = 0; r < R; ++r) acc[j][r] = _mm512_fmadd_ps(kb, q[r], acc[j][r]);
    }
  }
  for (int j = 0; j < C; ++j)
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(st + j * lds + r * lanes, acc[j][r]);
}

/// Ot[c, rows] = α[rows] Ot[c, rows] + Σ_j V[j, c] Pt[j, rows] for C value dims, R vectors
/// of rows, nk keys. The tile's sum starts from 0 and is added to the rescaled Ot once:
/// over a long sequence each rounding is then relative to one tile's sum, not to the
/// whole running output (summing into Ot key by key loses about sqrt(tiles) more).
template <int R, int C>
inline void pv_tile(const float* pt, Index ldp, const float* v, Index ldv, Index nk,
                    const float* alpha, float* ot, Index ldo) noexcept {
  __m512 acc[C][R];
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) acc[c][r] = _mm512_setzero_ps();
  for (Index j = 0; j < nk; ++j) {
    __m512 p[R];
    for (int r = 0; r < R; ++r) p[r] = _mm512_loadu_ps(pt + j * ldp + r * lanes);
    for (int c = 0; c < C; ++c) {
      const __m512 vb = _mm512_set1_ps(v[j * ldv + c]);
      for (int r = 0; r < R; ++r) acc[c][r] = _mm512_fmadd_ps(vb, p[r], acc[c][r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_loadu_ps(alpha + r * lanes);
    for (int c = 0; c < C; ++c) {
      float* o = ot + c * ldo + r * lanes;
      _mm512_storeu_ps(o, _mm512_fmadd_ps(a, _mm512_loadu_ps(o), acc[c][r]));
    }
  }
}

/// The register tile for the remaining rows (1..4 vectors) and keys / dims (1..6).
template <int R>
inline void qk_cols(int c, const float* qt, Index ldq, const float* k, Index ldk, Index d,
                    float* st, Index lds) noexcept {
  switch (c) {
    case 6: qk_tile<R, 6>(qt, ldq, k, ldk, d, st, lds); break;
    case 5: qk_tile<R, 5>(qt, ldq, k, ldk, d, st, lds); break;
    case 4: qk_tile<R, 4>(qt, ldq, k, ldk, d, st, lds); break;
    case 3: qk_tile<R, 3>(qt, ldq, k, ldk, d, st, lds); break;
    case 2: qk_tile<R, 2>(qt, ldq, k, ldk, d, st, lds); break;
    default: qk_tile<R, 1>(qt, ldq, k, ldk, d, st, lds); break;
  }
}
inline void qk(int r, int c, const float* qt, Index ldq, const float* k, Index ldk, Index d,
               float* st, Index lds) noexcept {
  switch (r) {
    case 4: qk_cols<4>(c, qt, ldq, k, ldk, d, st, lds); break;
    case 3: qk_cols<3>(c, qt, ldq, k, ldk, d, st, lds); break;
    case 2: qk_cols<2>(c, qt, ldq, k, ldk, d, st, lds); break;
    default: qk_cols<1>(c, qt, ldq, k, ldk, d, st, lds); break;
  }
}
template <int R>
inline void pv_cols(int c, const float* pt, Index ldp, const float* v, Index ldv, Index nk,
                    const float* alpha, float* ot, Index ldo) noexcept {
  switch (c) {
    case 6: pv_tile<R, 6>(pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    case 5: pv_tile<R, 5>(pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    case 4: pv_tile<R, 4>(pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    case 3: pv_tile<R, 3>(pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    case 2: pv_tile<R, 2>(pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    default: pv_tile<R, 1>(pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
  }
}
inline void pv(int r, int c, const float* pt, Index ldp, const float* v, Index ldv, Index nk,
               const float* alpha, float* ot, Index ldo) noexcept {
  switch (r) {
    case 4: pv_cols<4>(c, pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    case 3: pv_cols<3>(c, pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    case 2: pv_cols<2>(c, pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
    default: pv_cols<1>(c, pt, ldp, v, ldv, nk, alpha, ot, ldo); break;
  }
}

/// Online softmax of one vector of rows over the tile's nk keys, in place on St (logits ->
/// probabilities): updates m (float lanes) and l (double lanes) and writes α. `vis[lane]`
/// is how many of the tile's first nk keys the row sees (a prefix: causal and key_lengths).
inline void softmax_lanes(float* st, Index lds, Index nk, const std::int32_t* vis, float* m,
                          double* l, float* alpha, const lane_bias& bias) noexcept {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const __m512i visible = _mm512_loadu_si512(vis);
  if (bias.on && bias.t5) {  // add the bias once, in place: both passes below read it
    for (Index j = 0; j < nk; ++j) {
      float* s = st + j * lds;
      _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), _mm512_loadu_ps(bias.t5 - j)));
    }
  } else if (bias.on) {
    const __m512i ref = _mm512_loadu_si512(bias.ref);
    const __m512 slope = _mm512_set1_ps(bias.m);
    for (Index j = 0; j < nk; ++j) {
      const __m512i dist = _mm512_maskz_abs_epi32(all, _mm512_sub_epi32(ref, _mm512_set1_epi32(static_cast<int>(j))));
      float* s = st + j * lds;
      _mm512_storeu_ps(s, _mm512_sub_ps(_mm512_loadu_ps(s), _mm512_mul_ps(slope, _mm512_maskz_cvtepi32_ps(all, dist))));
    }
  }
  // every lane sees every key: no per-key mask (the common case away from the diagonal)
  const bool full = _mm512_cmpge_epi32_mask(visible, _mm512_set1_epi32(static_cast<int>(nk))) == all;
  const __m512 m_old = _mm512_loadu_ps(m);
  __m512 mx = m_old;
  if (full) {
    for (Index j = 0; j < nk; ++j) mx = _mm512_maskz_max_ps(all, _mm512_loadu_ps(st + j * lds), mx);
  } else {
    for (Index j = 0; j < nk; ++j) {
      const __mmask16 seen = _mm512_cmpgt_epi32_mask(visible, _mm512_set1_epi32(static_cast<int>(j)));
      // a NaN logit is passed over here (max returns its second operand) and turns the
      // row's sum into NaN below
      mx = _mm512_mask_max_ps(mx, seen, _mm512_loadu_ps(st + j * lds), mx);
    }
  }
  // α = exp(m_old - m_new); 1 where the max did not move (also when both are -inf)
  const __mmask16 same = _mm512_cmp_ps_mask(m_old, mx, _CMP_EQ_OQ);
  const __m512 a = _mm512_mask_mov_ps(exp_nonpositive(_mm512_sub_ps(m_old, mx)), same,
                                      _mm512_set1_ps(1.0f));
  // rows whose max is still -inf saw no finite logit: their keys give 0 unless NaN
  const __mmask16 none = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(neg_inf), _CMP_EQ_OQ);
  __m512 sum = _mm512_setzero_ps();
  for (Index j = 0; j < nk; ++j) {
    float* s = st + j * lds;
    const __m512 x = _mm512_loadu_ps(s);
    __mmask16 keep = full ? all : _mm512_cmpgt_epi32_mask(visible, _mm512_set1_epi32(static_cast<int>(j)));
    if (none) keep &= static_cast<__mmask16>(~none | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q));
    const __m512 p = _mm512_maskz_mov_ps(keep, exp_nonpositive(_mm512_sub_ps(x, mx)));
    _mm512_storeu_ps(s, p);
    sum = _mm512_add_ps(sum, p);
  }
  _mm512_storeu_ps(m, mx);
  _mm512_storeu_ps(alpha, a);
  // l = α l + Σ p, in double (two halves of 8 lanes)
  const __m512d a_lo = _mm512_maskz_cvtps_pd(0xFF, _mm512_maskz_extractf32x8_ps(0xFF, a, 0));
  const __m512d a_hi = _mm512_maskz_cvtps_pd(0xFF, _mm512_maskz_extractf32x8_ps(0xFF, a, 1));
  const __m512d s_lo = _mm512_maskz_cvtps_pd(0xFF, _mm512_maskz_extractf32x8_ps(0xFF, sum, 0));
  const __m512d s_hi = _mm512_maskz_cvtps_pd(0xFF, _mm512_maskz_extractf32x8_ps(0xFF, sum, 1));
  _mm512_storeu_pd(l, _mm512_fmadd_pd(_mm512_loadu_pd(l), a_lo, s_lo));
  _mm512_storeu_pd(l + 8, _mm512_fmadd_pd(_mm512_loadu_pd(l + 8), a_hi, s_hi));
}

/// Query rows of the block padded to whole vectors.
inline Index padded_rows(Index nb) noexcept { return (nb + lanes - 1) / lanes * lanes; }

}  // namespace avx512_lanes

/// Loads a block like the portable kernel, then (when this kernel takes the call)
/// transposes it to Qt and resets the lane statistics of the padding rows.
template <class Policy, class Real, class TQ>
Index begin_block(const head_context<Policy, Real>& hc, const call_info& ci,
                  const strided_view<TQ, 2>& q, Index r0, Index nb, workspace<Real>& ws,
                  backend::avx512 const&) noexcept {
  const Index max_lim = begin_block(hc, ci, q, r0, nb, ws, backend::scalar{});
  ws.lanes = false;
  if constexpr (avx512_lanes::supports<Policy, Real>()) {
    const attention_mask& mask = *ci.mask;
    const bool exact_distances = !std::is_same_v<Policy, alibi_policy> || ci.shape.len_k < (Index(1) << 24);
    if (nb > tiles<Real>::decode_rows && mask.allowed.size() == 0 && mask.additive.size() == 0 &&
        exact_distances) {
      ws.lanes = true;
      const Index d = ci.shape.dim, dv = ci.shape.dim_v, w = avx512_lanes::padded_rows(nb);
      // a plain loop: Eigen's AVX-512 transpose kernels trip GCC 12's
      // -Wmaybe-uninitialized once inlined (see simd/avx512.hpp)
      for (Index c = 0; c < d; ++c) {
        Real* dst = ws.qt.row(c).data();
        for (Index r = 0; r < nb; ++r) dst[r] = ws.q(r, c);
        std::fill(dst + nb, dst + w, Real(0));
      }
      ws.ot.topLeftCorner(dv, w).setZero();
      for (Index r = nb; r < w; ++r) {  // padding rows: see nothing, add nothing
        const std::size_t ur = static_cast<std::size_t>(r);
        ws.m[ur] = -std::numeric_limits<Real>::infinity();
        ws.l[ur] = 0.0;
        ws.lim[ur] = 0;
      }
    }
  }
  return max_lim;
}

/// Visits keys [kbeg, kend) for the block's rows (see the file comment).
template <class Policy, class Real>
void accumulate(const head_context<Policy, Real>& hc, const call_info& ci, Index r0,
                Index nb, Index kbeg, Index kend, workspace<Real>& ws,
                backend::avx512 const&) noexcept {
  if constexpr (avx512_lanes::supports<Policy, Real>()) {
    if (ws.lanes) {
      namespace al = avx512_lanes;
      constexpr Index bk = tiles<Real>::block_k;
      const Index d = ci.shape.dim, dv = ci.shape.dim_v, w = al::padded_rows(nb);
      const Index vectors = w / al::lanes;
      const Index ldq = ws.qt.cols(), lds = ws.st.cols(), ldo = ws.ot.cols();
      alignas(64) std::int32_t vis[tiles<Real>::block_q];
      alignas(64) std::int32_t ref[tiles<Real>::block_q];
      alignas(64) float alpha[tiles<Real>::block_q];
      al::lane_bias bias;
      if constexpr (std::is_same_v<Policy, alibi_policy>) {
        bias.on = true;
        bias.m = static_cast<float>(hc.head.m);
        bias.ref = ref;
      }
      if constexpr (std::is_same_v<Policy, t5_bias_policy>) bias.on = true;
      for (Index j0 = kbeg; j0 < kend; j0 += bk) {
        const Index nk = std::min(bk, kend - j0);
        for (Index r = 0; r < w; ++r)
          vis[r] = static_cast<std::int32_t>(
              std::clamp<Index>(ws.lim[static_cast<std::size_t>(r)] - j0, 0, nk));
        if constexpr (std::is_same_v<Policy, alibi_policy>) {
          // |ref| <= len_k < 2^24 where a row sees a key (begin_block checked len_k)
          for (Index r = 0; r < w; ++r) {
            // padding rows (lim = 0) never form their position: it may not be representable
            const Index lim = ws.lim[static_cast<std::size_t>(r)], last = lim - 1;
            const bool sym = hc.head.symmetric && lim > 0 && ci.shape.q_offset + r0 + r <= last;
            ref[r] = lim == 0 ? 0
                              : static_cast<std::int32_t>((sym ? ci.shape.q_offset + r0 + r : last) - j0);
          }
        }
        for (Index rv = 0; rv < vectors; rv += al::row_vectors) {
          const int nr = static_cast<int>(std::min<Index>(al::row_vectors, vectors - rv));
          // ext[v]: keys [0, ext[v]) of the tile are seen by some row of vector v. Segment
          // s runs keys [pm[s-1], pm[s]) (pm: running max of ext) on vectors s..nr-1, the
          // only ones that see them, so a causal diagonal tile costs its own triangle,
          // rounded to 16 rows, rather than the whole 64 x nk square.
          Index ext[al::row_vectors], pm[al::row_vectors];
          for (int v = 0; v < nr; ++v) {
            const std::int32_t* vv = vis + (rv + v) * al::lanes;
            ext[v] = *std::max_element(vv, vv + al::lanes);
            pm[v] = std::max(ext[v], v > 0 ? pm[v - 1] : Index(0));
          }
          const Index ext_all = pm[nr - 1];
          for (int sg = 0; sg < nr; ++sg) {
            const Index lo = sg > 0 ? pm[sg - 1] : 0;
            const float* qt = ws.qt.data() + (rv + sg) * al::lanes;
            float* st = ws.st.data() + (rv + sg) * al::lanes;
            for (Index j = lo; j < pm[sg]; j += al::cols)
              al::qk(nr - sg, static_cast<int>(std::min<Index>(al::cols, pm[sg] - j)), qt, ldq,
                     hc.k.data + (j0 + j) * hc.k.ld, hc.k.ld, d, st + j * lds, lds);
          }
          for (int v = 0; v < nr; ++v) {
            float* st = ws.st.data() + (rv + v) * al::lanes;
            const Index o = (rv + v) * al::lanes;
            if constexpr (std::is_same_v<Policy, alibi_policy>) bias.ref = ref + o;
            if constexpr (std::is_same_v<Policy, t5_bias_policy>) {
              // entry of lane 0 (a real row) at key j0: t = size - 1 - (j0 - p0 - rel_min)
              const Index p0 = ci.shape.q_offset + r0 + o;
              const Index t = static_cast<Index>(hc.head.bias_by_rel.size()) - 1 -
                              (j0 - p0 - hc.head.rel_min);
              bias.t5 = hc.t5_reversed.data() + t;
            }
            al::softmax_lanes(st, lds, ext[v], vis + o, ws.m.data() + o, ws.l.data() + o, alpha + o,
                              bias);
            // keys the vector does not see but its segment's P·V reads: probability 0
            for (Index j = ext[v]; j < ext_all; ++j) std::fill(st + j * lds, st + j * lds + al::lanes, 0.0f);
          }
          if (ext_all == 0) continue;  // α = 1 and nothing to add
          const float* a = alpha + rv * al::lanes;
          if (ext[0] == ext_all) {  // one segment: the rescale fused into the product
            for (Index c = 0; c < dv; c += al::cols)
              al::pv(nr, static_cast<int>(std::min<Index>(al::cols, dv - c)),
                     ws.st.data() + rv * al::lanes, lds, hc.v.data + j0 * hc.v.ld + c, hc.v.ld,
                     ext_all, a, ws.ot.data() + c * ldo + rv * al::lanes, ldo);
            continue;
          }
          for (Index c = 0; c < dv; ++c) {
            float* o = ws.ot.data() + c * ldo + rv * al::lanes;
            for (Index e = 0; e < nr * al::lanes; ++e) o[e] *= a[e];
          }
          for (int sg = 0; sg < nr; ++sg) {
            const Index lo = sg > 0 ? pm[sg - 1] : 0;
            if (lo == pm[sg]) continue;
            for (Index c = 0; c < dv; c += al::cols)
              al::pv(nr - sg, static_cast<int>(std::min<Index>(al::cols, dv - c)),
                     ws.st.data() + lo * lds + (rv + sg) * al::lanes, lds,
                     hc.v.data + (j0 + lo) * hc.v.ld + c, hc.v.ld, pm[sg] - lo, al::ones,
                     ws.ot.data() + c * ldo + (rv + sg) * al::lanes, ldo);
          }
        }
      }
      return;
    }
  }
  accumulate(hc, ci, r0, nb, kbeg, kend, ws, backend::scalar{});
}

/// Normalises and writes the block (transposing back from Ot when this kernel ran it).
template <class Policy, class Real, class TO>
void finish_block(const head_context<Policy, Real>& hc, Index r0, Index nb,
                  workspace<Real>& ws, const strided_view<TO, 2>& out,
                  backend::avx512 const&) noexcept {
  if (!ws.lanes) {
    finish_block(hc, r0, nb, ws, out, backend::scalar{});
    return;
  }
  using T = std::remove_cv_t<TO>;
  const Index dv = out.extent(1);
  for (Index r = 0; r < nb; ++r) {
    const Real inv = inverse_sum<Real>(ws.l[static_cast<std::size_t>(r)]);
    for (Index c = 0; c < dv; ++c) out(r0 + r, c) = static_cast<T>(ws.ot(c, r) * inv);
  }
}

}  // namespace flash
}  // namespace detail
}  // namespace posenc

#endif  // POSENC_ARCH_AVX512
