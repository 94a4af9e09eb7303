#pragma once
/// \file
/// The flash attention device kernels: an online-softmax forward over key tiles (Dao et al.
/// 2022) with the position schemes generated inside the tiles, its split-key variant for
/// decoding (Dao et al. 2023, "Flash-Decoding") with the reduction of the splits, and the
/// merge of two partial results (attention/merge.hpp's maths on the device).
///
/// The general (SIMT) path: every storage type, any d and dv up to 256, arithmetic in
/// real_t<T> (float for float, half and bfloat16; double for double). Mapping:
///
///     block     128 threads (4 warps) = 32 "rows"; a row is one (query head, query) of
///               one (batch b, key head g): the rows of the group's query heads follow each
///               other (h = g·group + r / Lq, i = r % Lq), so K and V are read once per
///               group (GQA, MQA) and a decode step with Lq = 1 fills the block with heads
///     grid      (row block, b·H_kv + g, key split), flattened into x
///     per tile  32 keys: K and V converted to real_t<T> into shared memory (RoPE applied
///               to K as it is loaded); each warp takes 8 rows, each lane one key for the
///               logits (Q·Kᵀ from shared memory), the online softmax per row with warp
///               shuffles for the maximum (the sums stay per lane until the end), then
///               each lane 1-8 columns of P·V for the warp's 8 rows
///
/// Positions inside the tiles: ALiBi as −slope·|ref − j| (the row constant of
/// math::alibi_reference, added back to the log-sum-exp), T5 through math's bucket
/// function with the host's boundaries (t5_bucket_of) and a [H, buckets] table, any other
/// distance table as one contiguous run per (batch, head), RoPE from the rotary
/// embedding's device cos/sin rows (or computed as its kernel computes them). Masks:
/// causal with a query offset and key lengths in the loop bounds; a boolean and an
/// additive [Lq, Lk] mask read per logit (the slow path).
///
/// Not for direct inclusion: use posenc/attention/cuda/flash.cuh.

#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../config.hpp"
#include "../../core/types.hpp"
#include "../../math/alibi.hpp"
#include "../../math/rotation.hpp"
#include "../../math/softmax.hpp"
#include "bias.cuh"
#include "rotary.cuh"
#include "runtime.cuh"

namespace posenc {
namespace kernels {

/// How the bias of a device flash call is generated.
enum class flash_bias : int { none, linear_distance, t5, distance_table };

/// Tile sizes of the general kernel (the warp mapping in the file comment fixes them).
struct flash_tiles {
  static constexpr int rows = 32;          ///< rows per block
  static constexpr int keys = 32;          ///< keys per tile (one per lane)
  static constexpr int warps = 4;          ///< warps per block
  static constexpr int rows_per_warp = 8;  ///< rows = warps · rows_per_warp
  static constexpr int max_dim = 256;      ///< d and dv
  static constexpr int threads = 32 * warps;
};

/// The arguments of a device flash call, validated on the host by attention/cuda/flash.cuh.
/// Strides are in elements: q, out [B, Lq, H, ·]; k, v [B, Lk, H_kv, ·] (batch, seq, head,
/// dim). Acc = real_t<T>.
template <class T, class Acc>
struct flash_args {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  T* out = nullptr;
  Index q_stride[4] = {}, k_stride[4] = {}, v_stride[4] = {}, out_stride[4] = {};
  Index batch = 0, heads = 0, kv_heads = 0, len_q = 0, len_k = 0, dim = 0, dim_v = 0;
  Index q_offset = 0;
  Acc scale = 1;

  // masks
  bool causal = false;
  const Index* key_lengths = nullptr;      ///< device [B], or null
  const unsigned char* allowed = nullptr;  ///< device [Lq, Lk] (1 = may attend), or null
  const Acc* additive = nullptr;           ///< device [Lq, Lk], or null

  // position bias
  flash_bias bias = flash_bias::none;
  const Acc* slopes = nullptr;               ///< linear_distance: [B·H]
  const unsigned char* symmetric = nullptr;  ///< linear_distance: [B·H]
  const Acc* t5_table = nullptr;             ///< t5: [H, num_buckets]
  t5_bucket_params t5{};
  const Acc* tables = nullptr;  ///< distance_table: [B·H, table_len], entry j − pos − rel_min
  Index table_len = 0;
  Index rel_min = 0;

  // rotary: q and k rotated as they are loaded (pairs == 0: none)
  rope_device_args<T, Acc> rope{};

