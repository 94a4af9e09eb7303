#pragma once
/// \file
/// The SIMD tiled attention kernel, written once on float packets (packet.hpp) for every
/// tag that has them (avx2, avx512, neon): begin_block / accumulate / finish_block
/// overloaded on the tag, with the same online softmax as the portable kernel
/// (backend/scalar/flash.hpp) but its own register-blocked products, so no tile is
/// re-packed the way a general GEMM must (V's rows are copied, see accumulate).
///
/// Layout: one query row per SIMD lane. A block's queries are transposed once, and every
/// per-tile quantity then keeps rows in lanes (W = lanes of the packet):
///
///     Qt [d, 128]     log2(e) · scale · Q_Rᵀ          (once per block)
///     St [nk, 128]    St[j] = Σ_c K[j, c] · Qt[c]     W rows per vector, K broadcast
///     m, l            running max / sum, one lane per row (l in double)
///     Ot [dv, 128]    Ot[c] = α·Ot[c] + Σ_j V[j, c] · Pt[j]
///
/// so the row max, the exp and the row sum are vertical (lane-wise) operations on whole
/// vectors, the rescale by α = 2^(m_old − m_new) is fused into the P·V kernel's loads, and K
/// and V are read with one broadcast per element (K in place, V's rows copied per key
/// tile to a stride that spreads them over L1's sets). The register tile is
/// R vectors of rows by C keys (Q·Kᵀ) or C value columns (P·V), sized per architecture
/// (register_tile below) so that R·C accumulators, R row vectors and one broadcast fit in
/// the register file.
///
/// Used for float working precision (float, half and bfloat16 storage); policies without a
/// bias, score or value term (none, rotary, absolute: their transforms are applied when the
/// block is loaded), ALiBi and T5 (bias generated per lane); masks made of `causal` and
/// `key_lengths` only; blocks of more than `tiles::decode_rows` queries. Anything else
/// (Shaw, other bias policies, boolean or additive masks, double, decode) takes the
/// portable kernel; begin_block records which in `ws.lanes`, so accumulate and
/// finish_block follow the same path.
///
/// Numerics: the logits are in base 2 (log2(e) is folded into the query scale, and into
/// the ALiBi slope and the T5 table), so softmax needs 2^x, whose reduction x = n + r is
/// exact: a degree-6 polynomial for 2^r times 2^n (under 1 ulp where the result is normal,
/// tested; probabilities below 2^-126 may be flushed to 0, masked keys are exactly 0).
/// Each query element is still rounded to float once, times scale · log2(e) in double.
/// Results do not depend on the thread count and are within the flash parity bound of the
/// reference, not bit-identical to the portable kernel. Each lane does the same IEEE
/// operations on every architecture, but the causal diagonal's per-vector segments (16, 8
/// or 4 rows) round the P·V sums differently, so the widths agree to about 1e-7, not bit
/// for bit.
///
/// Not for direct inclusion: use posenc/attention/flash.hpp.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "../../config.hpp"
#include "../../math/alibi.hpp"
#include "../scalar/flash.hpp"
#include "packets.hpp"

