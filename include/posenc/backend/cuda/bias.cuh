#pragma once
/// \file
/// Bias materialisation on the device: ALiBi biases, T5 bucket indices and T5 biases
/// written into caller-owned [H, Lq, Lk] (or [Lq, Lk]) memory, for users who feed another
/// attention kernel. The validating entry points are in encoding/cuda/bias.cuh.
///
/// Thread mapping (every kernel here):
///
///     thread (x, y) of block (bx, by, bz)  ->  key j = bx·blockDim.x + x    (fastest: a warp
///                                              writes consecutive keys, coalesced)
///                                              query i = by·blockDim.y + y
///                                              heads [bz·per_thread, (bz+1)·per_thread)
///
/// with grid-stride loops on all three axes, so any extent fits the grid limits. A thread
/// computes the distance of its (i, j) once (and, for T5, its bucket)
/// and writes it for each of its heads; the launcher splits the heads over blockIdx.z only
/// when there are too few (i, j) pairs to fill the device (decoding: Lq = 1).
///
/// Exactness: the values are math::alibi_bias / math::t5_bucket, the functions the CPU
/// calls, evaluated in double, and rounded to the output type once, as Eigen converts on
/// the host (through float for half and bfloat16). No expression has a product feeding a
/// sum (ALiBi is one product; the bucket divides, then multiplies), so nvcc's FMA
/// contraction cannot change a result. ALiBi slopes contain exp2 and are therefore taken
/// from the host (the policy's), passed by value in the kernel parameters; for the same
/// reason the T5 logarithmic buckets are counted against boundaries found on the host with
/// the host's log (t5_bucket_params), not evaluated with the device's.

#include <cuda_runtime.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../core/backend.hpp"
#include "../../core/types.hpp"
#include "../../math/alibi.hpp"
#include "../../math/t5_bucket.hpp"
#include "runtime.cuh"