  // outputs: lse [B, H, Lq] (null: none); with splits > 1, each split's normalised output
  // and log-sum-exp go to part_out [splits, B·H·Lq, dv] and part_lse [splits, B·H·Lq]
  Acc* lse = nullptr;
  Index lse_stride[3] = {};
  Index splits = 1;
  Index split_keys = 0;  ///< keys per split, a multiple of flash_tiles::keys
  Acc* part_out = nullptr;
  Acc* part_lse = nullptr;
  Index row_blocks = 0;    ///< ceil(group · Lq / rows per block of the kernel that runs)
  bool kv_pieces = false;  ///< tensor-core kernel: K, V tiles copied in 16-byte pieces (launch_mma)
  int sm_major = 0;        ///< the device's compute capability (8: sm_80, the tensor-core path)
};

/// Dynamic shared memory of the general kernel for head dims d, dv and arithmetic Acc.
template <class Acc>
constexpr std::size_t flash_shared_bytes(Index d, Index dv) {
  using F = flash_tiles;
  return sizeof(Acc) * static_cast<std::size_t>(F::rows * d + F::keys * (d + 1) + F::keys * dv +
                                                F::warps * F::rows_per_warp * F::keys);
}

namespace cuda_detail {

template <class V>
__device__ inline V warp_max(V x) {
  for (int o = 16; o > 0; o >>= 1) {
    const V y = __shfl_xor_sync(0xffffffffu, x, o);
    x = y > x ? y : x;
  }
  return x;
}

template <class V>
__device__ inline V warp_sum(V x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// Element c of the head vector x (`stride` apart) at position n, rotated as the rotary
/// kernel rotates it (math::rotate_pair_fused; the tail past the rotary dims unchanged).
template <class T, class Acc>
__device__ inline Acc rotated(const rope_device_args<T, Acc>& r, const T* x, Index stride, Index c,
                              Index n, bool key) {
  const Index pairs = r.pairs;
  if (c >= 2 * pairs) return static_cast<Acc>(x[c * stride]);
  // the pair (da, db) that holds c, and which of the two c is
  Index i, da;
  bool second;
  if (r.pair_step == 1) {  // half: (i, i + pairs)
    second = c >= pairs;
    i = second ? c - pairs : c;
    da = i;
  } else {  // interleaved: (2i, 2i + 1)
    second = (c & 1) != 0;
    i = c >> 1;
    da = 2 * i;
  }
  const Index db = da + r.pair_offset;
  Acc cs, sn;
  const bool key_rows = key && r.xpos_scale_base > 0.0;
  if (n < r.cache_rows) {
    const Index e = n * pairs + i;
    cs = key_rows ? r.cache_cos_k[e] : r.cache_cos_q[e];
    sn = key_rows ? r.cache_sin_k[e] : r.cache_sin_q[e];
  } else {
    rope_angle(r, n, i, key_rows, cs, sn);
  }
  Acc ya, yb;
  math::rotate_pair_fused(static_cast<Acc>(x[da * stride]), static_cast<Acc>(x[db * stride]), cs,
                          sn, ya, yb);
  return second ? yb : ya;
}

/// Keys [0, limit) are the only ones the row at `pos` of batch b can see.
template <class T, class Acc>
__device__ inline Index row_limit(const flash_args<T, Acc>& a, Index b, Index pos) {
  Index lim = a.len_k;
  if (a.key_lengths) lim = a.key_lengths[b] < lim ? a.key_lengths[b] : lim;
  if (a.causal) lim = pos + 1 < lim ? pos + 1 : lim;
  return lim > 0 ? lim : 0;
}

/// Where a block works: its row block, batch item, key head, key split and keys.
struct block_place {
  Index rb = 0, b = 0, g = 0, split = 0;
  Index k_lo = 0, k_hi = 0;  ///< the split's keys [k_lo, k_hi)
  Index rows_total = 0;      ///< rows of the (batch, key head): group · Lq
};

template <class T, class Acc>
__device__ inline block_place place_of_block(const flash_args<T, Acc>& a) {
  block_place p;
  const Index bg_count = a.batch * a.kv_heads;
  Index blk = blockIdx.x;
  p.rb = blk % a.row_blocks;
  blk /= a.row_blocks;
  const Index bg = blk % bg_count;
  p.split = blk / bg_count;
  p.b = bg / a.kv_heads;
  p.g = bg - p.b * a.kv_heads;
  p.k_lo = p.split * a.split_keys;
  p.k_hi = p.k_lo + a.split_keys < a.len_k ? p.k_lo + a.split_keys : a.len_k;
  p.rows_total = a.heads / a.kv_heads * a.len_q;
  return p;
}

/// The N rows of a block, in shared memory: head, query, position, visible limit (0 for a
/// row past the call's), ALiBi's slope, reference and row constant, and the end of the
/// keys any row of the block sees in its split.
template <class Acc, int N>
struct block_rows {
  Index pos[N], lim[N], h[N], i[N], ref[N];
  Acc slope[N], shift[N];
  Index end;
};

template <class Acc, int N>
__device__ inline bool live_row(const block_rows<Acc, N>& /*rows*/, const block_place& p, int r) {
  return p.rb * N + r < p.rows_total;
}

/// Fills `rows`. Every thread of the block calls it (it synchronises the block); `end` is
/// ready after the caller's next __syncthreads.
template <class T, class Acc, int N>
__device__ inline void describe_rows(const flash_args<T, Acc>& a, const block_place& p,
                                     block_rows<Acc, N>& rows) {
  if (threadIdx.x < N) {
    const int r = threadIdx.x;
    const Index rg = p.rb * N + r, group = a.heads / a.kv_heads;
    Index h = p.g * group, i = 0, lim = 0;
    if (rg < p.rows_total) {
      h = p.g * group + rg / a.len_q;
      i = rg % a.len_q;
      lim = row_limit(a, p.b, a.q_offset + i);
    }
    rows.h[r] = h;
    rows.i[r] = i;
    rows.pos[r] = a.q_offset + i;
    rows.lim[r] = lim;
    Acc slope = 0, shift = 0;
    Index ref = 0;
    if (a.bias == flash_bias::linear_distance && lim > 0) {
      const Index bh = p.b * a.heads + h;
      slope = a.slopes[bh];
      ref = math::alibi_reference(a.q_offset + i, lim - 1, a.symmetric[bh] != 0);
      shift = -slope * static_cast<Acc>(a.q_offset + i - ref);  // bias = shifted bias + shift
    }
    rows.slope[r] = slope;
    rows.shift[r] = shift;
    rows.ref[r] = ref;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    Index mx = 0;
    for (int r = 0; r < N; ++r) mx = rows.lim[r] > mx ? rows.lim[r] : mx;
    rows.end = mx < p.k_hi ? mx : p.k_hi;
  }
}

/// The logit x of row br at a visible key j, plus the call's position bias.
template <class T, class Acc, int N>
__device__ inline Acc add_position_bias(const flash_args<T, Acc>& a, const block_rows<Acc, N>& rows,
                                        const block_place& p, int br, Index j, Acc x) {
  const Index pos = rows.pos[br], h = rows.h[br];
  switch (a.bias) {
    case flash_bias::linear_distance: {
      const Index dist = rows.ref[br] - j;
      return x - rows.slope[br] * static_cast<Acc>(dist < 0 ? -dist : dist);
    }
    case flash_bias::t5:
      return x + a.t5_table[h * a.t5.num_buckets + t5_bucket_of(j - pos, a.t5)];
    case flash_bias::distance_table:
      return x + a.tables[(p.b * a.heads + h) * a.table_len + (j - pos - a.rel_min)];
    default:
      return x;
  }
}

template <class T, class Acc, int DVL>
__global__ void __launch_bounds__(flash_tiles::threads) flash_kernel(const flash_args<T, Acc> a) {
  using F = flash_tiles;
  constexpr int R = F::rows_per_warp;
  extern __shared__ __align__(16) unsigned char flash_shared[];
  __shared__ block_rows<Acc, F::rows> rows;

  const int d = static_cast<int>(a.dim), dv = static_cast<int>(a.dim_v), ldk = d + 1;
  Acc* const qs = reinterpret_cast<Acc*>(flash_shared);  // [rows, d]: scale · rotated q
  Acc* const ks = qs + F::rows * d;                      // [keys, d + 1]
  Acc* const vs = ks + F::keys * ldk;                    // [keys, dv]
  Acc* const ps = vs + F::keys * dv;                     // [warps, R, keys]

  const block_place p = place_of_block(a);
  const Index b = p.b, g = p.g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  describe_rows(a, p, rows);
  // the queries: rotated, times the scale
  for (int e = threadIdx.x; e < F::rows * d; e += blockDim.x) {
    const int r = e / d, c = e - r * d;
    Acc x = 0;
    if (live_row(rows, p, r)) {
      const T* qr = a.q + b * a.q_stride[0] + rows.i[r] * a.q_stride[1] + rows.h[r] * a.q_stride[2];
      x = a.rope.pairs > 0 ? rotated(a.rope, qr, a.q_stride[3], c, rows.pos[r], false)
                           : static_cast<Acc>(qr[c * a.q_stride[3]]);
    }
    qs[e] = x * a.scale;
  }
  __syncthreads();
  const Index k_end = rows.end;

  Acc acc[R][DVL];
  Acc m[R], lsum[R];
  bool bad[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    lsum[r] = 0;
    bad[r] = false;
#pragma unroll
    for (int c = 0; c < DVL; ++c) acc[r][c] = 0;
  }
  const int r0 = warp * R;
  const Acc* const qw = qs + r0 * d;
  Acc* const pw = ps + warp * R * F::keys;

  for (Index k0 = p.k_lo; k0 < k_end; k0 += F::keys) {
    const int nk = static_cast<int>(k_end - k0 < F::keys ? k_end - k0 : F::keys);
    __syncthreads();  // the previous tile is no longer read
    for (int e = threadIdx.x; e < F::keys * d; e += blockDim.x) {
      const int j = e / d, c = e - j * d;
      Acc x = 0;
      if (j < nk) {
        const T* kr = a.k + b * a.k_stride[0] + (k0 + j) * a.k_stride[1] + g * a.k_stride[2];
        x = a.rope.pairs > 0 ? rotated(a.rope, kr, a.k_stride[3], c, k0 + j, true)
                             : static_cast<Acc>(kr[c * a.k_stride[3]]);
      }
      ks[j * ldk + c] = x;
    }
    for (int e = threadIdx.x; e < F::keys * dv; e += blockDim.x) {
      const int j = e / dv, c = e - j * dv;
      vs[e] = j < nk ? static_cast<Acc>(a.v[b * a.v_stride[0] + (k0 + j) * a.v_stride[1] +
                                            g * a.v_stride[2] + c * a.v_stride[3]])
                     : Acc(0);
    }
    __syncthreads();

    // logits: lane = key k0 + lane, for the warp's R rows
    Acc s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = 0;
    const Acc* kr = ks + lane * ldk;
#pragma unroll 4
    for (int c = 0; c < d; ++c) {
      const Acc kc = kr[c];
#pragma unroll
      for (int r = 0; r < R; ++r) s[r] = fma(qw[r * d + c], kc, s[r]);
    }
    const Index j = k0 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int br = r0 + r;
      bool visible = lane < nk && j < rows.lim[br];
      Acc x = s[r];
      if (visible) {
        x = add_position_bias(a, rows, p, br, j, x);
        const Index e = rows.i[br] * a.len_k + j;
        if (a.allowed && !a.allowed[e]) visible = false;
        if (a.additive) x += a.additive[e];
        if (x == -INFINITY) visible = false;
        if (visible && !(x < INFINITY)) bad[r] = true;  // NaN or +inf: a NaN row
      }
      const Acc sv = visible && x < INFINITY ? x : -INFINITY;
      const Acc tile_max = warp_max(sv);
      const Acc m_new = tile_max > m[r] ? tile_max : m[r];
      Acc p = 0, alpha = 1;
      if (m_new != -INFINITY) {
        alpha = exp(m[r] - m_new);  // 0 on the row's first visible tile
        p = sv == -INFINITY ? Acc(0) : exp(sv - m_new);
      }
      m[r] = m_new;
      lsum[r] = fma(lsum[r], alpha, p);
#pragma unroll
      for (int c = 0; c < DVL; ++c) acc[r][c] *= alpha;
      pw[r * F::keys + lane] = p;
    }
    __syncwarp();
    // P·V: lane takes columns lane, lane + 32, ...
    for (int jj = 0; jj < nk; ++jj) {
      Acc vj[DVL];
#pragma unroll
      for (int c = 0; c < DVL; ++c) {
        const int col = lane + 32 * c;
        vj[c] = col < dv ? vs[jj * dv + col] : Acc(0);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const Acc p = pw[r * F::keys + jj];
#pragma unroll
        for (int c = 0; c < DVL; ++c) acc[r][c] = fma(p, vj[c], acc[r][c]);
      }
    }
    __syncwarp();
  }

// finish: normalise; write the output (or this split's partial state) and the lse
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int br = r0 + r;
    const Acc l = warp_sum(lsum[r]);
    const bool nan_row = __any_sync(0xffffffffu, bad[r]);
    if (!live_row(rows, p, br)) continue;
    const Index h = rows.h[br], i = rows.i[br];
    const Acc inv = nan_row ? Acc(NAN) : l > 0 ? Acc(1) / l : Acc(0);
    const Acc lse = nan_row ? Acc(NAN) : l > 0 ? m[r] + log(l) + rows.shift[br] : Acc(-INFINITY);
    const Index row = (b * a.heads + h) * a.len_q + i;
    if (a.splits > 1) {
      Acc* po = a.part_out + (p.split * a.batch * a.heads * a.len_q + row) * a.dim_v;
#pragma unroll
      for (int c = 0; c < DVL; ++c) {
        const int col = lane + 32 * c;
        if (col < dv) po[col] = acc[r][c] * inv;
      }
      if (lane == 0) a.part_lse[p.split * a.batch * a.heads * a.len_q + row] = lse;
    } else {
      T* o = a.out + b * a.out_stride[0] + i * a.out_stride[1] + h * a.out_stride[2];
#pragma unroll
      for (int c = 0; c < DVL; ++c) {
        const int col = lane + 32 * c;
        if (col < dv) o[col * a.out_stride[3]] = static_cast<T>(acc[r][c] * inv);
      }
      if (lane == 0 && a.lse)
        a.lse[b * a.lse_stride[0] + h * a.lse_stride[1] + i * a.lse_stride[2]] = lse;
    }
  }
}

/// Folds the splits of every row (one warp per row): out and lse as the merge of
/// attention/merge.hpp applied split after split, written once.
template <class T, class Acc>
__global__ void __launch_bounds__(128) flash_reduce_kernel(const flash_args<T, Acc> a) {
  const Index rows = a.batch * a.heads * a.len_q;
  const Index row = static_cast<Index>(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  Acc mx = -INFINITY;
  bool nan_row = false;
  for (Index s = 0; s < a.splits; ++s) {
    const Acc x = a.part_lse[s * rows + row];
    if (isnan(x)) nan_row = true;
    mx = x > mx ? x : mx;
  }
  const Index i = row % a.len_q, bh = row / a.len_q, h = bh % a.heads, b = bh / a.heads;
  T* o = a.out + b * a.out_stride[0] + i * a.out_stride[1] + h * a.out_stride[2];
  Acc total = 0;
  for (Index s = 0; s < a.splits; ++s) {
    const Acc x = a.part_lse[s * rows + row];
    if (x != -INFINITY) total += exp(x - mx);
  }
  for (Index c = lane; c < a.dim_v; c += 32) {
    Acc y = 0;
    if (nan_row) {
      y = NAN;
    } else if (mx != -INFINITY) {
      for (Index s = 0; s < a.splits; ++s) {
        const Acc x = a.part_lse[s * rows + row];
        if (x != -INFINITY) y += exp(x - mx) * a.part_out[(s * rows + row) * a.dim_v + c];
      }
      y /= total;
    }
    o[c * a.out_stride[3]] = static_cast<T>(y);
  }
  if (lane == 0 && a.lse)
    a.lse[b * a.lse_stride[0] + h * a.lse_stride[1] + i * a.lse_stride[2]] = nan_row ? Acc(NAN)
                                                                             : mx == -INFINITY
                                                                                 ? Acc(-INFINITY)
                                                                                 : mx + log(total);
}

}  // namespace cuda_detail

// ---- the tensor-core path: half and bfloat16, d = dv = 64, 80, 96 or 128 -----------------
//
// mma.sync m16n8k16 (sm_80+), float accumulation. A block is 4 warps and 64 rows (16 per
// warp, the same row packing as the general path), a key tile 64 keys. Fragments, per the
// PTX ISA's layout for m16n8k16 with g = lane / 4 and t = lane % 4:
//
//     A (16x16, row-major)  regs {A[g][2t..2t+1], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]}
//     B (16x8, "col")       regs {B[2t..2t+1][g], B[2t+8..2t+9][g]}
//     C (16x8, float)       {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}
//
// S = Q·Kᵀ takes A from the query tile and B[k][n] = K[n][k] from the key tile (two
// neighbouring elements of a key row per register); the probabilities stay in registers:
// the C fragments of two neighbouring 8-key tiles are the A fragment of P for 16 keys,
// rounded to the storage type; O += P·V takes B[k][n] = V[k][n] (two key rows per register).

struct mma_tiles {
  static constexpr int rows = 64;  ///< rows per block (16 per warp)
  static constexpr int keys = 64;  ///< keys per tile
  static constexpr int warps = 4;
  static constexpr int threads = 32 * warps;
  static constexpr int pad = 8;  ///< elements past each shared row: spreads rows over banks
};

/// Dynamic shared memory of the tensor-core kernel: the q tile and two k, v tile pairs (the
/// next pair loads while the current one is used), in storage type T.
template <class T>
constexpr std::size_t mma_shared_bytes(Index d) {
  return sizeof(T) *
         static_cast<std::size_t>((mma_tiles::rows + 4 * mma_tiles::keys) * (d + mma_tiles::pad));
}
// every sm_80+ part allows at least 99 KiB of shared memory per block (opt-in)
static_assert(mma_shared_bytes<Eigen::half>(128) <= 99 * 1024, "tensor-core tiles too large");

namespace cuda_detail {

template <class T>
__device__ inline unsigned pack2(T lo, T hi) {
  unsigned short a, b;
  memcpy(&a, &lo, 2);
  memcpy(&b, &hi, 2);
  return static_cast<unsigned>(a) | (static_cast<unsigned>(b) << 16);
}

template <class T>
__device__ inline unsigned load2(const T* p) {  // two neighbouring elements, 4-byte aligned
  return *reinterpret_cast<const unsigned*>(p);
}

/// 16 bytes global -> shared without passing through registers (sm_80 cp.async); `bytes`
/// 0 writes zeros (a key past the tile's end) and reads nothing.
__device__ inline void copy16_async(void* shared_dst, const void* global_src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(bytes));
#else
  (void)shared_dst, (void)global_src, (void)bytes;
#endif
}

__device__ inline void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ inline void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/// Four 8x8 matrices of 16-bit elements from shared memory: lane l gives the address of row
/// l % 8 of matrix l / 8 (16 bytes); r[m] is matrix m's fragment (transposed with Trans).
template <bool Trans>
__device__ inline void load_matrix_x4(unsigned (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#else
  (void)row;
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

/// c += a·b on the warp's fragments (the file comment's layout).
template <class T>
__device__ inline void mma_16816(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, Eigen::bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)c, (void)a, (void)b;  // host pass: never called
#endif
}

template <class V>
__device__ inline V quad_max(V x) {
  for (int o = 1; o < 4; o <<= 1) {
    const V y = __shfl_xor_sync(0xffffffffu, x, o);
    x = y > x ? y : x;
  }
  return x;
}

template <class V>
__device__ inline V quad_sum(V x) {
  for (int o = 1; o < 4; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <class T, int D>
__global__ void __launch_bounds__(mma_tiles::threads)
    flash_mma_kernel(const flash_args<T, float> a) {
  using M = mma_tiles;
  constexpr int ld = D + M::pad, NT = M::keys / 8, OT = D / 8, KT = D / 16;
  constexpr int tile = M::keys * ld;  // elements of one k or v tile
  constexpr float log2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char flash_mma_shared[];
  __shared__ block_rows<float, M::rows> rows;
  T* const qs = reinterpret_cast<T*>(flash_mma_shared);  // [rows, ld]
  T* const ks = qs + M::rows * ld;                       // [2][keys, ld]
  T* const vs = ks + (a.kv_pieces ? 2 : 1) * tile;       // [2 or 1][keys, ld]

  const block_place p = place_of_block(a);
  const Index b = p.b, g = p.g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  describe_rows(a, p, rows);
  for (int e = threadIdx.x; e < M::rows * D; e += blockDim.x) {  // queries, rotated
    const int r = e / D, c = e - r * D;
    float x = 0;
    if (live_row(rows, p, r)) {
      const T* qr = a.q + b * a.q_stride[0] + rows.i[r] * a.q_stride[1] + rows.h[r] * a.q_stride[2];
      x = a.rope.pairs > 0 ? rotated(a.rope, qr, a.q_stride[3], c, rows.pos[r], false)
                           : static_cast<float>(qr[c * a.q_stride[3]]);
    }
    qs[r * ld + c] = static_cast<T>(x);
  }

  // K and V rows contiguous and 16-byte aligned, no rotation (kv_pieces): a tile is copied
  // in 16-byte pieces by cp.async while the previous one is used; otherwise element by element
  constexpr int piece = 16 / static_cast<int>(sizeof(T));  // elements per 16 bytes
  const bool aligned = a.kv_pieces;
  const T* const k_base = a.k + b * a.k_stride[0] + g * a.k_stride[2];
  const T* const v_base = a.v + b * a.v_stride[0] + g * a.v_stride[2];
  auto copy_tile = [&](Index k0, int nk, int buf) {  // cp.async; the caller commits
    constexpr int per_row = D / piece;
    for (int e = threadIdx.x; e < M::keys * per_row; e += blockDim.x) {
      const int j = e / per_row, c = (e - j * per_row) * piece;
      const Index key = k0 + (j < nk ? j : 0);  // a key past the end: zeros, nothing read
      const int bytes = j < nk ? 16 : 0;
      copy16_async(ks + buf * tile + j * ld + c, k_base + key * a.k_stride[1] + c, bytes);
      copy16_async(vs + buf * tile + j * ld + c, v_base + key * a.v_stride[1] + c, bytes);
    }
  };
  auto load_tile = [&](Index k0, int nk, int buf) {  // the general path
    for (int e = threadIdx.x; e < M::keys * D; e += blockDim.x) {
      const int j = e / D, c = e - j * D;
      T kx = T(0.0f), vx = T(0.0f);
      if (j < nk) {
        const T* kr = k_base + (k0 + j) * a.k_stride[1];
        kx = a.rope.pairs > 0 ? static_cast<T>(rotated(a.rope, kr, a.k_stride[3], c, k0 + j, true))
                              : kr[c * a.k_stride[3]];
        vx = v_base[(k0 + j) * a.v_stride[1] + c * a.v_stride[3]];
      }
      ks[buf * tile + j * ld + c] = kx;
      vs[buf * tile + j * ld + c] = vx;
    }
  };
  __syncthreads();  // rows.end and the query tile
  const Index k_end = rows.end;
  auto keys_in = [&](Index k0) {
    return static_cast<int>(k_end - k0 < M::keys ? k_end - k0 : M::keys);
  };
  if (aligned && p.k_lo < k_end) {
    copy_tile(p.k_lo, keys_in(p.k_lo), 0);
    copy_async_commit();
  }

  // this thread's rows: r_lo = 16·warp + gq and r_lo + 8; a warp whose 16 rows are all past
  // the call's (decode: a few query heads per block) loads tiles but computes nothing
  const int r_lo = warp * 16 + gq;
  const bool warp_live = live_row(rows, p, warp * 16);
  // the warp's query fragments, kept in registers for every tile
  unsigned qf[KT][4];
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    const T* q0 = qs + r_lo * ld + kk * 16 + 2 * tq;
    qf[kk][0] = load2(q0);
    qf[kk][1] = load2(q0 + 8 * ld);
    qf[kk][2] = load2(q0 + 8);
    qf[kk][3] = load2(q0 + 8 * ld + 8);
  }
  float o[OT][4];
#pragma unroll
  for (int n = 0; n < OT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0;
  // m: the running maximum in log2 units (logit · log2 e), so that exp2 is one instruction
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0, 0};
  bool bad[2] = {false, false};

  int buf = 0;
  for (Index k0 = p.k_lo; k0 < k_end; k0 += M::keys, buf ^= aligned ? 1 : 0) {
    const int nk = keys_in(k0);
    __syncthreads();  // every warp is done with the other buffer (the previous tile)
    if (aligned) {
      if (k0 + M::keys < k_end) {
        copy_tile(k0 + M::keys, keys_in(k0 + M::keys), buf ^ 1);
        copy_async_commit();
        copy_async_wait<1>();  // this tile's copies are done, the next one's may be in flight
      } else {
        copy_async_wait<0>();
      }
    } else {
      load_tile(k0, nk, buf);
    }
    __syncthreads();
    if (!warp_live) continue;
    const T* const kt = ks + buf * tile;
    const T* const vt = vs + buf * tile;

    // S = Q·Kᵀ for the warp's 16 rows and the tile's 64 keys; ldmatrix matrices 0-3: keys
    // [8n, 8n+8) dims [16kk, +8), the same keys dims [16kk+8, +8), then keys [8n+8, 8n+16)
    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
      for (int n = 0; n < NT; n += 2) {
        const int mi = lane / 8;
        unsigned kf[4];
        load_matrix_x4<false>(
            kf, kt + (n * 8 + (mi >> 1) * 8 + lane % 8) * ld + kk * 16 + (mi & 1) * 8);
        const unsigned b0[2] = {kf[0], kf[1]}, b1[2] = {kf[2], kf[3]};
        mma_16816<T>(s[n], qf[kk], b0);
        mma_16816<T>(s[n + 1], qf[kk], b1);
      }
    }
    // scale, bias, masks; the online softmax of the thread's two rows
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e / 2, br = r_lo + 8 * hr, jj = n * 8 + 2 * tq + (e & 1);
        const Index j = k0 + jj;
        bool visible = jj < nk && j < rows.lim[br];
        float x = s[n][e] * a.scale;
        if (visible) {
          x = add_position_bias(a, rows, p, br, j, x);
          if (x == -INFINITY) visible = false;
          if (visible && !(x < INFINITY)) bad[hr] = true;
        }
        s[n][e] = visible && x < INFINITY ? x * log2e : -INFINITY;
        tile_max[hr] = s[n][e] > tile_max[hr] ? s[n][e] : tile_max[hr];
      }
    float alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float mt = quad_max(tile_max[hr]);
      const float m_new = mt > m[hr] ? mt : m[hr];
      alpha[hr] = m_new == -INFINITY ? 1.0f : exp2f(m[hr] - m_new);
      m[hr] = m_new;
      lsum[hr] *= alpha[hr];
    }
#pragma unroll
    for (int n = 0; n < OT; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e / 2;
        const float p = s[n][e] == -INFINITY ? 0.0f : exp2f(s[n][e] - m[hr]);
        s[n][e] = p;
        lsum[hr] += p;
      }
      // O += P·V, 16 keys at a time: P's A fragment from two neighbouring S fragments; V's
      // B fragments by transposing ldmatrix, matrices 0-3: keys [16kk, +8) dims [8n, +8), keys
      // [16kk+8, +8) the same dims, then dims [8n+8, +8)
#pragma unroll
    for (int kk = 0; kk < M::keys / 16; ++kk) {
      const float* s0 = s[2 * kk];
      const float* s1 = s[2 * kk + 1];
      const unsigned pf[4] = {pack2(static_cast<T>(s0[0]), static_cast<T>(s0[1])),
                              pack2(static_cast<T>(s0[2]), static_cast<T>(s0[3])),
                              pack2(static_cast<T>(s1[0]), static_cast<T>(s1[1])),
                              pack2(static_cast<T>(s1[2]), static_cast<T>(s1[3]))};
#pragma unroll
      for (int n = 0; n < OT; n += 2) {
        const int mi = lane / 8;
        unsigned vf[4];
        load_matrix_x4<true>(vf,
                             vt + (kk * 16 + (mi & 1) * 8 + lane % 8) * ld + n * 8 + (mi >> 1) * 8);
        const unsigned b0[2] = {vf[0], vf[1]}, b1[2] = {vf[2], vf[3]};
        mma_16816<T>(o[n], pf, b0);
        mma_16816<T>(o[n + 1], pf, b1);
      }
    }
  }

// finish: the quad's sums; normalise and write (or this split's partial state)
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float l = quad_sum(lsum[hr]);
    const bool nan_row = quad_sum(bad[hr] ? 1.0f : 0.0f) > 0;
    const int br = r_lo + 8 * hr;
    if (!live_row(rows, p, br)) continue;
    const Index h = rows.h[br], i = rows.i[br];
    const float inv = nan_row ? NAN : l > 0 ? 1.0f / l : 0.0f;
    // m is in log2 units: the natural log-sum-exp is m·ln 2 + log l
    const float lse = nan_row ? NAN
                      : l > 0 ? m[hr] * 0.6931471805599453f + logf(l) + rows.shift[br]
                              : -INFINITY;
    const Index row = (b * a.heads + h) * a.len_q + i;
#pragma unroll
    for (int n = 0; n < OT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n * 8 + 2 * tq + e;
        const float y = o[n][2 * hr + e] * inv;
        if (a.splits > 1)
          a.part_out[(p.split * a.batch * a.heads * a.len_q + row) * D + col] = y;
        else
          a.out[b * a.out_stride[0] + i * a.out_stride[1] + h * a.out_stride[2] +
                col * a.out_stride[3]] = static_cast<T>(y);
      }
    if (tq == 0) {
      if (a.splits > 1)
        a.part_lse[p.split * a.batch * a.heads * a.len_q + row] = lse;
      else if (a.lse)
        a.lse[b * a.lse_stride[0] + h * a.lse_stride[1] + i * a.lse_stride[2]] = lse;
    }
  }
}

