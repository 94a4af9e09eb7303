#pragma once
/// \file
/// The RoPE device kernel: rotates the heads of queries and keys ([B, L, H, D] strided
/// views holding device pointers) by their tokens' angles, with the arithmetic of the CPU
/// packet kernels (math::rotate_pair_fused: explicit fused multiply-adds, so the result does
/// not depend on the compiler's contraction).
///
/// Mapping: one thread block per token (a grid-stride loop over the B*L tokens). The block
/// first writes the token's cos/sin row into shared memory (one value per pair and role,
/// from the device cos/sin cache or computed exactly, in double, from the frequencies), then
/// its threads walk every (head, pair) of q and k: consecutive threads take consecutive
/// pairs, so with the half pairing both halves are read and written in coalesced runs. One
/// row serves every head, so the double-precision sin/cos of the on-the-fly mode cost once
/// per token, not once per head.
///
/// Positions: an offset (token l of each sequence at offset + l), per-token ids on the device
/// (L shared by the batch, or B*L), or, for multi-axis RoPE (M-RoPE), an [axes, N] matrix of
/// ids with one axis per pair. A negative id is never used: the kernel reports its index
/// through the error flag and leaves that token untouched, and the entry point throws.

#include <climits>
#include <cstdint>
#include <cstring>

#include "../../config.hpp"
#include "../../core/backend.hpp"
#include "../../core/types.hpp"
#include "../../math/rotation.hpp"
#include "runtime.cuh"

namespace posenc {
namespace kernels {

/// One tensor of a device RoPE call: `out` is `in` (same strides) or shares nothing with it.
template <class T>
struct rope_device_tensor {
  const T* in = nullptr;
  T* out = nullptr;
  Index in_stride[4] = {0, 0, 0, 1};  ///< batch, seq, head, dim (elements)
  Index out_stride[4] = {0, 0, 0, 1};
  Index heads = 0;
  bool key = false;  ///< keys use the key rows (xPos)
};

/// The arguments of rope_rotate(backend::cuda, ...), validated on the host by the entry
/// points of encoding/cuda/rotary.cuh: 0 < 2 * pairs <= head_dim, the pairing is (1, pairs)
/// or (2, 1), every pointer is device memory, and 4 * pairs values of C fit in shared
/// memory (rope_device_max_pairs).
template <class T, class C>
struct rope_device_args {
  rope_device_tensor<T> tensor[2];
  int tensors = 1;
  Index batch = 0;
  Index seq = 0;
  Index head_dim = 0;
  Index pairs = 0;        ///< r/2
  Index pair_step = 1;    ///< 1 (half) or 2 (interleaved)
  Index pair_offset = 0;  ///< pairs (half) or 1 (interleaved)
  bool inverse = false;   ///< rotate by -angle

  // positions of token (b, l): column col = (ids_count == seq ? l : b * seq + l)
  Index offset = 0;                     ///< without ids: position offset + l
  const Index* ids = nullptr;           ///< device ids [axes, ids_count] (row stride ids_count)
  Index ids_count = 0;                  ///< seq or batch * seq
  Index axes = 1;                       ///< > 1: multi-axis, pair i follows axis_of_pair[i]
  const Index* axis_of_pair = nullptr;  ///< device, `pairs` values in [0, axes)

  // cos/sin: a position below cache_rows reads the cache ([rows, pairs] row-major);
  // any other is computed from the frequencies exactly as detail::rope_row does
  const C* cache_cos_q = nullptr;
  const C* cache_sin_q = nullptr;
  const C* cache_cos_k = nullptr;  ///< key rows (xPos); the query rows otherwise
  const C* cache_sin_k = nullptr;
  Index cache_rows = 0;
  const double* inv_freq = nullptr;  ///< device, `pairs` values
  double attention_factor = 1.0;
  double xpos_scale_base = 0.0;  ///< 0: no xPos
  double xpos_gamma = 0.4;
  bool float32_reference = false;  ///< rope_precision::float32_reference