namespace posenc {
namespace kernels {
namespace flash {
namespace lanes {

/// Register tile of a tag: `rows` vectors of query rows by `cols` keys or value dims, and
/// the most K and V floats a 256-key tile may hold (key_tile), from the number of vector
/// registers its float packet declares:
///   32 (zmm, NEON's q): 4 x 6 accumulators + 4 rows + 1 broadcast; 256-key tiles always;
///   16 (ymm):           2 x 6 accumulators + 2 rows + 1 broadcast; 128-key tiles once
///                       d + dv > 64.
template <class Arch>
struct register_tile {
  static constexpr bool wide = simd::packet<float, Arch>::registers >= 32;
  static constexpr int rows = wide ? 4 : 2, cols = 6;
  static constexpr Index kv_floats = wide ? std::numeric_limits<Index>::max() : 256 * 64;
};

/// True for the tags this kernel serves in this compilation: those with float packets, or
/// built on a tag that has them (simd::packet_arch_t).
template <class Tag>
inline constexpr bool has_kernel_v = simd::has_packet_arch_v<Tag>;

/// Which calls this kernel takes (see the file comment): float working precision, and a
/// policy without a score or value term whose bias, if any, it generates per lane.
template <class Policy, class Real>
constexpr bool supports() {
  constexpr position_bias form = bias_form_v<Policy>;
  return std::is_same_v<Real, float> &&
         (form == position_bias::none || form == position_bias::linear_distance ||
          form == position_bias::distance_table);
}

/// α = 1 for every row of a register tile (a P·V segment after the rescale): enough for
/// the widest tile, 4 vectors of 16 lanes.
alignas(64) inline constexpr float ones[64] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/// A linear-distance bias (ALiBi) inside the tile, per lane: bias = -m · |ref - j|, j
/// counted from the tile's first key, m the slope times log2(e), ref the row's
/// math::alibi_reference minus the tile's first key: the portable kernel's row shift
/// (integer distances below 2^24 are exact in float).
///
/// A distance table (T5) inside the tile: the bias of lane i (position p0 + i) at key
/// j0 + j is log2(e) · bias_by_rel[j0 + j - p0 - i - rel_min]: in the reversed float table
/// (head_context::table_reversed) the lanes of a vector are consecutive entries from
/// table - j.
struct lane_bias {
  bool on = false;
  float m = 0.0f;
  const float* ref = nullptr;    ///< linear distance: per lane
  const float* table = nullptr;  ///< distance table: key 0's entries (nullptr: linear)
};

/// 2^x for x <= 0 or NaN (the softmax's arguments): n = round(x), r = x - n (exact, |r|
/// <= 1/2), 2^r by a degree-6 polynomial (minimax for the relative error on [-1/2, 1/2]:
/// 1.9e-9; 0.93 ulp measured with float coefficients and FMAs), times 2^n from the
/// exponent field. Arguments are clamped at -127, where 2^n becomes 0: results below
/// about 2^-126.5 are 0 (-inf gives 0, as it must for a row that saw no finite logit); NaN
/// stays NaN.
template <class P>
inline P exp2_nonpositive(P x) noexcept {
  x = max(P::broadcast(-127.0f), x);  // a NaN x stays: x86 returns the second operand
  const P n = round_nearest(x);
  const P r = x - n;
  P p = P::broadcast(1.53458110e-4f);
  p = fmadd(p, r, P::broadcast(1.33999309e-3f));
  p = fmadd(p, r, P::broadcast(9.61848907e-3f));
  p = fmadd(p, r, P::broadcast(5.55032864e-2f));
  p = fmadd(p, r, P::broadcast(2.40226462e-1f));
  p = fmadd(p, r, P::broadcast(6.93147182e-1f));
  p = fmadd(p, r, P::broadcast(1.0f));
  return p * pow2(n);
}

/// St[j, rows] = Σ_c K[j, c] Qt[c, rows] for C keys and R vectors of rows.
template <class P, int R, int C>
inline void qk_tile(const float* qt, Index ldq, const float* k, Index ldk, Index d, float* st,
                    Index lds) noexcept {
  P acc[std::size_t{C}][std::size_t{R}];  // array bounds are unsigned
  POSENC_UNROLL
  for (int j = 0; j < C; ++j) {
    POSENC_UNROLL
    for (int r = 0; r < R; ++r) acc[j][r] = P::zero();
  }
  for (Index c = 0; c < d; ++c) {
    P q[std::size_t{R}];
    POSENC_UNROLL
    for (int r = 0; r < R; ++r) q[r] = P::load(qt + c * ldq + r * P::size);
    POSENC_UNROLL
    for (int j = 0; j < C; ++j) {
      const P kb = P::broadcast(k[j * ldk + c]);
      POSENC_UNROLL
      for (int r = 0; r < R; ++r) acc[j][r] = fmadd(kb, q[r], acc[j][r]);
    }
  }
  POSENC_UNROLL
  for (int j = 0; j < C; ++j) {
    POSENC_UNROLL
    for (int r = 0; r < R; ++r) acc[j][r].store(st + j * lds + r * P::size);
  }
}

/// Ot[c, rows] = α[rows] Ot[c, rows] + Σ_j V[j, c] Pt[j, rows] for C value dims, R vectors
/// of rows, nk keys. The tile's sum starts from 0 and is added to the rescaled Ot once:
/// over a long sequence each rounding is then relative to one tile's sum, not to the
/// whole running output (summing into Ot key by key loses about sqrt(tiles) more).
template <class P, int R, int C>
inline void pv_tile(const float* pt, Index ldp, const float* v, Index ldv, Index nk,
                    const float* alpha, float* ot, Index ldo) noexcept {
  P acc[std::size_t{C}][std::size_t{R}];
  POSENC_UNROLL
  for (int c = 0; c < C; ++c) {
    POSENC_UNROLL
    for (int r = 0; r < R; ++r) acc[c][r] = P::zero();
  }
  for (Index j = 0; j < nk; ++j) {
    P p[std::size_t{R}];
    POSENC_UNROLL
    for (int r = 0; r < R; ++r) p[r] = P::load(pt + j * ldp + r * P::size);
    POSENC_UNROLL
    for (int c = 0; c < C; ++c) {
      const P vb = P::broadcast(v[j * ldv + c]);
      POSENC_UNROLL
      for (int r = 0; r < R; ++r) acc[c][r] = fmadd(vb, p[r], acc[c][r]);
    }
  }
  POSENC_UNROLL
  for (int r = 0; r < R; ++r) {
    const P a = P::load(alpha + r * P::size);
    POSENC_UNROLL
    for (int c = 0; c < C; ++c) {
      float* o = ot + c * ldo + r * P::size;
      fmadd(a, P::load(o), acc[c][r]).store(o);
    }
  }
}

/// Runs kernel<R, C> for run-time r in 1..R_max and c in 1..C_max (the edges of a block).
template <int R, int C, class F>
inline void dispatch_cols(int c, F&& f) noexcept {
  if constexpr (C > 1) {
    if (c < C) return dispatch_cols<R, C - 1>(c, f);
  }
  f(std::integral_constant<int, R>{}, std::integral_constant<int, C>{});
}
template <int R, int C, class F>
inline void dispatch(int r, int c, F&& f) noexcept {
  if constexpr (R > 1) {
    if (r < R) return dispatch<R - 1, C>(r, c, f);
  }
  dispatch_cols<R, C>(c, f);
}

template <class Arch>
inline void qk(int r, int c, const float* qt, Index ldq, const float* k, Index ldk, Index d,
               float* st, Index lds) noexcept {
  using T = register_tile<Arch>;
  dispatch<T::rows, T::cols>(r, c, [&](auto R, auto C) {
    qk_tile<simd::packet<float, Arch>, decltype(R)::value, decltype(C)::value>(qt, ldq, k, ldk, d,
                                                                               st, lds);
  });
}
template <class Arch>
inline void pv(int r, int c, const float* pt, Index ldp, const float* v, Index ldv, Index nk,
               const float* alpha, float* ot, Index ldo) noexcept {
  using T = register_tile<Arch>;
  dispatch<T::rows, T::cols>(r, c, [&](auto R, auto C) {
    pv_tile<simd::packet<float, Arch>, decltype(R)::value, decltype(C)::value>(pt, ldp, v, ldv, nk,
                                                                               alpha, ot, ldo);
  });
}

/// Online softmax of one vector of rows over the tile's nk keys, in place on St (logits ->
/// probabilities): updates m (float lanes) and l (double lanes) and writes α. `vis[lane]`
/// is how many of the tile's first nk keys the row sees (a prefix: causal and key_lengths),
/// as an exact float; every lane sees the first `low` keys, so only keys [low, nk) need
/// the per-lane test (on a causal diagonal, a vector's last W keys at most).
template <class P>
inline void softmax_lanes(float* st, Index lds, Index nk, const float* vis, Index low, float* m,
                          double* l, float* alpha, const lane_bias& bias) noexcept {
  const P neg_inf = P::broadcast(-std::numeric_limits<float>::infinity());
  const P visible = P::load(vis);
  if (bias.on && bias.table) {  // add the bias once, in place: both passes below read it
    for (Index j = 0; j < nk; ++j) {
      float* s = st + j * lds;
      (P::load(s) + P::load(bias.table - j)).store(s);
    }
  } else if (bias.on) {
    const P ref = P::load(bias.ref), slope = P::broadcast(bias.m);
    for (Index j = 0; j < nk; ++j) {
      float* s = st + j * lds;
      const P dist = abs(ref - P::broadcast(static_cast<float>(j)));
      (P::load(s) - slope * dist).store(s);
    }
  }
  const P m_old = P::load(m);
  // a NaN logit is passed over here on x86 (max returns its second operand), made the max
  // on NEON; either way it turns the row's sum into NaN below. Four running maxima, since
  // one would wait on max's latency at every key.
  P mx4[4] = {m_old, m_old, m_old, m_old};
  Index j4 = 0;
  for (; j4 + 4 <= low; j4 += 4)
    for (int u = 0; u < 4; ++u) mx4[u] = max(P::load(st + (j4 + u) * lds), mx4[u]);
  P mx = max(max(mx4[0], mx4[1]), max(mx4[2], mx4[3]));
  // the rest, with the per-lane test (every lane sees the keys below `low`)
  for (Index j = j4; j < nk; ++j)
    mx = select(less(P::broadcast(static_cast<float>(j)), visible), max(P::load(st + j * lds), mx),
                mx);
  // α = 2^(m_old - m_new); 1 where the max did not move (also when both are -inf)
  const P a = select(equal(m_old, mx), P::broadcast(1.0f), exp2_nonpositive(m_old - mx));
  // rows whose max is still -inf saw no finite logit: subtracting 0 instead gives exp(-inf)
  // = 0 for their keys, NaN for a NaN one
  const P shift = select(equal(mx, neg_inf), P::zero(), mx);
  // two partial sums (even and odd keys), so that consecutive keys' exponentials overlap
  P sum = P::zero(), sum_odd = P::zero();
  Index j2 = 0;
  for (; j2 + 2 <= low; j2 += 2) {
    float* s = st + j2 * lds;
    const P p0 = exp2_nonpositive(P::load(s) - shift),
            p1 = exp2_nonpositive(P::load(s + lds) - shift);
    p0.store(s);
    p1.store(s + lds);
    sum = sum + p0;
    sum_odd = sum_odd + p1;
  }
  for (Index j = j2; j < nk; ++j) {
    float* s = st + j * lds;
    const P p = select(less(P::broadcast(static_cast<float>(j)), visible),
                       exp2_nonpositive(P::load(s) - shift), P::zero());
    p.store(s);
    sum = sum + p;
  }
  sum = sum + sum_odd;
  mx.store(m);
  a.store(alpha);
  // l = α l + Σ p, in double
  alignas(64) float sums[P::size];
  sum.store(sums);
  for (int i = 0; i < P::size; ++i)
    l[i] = std::fma(l[i], static_cast<double>(alpha[i]), static_cast<double>(sums[i]));
}

/// Keys per tile: 256 (the portable kernel's), or 128 where K and V rows take more than
/// `register_tile::kv_floats / 256` floats together. With heads interleaved ([B, L, H, d])
/// the rows of a tile lie H·d floats apart and share a fraction of L2's sets; a 16-register
/// kernel streams each tile through L1 for eight vectors of rows, and a 128-key tile's K
/// (32 KiB at d = 64) no longer evicts the logits the softmax reads next. A/B runs:
/// docs/benchmarks-history.md.
template <class Arch>
inline Index key_tile(Index d, Index dv) noexcept {
  return (d + dv) * 256 <= register_tile<Arch>::kv_floats ? 256 : 128;
}

/// dst[c, r] = src[r, c] for r < rows, c < cols: W x W squares in registers
/// (P::transpose), the edges element by element. The block's queries go in (Q -> Qt) and
/// its outputs come out (Ot -> O) this way: element by element (strided loads or stores),
/// the two took a visible share of a short causal attention's time.
template <class P>
inline void transpose(const float* src, Index lds, Index rows, Index cols, float* dst,
                      Index ldd) noexcept {
  constexpr Index W = P::size;
  const Index rows_w = rows / W * W, cols_w = cols / W * W;
  for (Index r = 0; r < rows_w; r += W) {
    for (Index c = 0; c < cols_w; c += W)
      P::transpose(src + r * lds + c, lds, dst + c * ldd + r, ldd);
    for (Index c = cols_w; c < cols; ++c)
      for (Index i = r; i < r + W; ++i) dst[c * ldd + i] = src[i * lds + c];
  }
  for (Index c = 0; c < cols; ++c)
    for (Index i = rows_w; i < rows; ++i) dst[c * ldd + i] = src[i * lds + c];
}

/// Query rows of the block padded to whole vectors.
template <class Arch>
inline Index padded_rows(Index nb) noexcept {
  constexpr Index w = simd::packet<float, Arch>::size;
  return (nb + w - 1) / w * w;
}

}  // namespace lanes

/// Loads a block like the portable kernel, then (when this kernel takes the call)
/// transposes it to Qt and resets the lane statistics of the padding rows.
template <class Policy, class Real, class TQ, class Tag,
          std::enable_if_t<lanes::has_kernel_v<Tag>, int> = 0>
Index begin_block(const head_context<Policy, Real>& hc, const call_info& ci,
                  const strided_view<TQ, 2>& q, Index r0, Index nb, workspace<Real>& ws,
                  Tag const&) noexcept {
  using Arch = simd::packet_arch_t<Tag>;
  bool take = false;
  if constexpr (lanes::supports<Policy, Real>()) {
    const attention_mask& mask = *ci.mask;
    const bool exact_distances =
        bias_form_v<Policy> != position_bias::linear_distance || ci.shape.len_k < (Index(1) << 24);
    take = nb > tiles<Real>::decode_rows && mask.allowed.size() == 0 && mask.additive.size() == 0 &&
           exact_distances;
  }
  if (!take) return begin_block(hc, ci, q, r0, nb, ws, backend::scalar{});
  POSENC_KERNEL_TRACE("flash_tiles", Arch::name());
  call_info base2 = ci;  // base-2 logits (see the file comment)
  base2.scale = ci.scale * log2_e;
  const Index max_lim = load_block(hc, base2, q, r0, nb, ws);
  ws.lanes = true;
  const Index d = ci.shape.dim, dv = ci.shape.dim_v, w = lanes::padded_rows<Arch>(nb);
  if constexpr (std::is_same_v<Real, float>)  // take: only float blocks get here
    lanes::transpose<simd::packet<float, Arch>>(ws.q.data(), ws.q.cols(), nb, d, ws.qt.data(),
                                                ws.qt.cols());
  for (Index c = 0; c < d; ++c) std::fill(&ws.qt(c, nb), &ws.qt(c, 0) + w, Real(0));
  ws.ot.topLeftCorner(dv, w).setZero();
  for (Index r = nb; r < w; ++r) {  // padding rows: see nothing, add nothing
    const std::size_t ur = static_cast<std::size_t>(r);
    ws.m[ur] = -std::numeric_limits<Real>::infinity();
    ws.l[ur] = 0.0;
    ws.lim[ur] = 0;
  }
  return max_lim;
}

/// Visits keys [kbeg, kend) for the block's rows (see the file comment).
template <class Policy, class Real, class Tag, std::enable_if_t<lanes::has_kernel_v<Tag>, int> = 0>
void accumulate(const head_context<Policy, Real>& hc, const call_info& ci, Index r0, Index nb,
                Index kbeg, Index kend, workspace<Real>& ws, Tag const&) noexcept {
  using Arch = simd::packet_arch_t<Tag>;
  if constexpr (lanes::supports<Policy, Real>()) {
    if (ws.lanes) {
      using P = simd::packet<float, Arch>;
      constexpr Index W = P::size;
      constexpr int RV = lanes::register_tile<Arch>::rows, CK = lanes::register_tile<Arch>::cols;
      const Index d = ci.shape.dim, dv = ci.shape.dim_v, w = lanes::padded_rows<Arch>(nb);
      const Index bk = lanes::key_tile<Arch>(d, dv);
      const Index vectors = w / W;
      const Index ldq = ws.qt.cols(), lds = ws.st.cols(), ldo = ws.ot.cols();
      alignas(64) Index vis[tiles<Real>::block_q];
      alignas(64) float visf[tiles<Real>::block_q];
      alignas(64) float ref[tiles<Real>::block_q];
      alignas(64) float alpha[tiles<Real>::block_q];
      lanes::lane_bias bias;
      constexpr position_bias form = bias_form_v<Policy>;
      if constexpr (form == position_bias::linear_distance) {
        bias.on = true;
        bias.m = static_cast<float>(hc.head.slope * log2_e);
        bias.ref = ref;
      }
      if constexpr (form == position_bias::distance_table) bias.on = true;
      const Index ldv = ws.vt.cols();
      for (Index j0 = kbeg; j0 < kend; j0 += bk) {
        const Index nk = std::min(bk, kend - j0);
        // The tile's V rows, copied to rows dv + 16 floats apart: in the caller's
        // [.., L, H, dv] layout they lie H·dv floats apart, often a multiple of 4 KiB, and a
        // P·V pass (one line of each of nk rows) would then keep them in a few of L1's sets
        // and miss at every key (the copy pays most at d = 128; a copy of K gained nothing:
        // docs/benchmarks-history.md).
        // (Rows not read in place are converted straight into the copy.)
        if (hc.v.tile(j0, nk, ws.vt.data(), ldv).data != ws.vt.data())
          for (Index j = 0; j < nk; ++j) {
            const float* src = hc.v.row(j0 + j);
            float* dst = ws.vt.data() + j * ldv;
            Index c = 0;
            for (; c + W <= dv; c += W) P::load(src + c).store(dst + c);
            const int tail = static_cast<int>(dv - c);
            if (tail > 0) P::load_partial(src + c, tail).store_partial(dst + c, tail);
          }
        const kv_block<Real> kt = hc.k.tile(j0, nk, ws.kt.data(), ws.kt.cols());
        for (Index r = 0; r < w; ++r) {
          vis[r] = std::clamp<Index>(ws.lim[static_cast<std::size_t>(r)] - j0, 0, nk);
          visf[r] = static_cast<float>(vis[r]);
        }
        if constexpr (form == position_bias::linear_distance) {
          // |ref| <= len_k < 2^24 where a row sees a key (begin_block checked len_k), so
          // the float is exact
          for (Index r = 0; r < w; ++r) {
            // padding rows (lim = 0) never form their position: it may not be representable
            const Index lim = ws.lim[static_cast<std::size_t>(r)];
            ref[r] = lim == 0
                         ? 0.0f
                         : static_cast<float>(math::alibi_reference(ci.shape.q_offset + r0 + r,
                                                                    lim - 1, hc.head.symmetric) -
                                              j0);
          }
        }
        // The next tile's K and V rows, a slice per group of rows, into L2: rows H·d floats
        // apart start a new page every row or two, where the hardware prefetchers stop, so
        // the first group's pass over a tile missed L2 at every row (docs/benchmarks-
        // history.md); the same prefetch into L1 gained nothing (a whole tile evicts the
        // one being worked on).
        const Index next = j0 + nk, next_n = std::min(bk, kend - next),
                    groups = (vectors + RV - 1) / RV;
        for (Index rv = 0; rv < vectors; rv += RV) {
          const int nr = static_cast<int>(std::min<Index>(RV, vectors - rv));
          if (next_n > 0) {
            const Index g = rv / RV, a = next + next_n * g / groups,
                        b = next + next_n * (g + 1) / groups;
            hc.k.prefetch(a, b - a);
            hc.v.prefetch(a, b - a);
          }
          // ext[v]: keys [0, ext[v]) of the tile are seen by some row of vector v. Segment
          // s runs keys [pm[s-1], pm[s]) (pm: running max of ext) on vectors s..nr-1, the
          // only ones that see them, so a causal diagonal tile costs its own triangle,
          // rounded to W rows, rather than the whole square.
          Index ext[std::size_t{RV}] = {}, low[std::size_t{RV}] = {}, pm[std::size_t{RV}] = {};
          for (int v = 0; v < nr; ++v) {
            const Index* vv = vis + (rv + v) * W;
            ext[v] = *std::max_element(vv, vv + W);
            low[v] = *std::min_element(vv, vv + W);
            pm[v] = std::max(ext[v], v > 0 ? pm[v - 1] : Index(0));
          }
          const Index ext_all = pm[nr - 1];
          for (int sg = 0; sg < nr; ++sg) {
            const Index lo = sg > 0 ? pm[sg - 1] : 0;
            const float* qt = ws.qt.data() + (rv + sg) * W;
            float* st = ws.st.data() + (rv + sg) * W;
            for (Index j = lo; j < pm[sg]; j += CK)
              lanes::qk<Arch>(nr - sg, static_cast<int>(std::min<Index>(CK, pm[sg] - j)), qt, ldq,
                              kt.row(j), kt.ld, d, st + j * lds, lds);
          }
          for (int v = 0; v < nr; ++v) {
            float* st = ws.st.data() + (rv + v) * W;
            const Index o = (rv + v) * W;
            if constexpr (form == position_bias::linear_distance) bias.ref = ref + o;
            if constexpr (form == position_bias::distance_table) {
              // entry of lane 0 (a real row) at key j0: t = size - 1 - (j0 - p0 - rel_min)
              const Index p0 = ci.shape.q_offset + r0 + o;
              const Index t =
                  static_cast<Index>(hc.head.bias_by_rel.size()) - 1 - (j0 - p0 - hc.head.rel_min);
              bias.table = hc.table_reversed.data() + t;
            }
            lanes::softmax_lanes<P>(st, lds, ext[v], visf + o, low[v], ws.m.data() + o,
                                    ws.l.data() + o, alpha + o, bias);
            // keys the vector does not see but its segment's P·V reads: probability 0
            for (Index j = ext[v]; j < ext_all; ++j)
              std::fill(st + j * lds, st + j * lds + W, 0.0f);
          }
          if (ext_all == 0) continue;  // α = 1 and nothing to add
          const float* a = alpha + rv * W;
          if (ext[0] == ext_all) {  // one segment: the rescale fused into the product
            for (Index c = 0; c < dv; c += CK)
              lanes::pv<Arch>(nr, static_cast<int>(std::min<Index>(CK, dv - c)),
                              ws.st.data() + rv * W, lds, ws.vt.data() + c, ldv, ext_all, a,
                              ws.ot.data() + c * ldo + rv * W, ldo);
            continue;
          }
          for (Index c = 0; c < dv; ++c) {
            float* o = ws.ot.data() + c * ldo + rv * W;
            for (Index e = 0; e < nr * W; ++e) o[e] *= a[e];
          }
          for (int sg = 0; sg < nr; ++sg) {
            const Index lo = sg > 0 ? pm[sg - 1] : 0;
            if (lo == pm[sg]) continue;
            for (Index c = 0; c < dv; c += CK)
              lanes::pv<Arch>(nr - sg, static_cast<int>(std::min<Index>(CK, dv - c)),
                              ws.st.data() + lo * lds + (rv + sg) * W, lds,
                              ws.vt.data() + lo * ldv + c, ldv, pm[sg] - lo, lanes::ones,
                              ws.ot.data() + c * ldo + (rv + sg) * W, ldo);
          }
        }
      }
      return;
    }
  }
  accumulate(hc, ci, r0, nb, kbeg, kend, ws, backend::scalar{});
}

/// Normalises and writes the block (transposing back from Ot when this kernel ran it).
template <class Policy, class Real, class TO, class Tag,
          std::enable_if_t<lanes::has_kernel_v<Tag>, int> = 0>
void finish_block(const head_context<Policy, Real>& hc, Index r0, Index nb, workspace<Real>& ws,
                  const strided_view<TO, 2>& out, Tag const&) noexcept {
  using Arch = simd::packet_arch_t<Tag>;
  if (!ws.lanes) {
    finish_block(hc, r0, nb, ws, out, backend::scalar{});
    return;
  }
  if constexpr (std::is_same_v<Real, float>)  // ws.lanes: only float blocks get here
    lanes::transpose<simd::packet<float, Arch>>(ws.ot.data(), ws.ot.cols(), out.extent(1), nb,
                                                ws.o.data(), ws.o.cols());
  write_normalised(ws, r0, nb, out, [&](Index r, Index c) { return ws.o(r, c); });
}

}  // namespace flash
}  // namespace kernels
}  // namespace posenc