/// Whether K and V tiles can be copied in 16-byte pieces: unrotated, rows contiguous and
/// 16-byte aligned.
template <class T>
bool kv_in_pieces(const flash_args<T, float>& a) {
  constexpr Index piece = 16 / static_cast<Index>(sizeof(T));
  bool ok = a.rope.pairs == 0 && a.k_stride[3] == 1 && a.v_stride[3] == 1 &&
            reinterpret_cast<std::uintptr_t>(a.k) % 16 == 0 &&
            reinterpret_cast<std::uintptr_t>(a.v) % 16 == 0;
  for (int i = 0; i < 3; ++i) ok = ok && a.k_stride[i] % piece == 0 && a.v_stride[i] % piece == 0;
  return ok;
}

/// The tensor-core kernel for head dim D, with its shared memory allowed first. The copied
/// path double-buffers its K, V tiles; the element-by-element path (RoPE on load, strided
/// keys) has one pair of tiles and so twice the blocks per SM to hide its latency.
template <int D, class T>
void launch_mma(const flash_args<T, float>& args, unsigned blocks, cudaStream_t stream) {
  flash_args<T, float> a = args;
  a.kv_pieces = kv_in_pieces(a);
  const std::size_t shared =
      mma_shared_bytes<T>(D) -
      (a.kv_pieces ? 0 : 2 * sizeof(T) * mma_tiles::keys * (D + mma_tiles::pad));
  cuda::check(
      cudaFuncSetAttribute(flash_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(mma_shared_bytes<T>(D))),
      "cudaFuncSetAttribute(flash_mma_kernel shared memory)");
  flash_mma_kernel<T, D><<<blocks, mma_tiles::threads, shared, stream>>>(a);
  cuda::check_launch("posenc::kernels::flash_mma_kernel");
}

}  // namespace cuda_detail