  unsigned long long* bad_id = nullptr;  ///< cuda::error_flag: first negative id's index
};

/// The most pairs a device RoPE call may have: the token's four cos/sin rows live in 48 KiB
/// of shared memory (3072 pairs in float, 1536 in double).
template <class C>
constexpr Index rope_device_max_pairs() {
  return Index(48 * 1024) / Index(4 * sizeof(C));
}

namespace cuda_detail {

/// xPos's scale of pair i at position n, as rope_frequencies::xpos_scale.
__device__ inline double xpos_scale(double scale_base, double gamma, Index pairs, Index i, double n,
                                    bool key) {
  if (!(scale_base > 0.0)) return 1.0;
  const double r = static_cast<double>(2 * pairs);
  const double zeta = (2.0 * static_cast<double>(i) / r + gamma) / (1.0 + gamma);
  const double e = n / scale_base;
  return pow(zeta, key ? -e : e);
}

/// cos/sin of pair i at position n for `key`, as detail::rope_row computes them on the host.
template <class T, class C>
__device__ inline void rope_angle(const rope_device_args<T, C>& a, Index n, Index i, bool key, C& c,
                                  C& s) {
  const double x =
      xpos_scale(a.xpos_scale_base, a.xpos_gamma, a.pairs, i, static_cast<double>(n), key);
  if (!a.float32_reference) {
    math::rope_cos_sin(math::angle(n, a.inv_freq[i]), __dmul_rn(a.attention_factor, x), c, s);
    return;
  }
  // every step rounded to float32, as PyTorch float32 code does
  const float w = static_cast<float>(a.inv_freq[i]);
  const float angle = __fmul_rn(static_cast<float>(n), w);
  const float factor = static_cast<float>(a.attention_factor);
  const float cf = __fmul_rn(static_cast<float>(cos(static_cast<double>(angle))), factor);
  const float sf = __fmul_rn(static_cast<float>(sin(static_cast<double>(angle))), factor);
  const bool xpos = a.xpos_scale_base > 0.0;
  c = static_cast<C>(xpos ? static_cast<float>(__dmul_rn(cf, x)) : cf);
  s = static_cast<C>(xpos ? static_cast<float>(__dmul_rn(sf, x)) : sf);
}

/// n consecutive cos/sin values of the shared row from cs (16-byte aligned when n·sizeof(C)
/// is a multiple of 16): one vector load per 16 bytes, so a warp reads without conflicts.
template <int N, class C>
__device__ inline void load_row(const C* cs, C (&out)[N]) {
  if constexpr ((N * sizeof(C)) % 16 == 0) {
#pragma unroll
    for (int k = 0; k < N; k += static_cast<int>(16 / sizeof(C))) {
      const uint4 raw = *reinterpret_cast<const uint4*>(cs + k);
      memcpy(out + k, &raw, 16);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = cs[k];
  }
}

/// Rotates the heads of one token in 16-byte pieces: W = 16 / sizeof(T) elements per
/// thread. Half pairing: W pairs (i, i + pairs), two pieces; interleaved: W / 2 neighbouring
/// pairs, one piece. The caller has checked rows contiguous, pieces aligned and the rotary
/// dims a whole number of pieces (vector_rotation_ok).
template <class T, class C>
__device__ inline void rotate_pieces(const rope_device_args<T, C>& a, const T* in, T* out,
                                     Index in_head, Index out_head, int heads, const C* cs) {
  constexpr int W = 16 / static_cast<int>(sizeof(T));
  const int pairs = static_cast<int>(a.pairs);
  if (a.pair_step == 1) {
    const int per_head = pairs / W, work = heads * per_head;
    for (int w = threadIdx.x; w < work; w += blockDim.x) {
      const int h = w / per_head, i0 = (w - h * per_head) * W;
      const T* x = in + h * in_head;
      T* y = out + h * out_head;
      T xa[W], xb[W];
      const uint4 ra = *reinterpret_cast<const uint4*>(x + i0);
      const uint4 rb = *reinterpret_cast<const uint4*>(x + pairs + i0);
      memcpy(xa, &ra, 16);
      memcpy(xb, &rb, 16);
      C c[W], sn[W];
      load_row(cs + i0, c);
      load_row(cs + pairs + i0, sn);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        C ya, yb;
        math::rotate_pair_fused(static_cast<C>(xa[k]), static_cast<C>(xb[k]), c[k], sn[k], ya, yb);
        xa[k] = static_cast<T>(ya);
        xb[k] = static_cast<T>(yb);
      }
      uint4 wa, wb;
      memcpy(&wa, xa, 16);
      memcpy(&wb, xb, 16);
      *reinterpret_cast<uint4*>(y + i0) = wa;
      *reinterpret_cast<uint4*>(y + pairs + i0) = wb;
    }
  } else {
    constexpr int P = W / 2;  // pairs per piece
    const int per_head = pairs / P, work = heads * per_head;
    for (int w = threadIdx.x; w < work; w += blockDim.x) {
      const int h = w / per_head, i0 = (w - h * per_head) * P;
      const T* x = in + h * in_head;
      T* y = out + h * out_head;
      T e[W];
      const uint4 r = *reinterpret_cast<const uint4*>(x + 2 * i0);
      memcpy(e, &r, 16);
      C c[P], sn[P];
      load_row(cs + i0, c);
      load_row(cs + pairs + i0, sn);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        C ya, yb;
        math::rotate_pair_fused(static_cast<C>(e[2 * k]), static_cast<C>(e[2 * k + 1]), c[k], sn[k],
                                ya, yb);
        e[2 * k] = static_cast<T>(ya);
        e[2 * k + 1] = static_cast<T>(yb);
      }
      uint4 o;
      memcpy(&o, e, 16);
      *reinterpret_cast<uint4*>(y + 2 * i0) = o;
    }
  }
}

/// Whether tensor v can take rotate_pieces: unit element stride, 16-byte aligned pieces
/// (pointers and the batch, sequence and head strides), whole pieces of rotary dims.
template <class T, class C>
__host__ __device__ inline bool vector_rotation_ok(const rope_device_args<T, C>& a,
                                                   const rope_device_tensor<T>& v) {
  constexpr Index W = 16 / static_cast<Index>(sizeof(T));
  if (sizeof(T) > 8 || v.in_stride[3] != 1 || v.out_stride[3] != 1) return false;
  if (reinterpret_cast<std::uintptr_t>(v.in) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(v.out) % 16 != 0)
    return false;
  for (int i = 0; i < 3; ++i)
    if (v.in_stride[i] % W != 0 || v.out_stride[i] % W != 0) return false;
  // the shared cos/sin rows are read in 16-byte pieces too: pairs a multiple of 16 / sizeof(C)
  const Index per = a.pair_step == 1 ? W : W / 2;
  return a.pairs % per == 0 && a.pairs % static_cast<Index>(16 / sizeof(C)) == 0 &&
         (a.pair_step == 1 ? a.pair_offset == a.pairs : a.pair_step == 2 && a.pair_offset == 1);
}

template <class T, class C>
__global__ void rope_kernel(const rope_device_args<T, C> a) {
  extern __shared__ __align__(16) unsigned char rope_shared[];  // read as C (double)
  C* const row = reinterpret_cast<C*>(rope_shared);             // cos_q, sin_q, cos_k, sin_k
  const int pairs = static_cast<int>(a.pairs);
  const Index tokens = a.batch * a.seq;
  const bool any_key = a.tensor[0].key || (a.tensors > 1 && a.tensor[1].key);
  const bool key_rows = any_key && a.xpos_scale_base > 0.0;
  const C sign = a.inverse ? C(-1) : C(1);

  for (Index tok = blockIdx.x; tok < tokens; tok += gridDim.x) {
    const Index b = tok / a.seq, l = tok - b * a.seq;
    const Index col = a.ids_count == a.seq ? l : tok;
    // the token's cos/sin rows, one pair per thread
    int bad = 0;
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
      Index n = a.offset + l;
      if (a.ids) {
        const Index at = (a.axes > 1 ? a.axis_of_pair[i] * a.ids_count : 0) + col;
        n = a.ids[at];
        if (n < 0) {
          cuda::report_bad_index(a.bad_id, at);
          bad = 1;
          continue;
        }
      }
      C cq, sq, ck, sk;
      if (n < a.cache_rows) {
        const Index k = n * a.pairs + i;
        cq = a.cache_cos_q[k];
        sq = a.cache_sin_q[k];
        ck = key_rows ? a.cache_cos_k[k] : cq;
        sk = key_rows ? a.cache_sin_k[k] : sq;
      } else {
        rope_angle(a, n, i, false, cq, sq);
        ck = cq;
        sk = sq;
        if (key_rows) rope_angle(a, n, i, true, ck, sk);
      }
      row[i] = cq;
      row[pairs + i] = sign * sq;  // the inverse rotation: sin negated (exact)
      row[2 * pairs + i] = ck;
      row[3 * pairs + i] = sign * sk;
    }
    if (__syncthreads_or(bad)) continue;  // a bad id: this token is left as it was

    for (int t = 0; t < a.tensors; ++t) {
      const rope_device_tensor<T>& v = a.tensor[t];
      const C* cs = row + (v.key ? 2 * pairs : 0);
      const T* in = v.in + b * v.in_stride[0] + l * v.in_stride[1];
      T* out = v.out + b * v.out_stride[0] + l * v.out_stride[1];
      const Index is = v.in_stride[3], os = v.out_stride[3];
      const bool pieces = vector_rotation_ok(a, v);
      if (pieces)
        rotate_pieces(a, in, out, v.in_stride[2], v.out_stride[2], static_cast<int>(v.heads), cs);
      const int work = pieces ? 0 : static_cast<int>(v.heads) * pairs;
      for (int w = threadIdx.x; w < work; w += blockDim.x) {
        const int h = w / pairs, i = w - h * pairs;
        const Index da = i * a.pair_step, db = da + a.pair_offset;
        const T* x = in + h * v.in_stride[2];
        T* y = out + h * v.out_stride[2];
        C ya, yb;
        math::rotate_pair_fused(static_cast<C>(x[da * is]), static_cast<C>(x[db * is]), cs[i],
                                cs[pairs + i], ya, yb);
        y[da * os] = static_cast<T>(ya);
        y[db * os] = static_cast<T>(yb);
      }
      // partial rotary: the tail is copied bit for bit when the output is another buffer
      const int tail = static_cast<int>(a.head_dim) - 2 * pairs;
      if (tail > 0 && static_cast<const T*>(v.out) != v.in) {
        const int copies = static_cast<int>(v.heads) * tail;
        for (int w = threadIdx.x; w < copies; w += blockDim.x) {
          const int h = w / tail;
          const Index d = 2 * a.pairs + (w - h * tail);
          out[h * v.out_stride[2] + d * os] = in[h * v.in_stride[2] + d * is];
        }
      }
    }
    __syncthreads();  // the next token reuses the shared row
  }
}

}  // namespace cuda_detail

/// Rotates every token of the call on `stream` (asynchronous; a launch failure throws
/// posenc::error). T: storage (float, double, Eigen::half, Eigen::bfloat16); C: arithmetic.
template <class T, class C>
void rope_rotate(backend::cuda const&, const rope_device_args<T, C>& a, cudaStream_t stream) {
  const Index tokens = a.batch * a.seq;
  if (tokens == 0) return;
  constexpr int threads = 256;
  // enough blocks to fill any current GPU many times over; the kernel loops past it
  const unsigned blocks =
      static_cast<unsigned>(tokens < (Index(1) << 20) ? tokens : Index(1) << 20);
  const std::size_t shared = static_cast<std::size_t>(4 * a.pairs) * sizeof(C);
  cuda_detail::rope_kernel<T, C><<<blocks, threads, shared, stream>>>(a);
  cuda::check_launch("posenc::kernels::rope_kernel");
}

}  // namespace kernels
}  // namespace posenc