namespace posenc {
namespace kernels {

/// Where element (h, i, j) of an [H, Lq, Lk] output lives: data[h·sh + i·sq + j·sk]
/// (strides in elements, any sign; the entry point checked that elements are distinct).
template <class T>
struct bias_output {
  T* data = nullptr;
  Index heads = 0, len_q = 0, len_k = 0;
  Index stride_h = 0, stride_q = 0, stride_k = 1;
};

/// kernels::alibi_bias(): out(h, i, j) = math::alibi_bias(slopes[h], q_offset + i - j,
/// symmetric). `slopes` (out.heads of them) is host memory.
template <class T>
struct alibi_bias_args {
  bias_output<T> out;
  const double* slopes = nullptr;
  Index q_offset = 0;
  bool symmetric = false;
};

/// Most logarithmic-bucket boundaries that travel in a launch's parameters (T5's 32
/// bidirectional buckets need 7).
inline constexpr int t5_max_boundaries = 64;

/// The T5 bucket function's parameters (a checked t5_bucket_config), with the boundaries of
/// its logarithmic buckets found on the host: first[k] is the smallest distance whose
/// bucket is E + 1 + k (E = the exact buckets of a side). The device then counts
/// boundaries instead of evaluating its own log, whose last bit may differ from the host's
/// at a boundary, so its buckets are the host's bit for bit. With more than
/// t5_max_boundaries (boundaries = -1) the device evaluates math::t5_log_bucket itself.
struct t5_bucket_params {
  Index num_buckets = 32;
  Index max_distance = 128;
  bool bidirectional = true;
  int boundaries = -1;
  Index first[t5_max_boundaries] = {};
};

/// The parameters of a checked configuration, boundaries included (host; a binary search
/// per boundary over math::t5_log_bucket, which is non-decreasing in the distance).
inline t5_bucket_params make_t5_bucket_params(Index num_buckets, Index max_distance,
                                              bool bidirectional) {
  t5_bucket_params p;
  p.num_buckets = num_buckets;
  p.max_distance = max_distance;
  p.bidirectional = bidirectional;
  const Index buckets = bidirectional ? num_buckets / 2 : num_buckets, exact = buckets / 2;
  const Index count = buckets - 1 - exact;
  if (count > t5_max_boundaries) return p;
  for (Index k = 0; k < count; ++k) {
    // every distance >= max_distance is in the last bucket: the boundary is at most that
    Index lo = exact, hi = std::max(max_distance, exact);
    while (lo < hi) {
      const Index mid = lo + (hi - lo) / 2;
      if (math::t5_log_bucket(mid, buckets, max_distance) >= exact + 1 + k)
        hi = mid;
      else
        lo = mid + 1;
    }
    p.first[k] = lo;
  }
  p.boundaries = static_cast<int>(count);
  return p;
}

/// kernels::t5_buckets(): out(i, j) = math::t5_bucket(j - (q_offset + i)) as I (int32 or
/// Index). The output is a one-head bias_output (heads = 1, stride_h unused).
template <class I>
struct t5_buckets_args {
  bias_output<I> out;
  t5_bucket_params bucket;
  Index q_offset = 0;
};

/// kernels::t5_bias(): out(h, i, j) = table(bucket(j - (q_offset + i)), h), the table
/// [num_buckets, H] on the device at table[b·table_stride_b + h·table_stride_h].
template <class T, class Table>
struct t5_bias_args {
  bias_output<T> out;
  const Table* table = nullptr;
  Index table_stride_b = 0, table_stride_h = 1;
  t5_bucket_params bucket;
  Index q_offset = 0;
};

namespace cuda_detail {

/// Heads whose slopes travel in one launch's parameters (1 KiB of the 4 KiB allowed).
inline constexpr Index alibi_heads_per_launch = 128;

struct alibi_slope_chunk {
  double slope[alibi_heads_per_launch];
};

/// A stored value in double: exact for every storage type (16-bit ones widen via float).
template <class T>
__device__ inline double load_real(const T& x) noexcept {
  if constexpr (std::is_arithmetic_v<T>)
    return static_cast<double>(x);
  else
    return static_cast<double>(static_cast<float>(x));
}

/// A double rounded to T once, as static_cast<T>(double) on the host: half and bfloat16
/// through float, as Eigen's converting constructors do, so the bits equal the CPU's cast.
template <class T>
__device__ inline T store_real(double v) noexcept {
  if constexpr (std::is_arithmetic_v<T>)
    return static_cast<T>(v);
  else
    return T(static_cast<float>(v));
}

/// The grid of one launch: see the file comment.
struct bias_launch {
  dim3 grid, block;
  Index heads_per_thread = 1;
};

/// Blocks of 256 threads, as wide along the keys as Lk allows (a warp's stores stay
/// consecutive); heads split over blockIdx.z only until about 2^20 threads exist.
inline bias_launch plan_bias_launch(Index heads, Index len_q, Index len_k) noexcept {
  bias_launch l;
  const unsigned bx = len_k >= 128 ? 128u : len_k > 32 ? 64u : 32u;
  const unsigned by = 256u / bx;
  // head groups: ceil(2^20 / (Lq·Lk)), at least 1, at most one per head
  const double pairs = static_cast<double>(len_q) * static_cast<double>(len_k);
  const double wanted = std::ceil(static_cast<double>(1 << 20) / pairs);
  const Index groups =
      wanted >= static_cast<double>(heads) ? heads : std::max<Index>(1, static_cast<Index>(wanted));
  l.heads_per_thread = heads / groups + (heads % groups != 0);
  const Index z = heads / l.heads_per_thread + (heads % l.heads_per_thread != 0);
  const Index gx = len_k / bx + (len_k % bx != 0), gy = len_q / by + (len_q % by != 0);
  l.block = dim3(bx, by, 1);
  l.grid = dim3(static_cast<unsigned>(std::min<Index>(gx, 0x7fffffff)),
                static_cast<unsigned>(std::min<Index>(gy, 65535)),
                static_cast<unsigned>(std::min<Index>(z, 65535)));
  return l;
}

template <class T>
__global__ void alibi_bias_kernel(bias_output<T> out, alibi_slope_chunk slopes, Index first_head,
                                  Index count, Index per_thread, Index q_offset, bool symmetric) {
  const Index j0 = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Index i0 = static_cast<Index>(blockIdx.y) * blockDim.y + threadIdx.y;
  const Index j_step = static_cast<Index>(gridDim.x) * blockDim.x;
  const Index i_step = static_cast<Index>(gridDim.y) * blockDim.y;
  // head groups of this chunk
  for (Index h0 = static_cast<Index>(blockIdx.z) * per_thread; h0 < count;
       h0 += static_cast<Index>(gridDim.z) * per_thread) {
    const Index h1 = h0 + per_thread < count ? h0 + per_thread : count;
    // queries
    for (Index i = i0; i < out.len_q; i += i_step) {
      const Index pos = q_offset + i;
      T* row = out.data + (first_head + h0) * out.stride_h + i * out.stride_q;
      // keys
      for (Index j = j0; j < out.len_k; j += j_step) {
        T* p = row + j * out.stride_k;
        for (Index h = h0; h < h1; ++h, p += out.stride_h)
          *p = store_real<T>(math::alibi_bias(slopes.slope[h], pos - j, symmetric));
      }
    }
  }
}

/// math::t5_bucket with the host's boundaries (t5_bucket_params).
__device__ inline Index t5_bucket_of(Index relative, const t5_bucket_params& b) noexcept {
  Index base, buckets, n;
  math::t5_bucket_side(relative, b.num_buckets, b.bidirectional, base, buckets, n);
  const Index exact = buckets / 2;
  if (n < exact) return base + n;
  if (b.boundaries < 0) return base + math::t5_log_bucket(n, buckets, b.max_distance);
  Index v = exact;
  for (int k = 0; k < b.boundaries; ++k) v += n >= b.first[k] ? 1 : 0;
  return base + v;
}

template <class I>
__global__ void t5_buckets_kernel(bias_output<I> out, t5_bucket_params b, Index q_offset) {
  const Index j0 = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Index i0 = static_cast<Index>(blockIdx.y) * blockDim.y + threadIdx.y;
  const Index j_step = static_cast<Index>(gridDim.x) * blockDim.x;
  const Index i_step = static_cast<Index>(gridDim.y) * blockDim.y;
  for (Index i = i0; i < out.len_q; i += i_step) {
    const Index pos = q_offset + i;
    I* row = out.data + i * out.stride_q;
    for (Index j = j0; j < out.len_k; j += j_step)
      row[j * out.stride_k] = static_cast<I>(t5_bucket_of(j - pos, b));
  }
}

template <class T, class Table>
__global__ void t5_bias_kernel(bias_output<T> out, const Table* __restrict__ table, Index ts_b,
                               Index ts_h, t5_bucket_params b, Index per_thread, Index q_offset) {
  const Index j0 = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Index i0 = static_cast<Index>(blockIdx.y) * blockDim.y + threadIdx.y;
  const Index j_step = static_cast<Index>(gridDim.x) * blockDim.x;
  const Index i_step = static_cast<Index>(gridDim.y) * blockDim.y;
  for (Index h0 = static_cast<Index>(blockIdx.z) * per_thread; h0 < out.heads;
       h0 += static_cast<Index>(gridDim.z) * per_thread) {
    const Index h1 = h0 + per_thread < out.heads ? h0 + per_thread : out.heads;
    for (Index i = i0; i < out.len_q; i += i_step) {
      const Index pos = q_offset + i;
      T* row = out.data + h0 * out.stride_h + i * out.stride_q;
      for (Index j = j0; j < out.len_k; j += j_step) {
        // one bucket per (i, j), shared by the thread's heads
        const Index bucket = t5_bucket_of(j - pos, b);
        const Table* t = table + bucket * ts_b + h0 * ts_h;
        T* p = row + j * out.stride_k;
        for (Index h = h0; h < h1; ++h, p += out.stride_h, t += ts_h)
          *p = store_real<T>(load_real(*t));
      }
    }
  }
}

}  // namespace cuda_detail

/// Writes the ALiBi biases of a.out (asynchronous on `stream`). Launches one kernel per
/// 128 heads (their slopes ride in the parameters). Throws posenc::error when a launch
/// fails; an empty output launches nothing.
template <class T>
void alibi_bias(backend::cuda const&, const alibi_bias_args<T>& a, cudaStream_t stream) {
  POSENC_KERNEL_TRACE("alibi_bias", "cuda");
  if (a.out.heads == 0 || a.out.len_q == 0 || a.out.len_k == 0) return;
  for (Index first = 0; first < a.out.heads; first += cuda_detail::alibi_heads_per_launch) {
    const Index count = std::min(cuda_detail::alibi_heads_per_launch, a.out.heads - first);
    cuda_detail::alibi_slope_chunk chunk{};
    std::copy(a.slopes + first, a.slopes + first + count, chunk.slope);
    const auto l = cuda_detail::plan_bias_launch(count, a.out.len_q, a.out.len_k);
    cuda_detail::alibi_bias_kernel<T><<<l.grid, l.block, 0, stream>>>(
        a.out, chunk, first, count, l.heads_per_thread, a.q_offset, a.symmetric);
    posenc::cuda::check_launch("alibi_bias_kernel");
  }
}

/// Writes the T5 bucket indices of a.out (asynchronous on `stream`).
template <class I>
void t5_buckets(backend::cuda const&, const t5_buckets_args<I>& a, cudaStream_t stream) {
  POSENC_KERNEL_TRACE("t5_buckets", "cuda");
  if (a.out.len_q == 0 || a.out.len_k == 0) return;
  const auto l = cuda_detail::plan_bias_launch(1, a.out.len_q, a.out.len_k);
  cuda_detail::t5_buckets_kernel<I><<<l.grid, l.block, 0, stream>>>(a.out, a.bucket, a.q_offset);
  posenc::cuda::check_launch("t5_buckets_kernel");
}

/// Writes the T5 biases of a.out from the device table (asynchronous on `stream`).
template <class T, class Table>
void t5_bias(backend::cuda const&, const t5_bias_args<T, Table>& a, cudaStream_t stream) {
  POSENC_KERNEL_TRACE("t5_bias", "cuda");
  if (a.out.heads == 0 || a.out.len_q == 0 || a.out.len_k == 0) return;
  const auto l = cuda_detail::plan_bias_launch(a.out.heads, a.out.len_q, a.out.len_k);
  cuda_detail::t5_bias_kernel<T, Table><<<l.grid, l.block, 0, stream>>>(
      a.out, a.table, a.table_stride_b, a.table_stride_h, a.bucket, l.heads_per_thread, a.q_offset);
  posenc::cuda::check_launch("t5_bias_kernel");
}

}  // namespace kernels
}  // namespace posenc