/// Whether a call takes the tensor-core kernel: 16-bit storage, d = dv = 64, 80, 96 or 128, no
/// boolean or additive mask (those read per logit: the general path), sm_80 or newer.
template <class T, class Acc>
bool uses_tensor_cores(const flash_args<T, Acc>& a, int sm_major) {
  constexpr bool sixteen = std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;
  return sixteen && sm_major >= 8 && a.dim == a.dim_v &&
         (a.dim == 64 || a.dim == 80 || a.dim == 96 || a.dim == 128) && a.allowed == nullptr &&
         a.additive == nullptr;
}

namespace cuda_detail {

/// The tiles kernel for dv <= 32·DVL, with the shared memory it needs allowed first.
template <int DVL, class T, class Acc>
void launch_tiles(const flash_args<T, Acc>& a, unsigned blocks, std::size_t shared,
                  cudaStream_t stream) {
  cuda::check(
      cudaFuncSetAttribute(flash_kernel<T, Acc, DVL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shared)),
      "cudaFuncSetAttribute(flash_kernel shared memory)");
  flash_kernel<T, Acc, DVL><<<blocks, flash_tiles::threads, shared, stream>>>(a);
  cuda::check_launch("posenc::kernels::flash_kernel");
}

}  // namespace cuda_detail

/// Runs a validated device flash call on `stream`: the tensor-core kernel where
/// uses_tensor_cores() says so, else the general one; then (splits > 1) the reduction of
/// the splits. The caller has set row_blocks for the kernel that runs (flash_rows), checked
/// the shared memory (within the device's limit) and sized the split workspace.
template <class T, class Acc>
void flash_forward(backend::cuda const&, const flash_args<T, Acc>& a, cudaStream_t stream) {
  const Index blocks = a.row_blocks * a.batch * a.kv_heads * a.splits;
  if (blocks == 0) return;
  const auto grid = static_cast<unsigned>(blocks);
  bool done = false;
  if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) {
    if (uses_tensor_cores(a, a.sm_major)) {
      switch (a.dim) {
        case 64:
          cuda_detail::launch_mma<64>(a, grid, stream);
          break;
        case 80:
          cuda_detail::launch_mma<80>(a, grid, stream);
          break;
        case 96:
          cuda_detail::launch_mma<96>(a, grid, stream);
          break;
        default:
          cuda_detail::launch_mma<128>(a, grid, stream);
          break;
      }
      done = true;
    }
  }
  if (!done) {
    const std::size_t shared = flash_shared_bytes<Acc>(a.dim, a.dim_v);
    if (a.dim_v <= 32)
      cuda_detail::launch_tiles<1>(a, grid, shared, stream);
    else if (a.dim_v <= 64)
      cuda_detail::launch_tiles<2>(a, grid, shared, stream);
    else if (a.dim_v <= 128)
      cuda_detail::launch_tiles<4>(a, grid, shared, stream);
    else
      cuda_detail::launch_tiles<8>(a, grid, shared, stream);
  }
  if (a.splits > 1) {
    const Index rows = a.batch * a.heads * a.len_q;
    cuda_detail::flash_reduce_kernel<T, Acc>
        <<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(a);
    cuda::check_launch("posenc::kernels::flash_reduce_kernel");
  }
}

/// Rows per block of the kernel that runs the call (flash_forward).
template <class T, class Acc>
Index flash_rows(const flash_args<T, Acc>& a) {
  return uses_tensor_cores(a, a.sm_major) ? mma_tiles::rows : flash_tiles::rows;
}

/// The views of one device merge (attention/merge.hpp): [B, L, H, dv] outputs, [B, H, L]
/// log-sum-exps, strides in elements.
template <class TA, class TB, class TO, class LA, class LB, class LO>
struct merge_args {
  const TA* o_a = nullptr;
  const TB* o_b = nullptr;
  TO* out = nullptr;
  const LA* lse_a = nullptr;
  const LB* lse_b = nullptr;
  LO* lse_out = nullptr;
  Index oa_stride[4] = {}, ob_stride[4] = {}, out_stride[4] = {};
  Index la_stride[3] = {}, lb_stride[3] = {}, lo_stride[3] = {};
  Index batch = 0, len = 0, heads = 0, dim_v = 0;
};

namespace cuda_detail {

/// One warp per (b, h, i) row. A row reads all of its inputs before any lane writes (the
/// output may be an input itself).
template <class Acc, class TA, class TB, class TO, class LA, class LB, class LO>
__global__ void __launch_bounds__(128) merge_kernel(const merge_args<TA, TB, TO, LA, LB, LO> a) {
  const Index rows = a.batch * a.heads * a.len;
  const Index row = static_cast<Index>(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp: the __syncwarp below is the warp's
  const Index i = row % a.len, bh = row / a.len, h = bh % a.heads, b = bh / a.heads;
  Acc wa, wb, lse;
  math::merge_weights(
      static_cast<Acc>(a.lse_a[b * a.la_stride[0] + h * a.la_stride[1] + i * a.la_stride[2]]),
      static_cast<Acc>(a.lse_b[b * a.lb_stride[0] + h * a.lb_stride[1] + i * a.lb_stride[2]]), wa,
      wb, lse);
  const TA* oa = a.o_a + b * a.oa_stride[0] + i * a.oa_stride[1] + h * a.oa_stride[2];
  const TB* ob = a.o_b + b * a.ob_stride[0] + i * a.ob_stride[1] + h * a.ob_stride[2];
  TO* o = a.out + b * a.out_stride[0] + i * a.out_stride[1] + h * a.out_stride[2];
  for (Index c = lane; c < a.dim_v; c += 32) {  // each element read, then written, by one lane
    Acc x = isnan(wa) ? wa : Acc(0);
    if (wa > 0) x += wa * static_cast<Acc>(oa[c * a.oa_stride[3]]);
    if (wb > 0) x += wb * static_cast<Acc>(ob[c * a.ob_stride[3]]);
    o[c * a.out_stride[3]] = static_cast<TO>(x);
  }
  __syncwarp();  // every lane has read the row's lse before lane 0 may overwrite it
  if (lane == 0)
    a.lse_out[b * a.lo_stride[0] + h * a.lo_stride[1] + i * a.lo_stride[2]] = static_cast<LO>(lse);
}

}  // namespace cuda_detail

/// Merges on `stream` (asynchronous); Acc: the arithmetic.
template <class Acc, class TA, class TB, class TO, class LA, class LB, class LO>
void merge_states(backend::cuda const&, const merge_args<TA, TB, TO, LA, LB, LO>& a,
                  cudaStream_t stream) {
  const Index rows = a.batch * a.heads * a.len;
  if (rows == 0) return;
  cuda_detail::merge_kernel<Acc, TA, TB, TO, LA, LB, LO>
      <<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(a);
  cuda::check_launch("posenc::kernels::merge_kernel");
}

}  // namespace kernels
}  // namespace posenc
