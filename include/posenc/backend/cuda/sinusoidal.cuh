#pragma once
/// \file
/// The sinusoidal-table kernel on CUDA, and the pieces every absolute-table kernel on the
/// device shares (learned.cuh builds on them): the explicitly rounded products and sums,
/// the launch shape, the token-row source of a fused embedding, and the index check.
///
/// Mapping: one thread per (row, pair) of the table, flat over rows x (pairs + padding
/// columns), grid-stride. A thread evaluates sin and cos of its angle once, in double
/// (math::angle, then ::sincos: CUDA's double sin/cos are within 2 double ulp, so the
/// value rounded once to T is within 1 ulp of T of the CPU scalar kernel's), and writes
/// (or accumulates) them at the pair's two columns of every sequence of the batch:
///
///     interleaved (vaswani):   thread i -> columns 2i, 2i+1     [s0 c0 s1 c1 ... | pad]
///     blocked (fairseq, t2t):  thread i -> columns i, pairs+i   [s0 s1 ... | c0 c1 ... | pad]
///     thread i = pairs (odd dim only) -> the padding column 2 * pairs
///
/// Neighbouring threads write neighbouring columns, so the stores coalesce on a row-major
/// table. Accumulation is out = fl(fl(scale * x) + T(PE)) (fl(scale * x) in the padding
/// column) with __fmul_rn / __fadd_rn (mul_rn, add_rn below), never contracted to a fused
/// multiply-add: the same bits as the CPU scalar kernel, which rounds the product too.

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "../../core/backend.hpp"
#include "../../core/types.hpp"
#include "../../math/rotation.hpp"
#include "../scalar/sinusoidal.hpp"
#include "runtime.cuh"

namespace posenc {
namespace kernels {
namespace absolute {

/// a * b rounded once to nearest (never fused into a following add).
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
/// a + b rounded once to nearest.
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
/// a - b rounded once to nearest.
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }

/// The largest position magnitude the sinusoidal kernel takes: 2^53, exact in double (the
/// encoding's sinusoidal_max_position).
inline constexpr Index exact_position_limit = Index{1} << 53;

/// Threads per block of the table kernels: memory-bound element-wise work, where 256
/// keeps every SM busy with few blocks in flight.
inline constexpr int block_threads = 256;

/// Blocks for `work` items of one thread each, capped (the kernels stride over the rest):
/// 2^20 blocks of 256 threads fill any current GPU many times over.
inline unsigned int blocks_for(Index work) {
  const Index blocks = (work + block_threads - 1) / block_threads;
  return static_cast<unsigned int>(std::min<Index>(std::max<Index>(blocks, 1), Index(1) << 20));
}

/// The first global thread index and the grid's stride, in Index.
__device__ inline Index thread_index() {
  return static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline Index grid_stride() { return static_cast<Index>(gridDim.x) * blockDim.x; }

/// Where the x of an accumulation (out = scale * x + table row) comes from when it is not
/// `out` itself: row ids[b * rows + r] of a [count, dim] device matrix (a token table),
/// for the fused embedding (cuda::embed). An id outside [0, count) is reported to `bad`
/// (its index in `ids`) and its output row is left as it was.
template <class T>
struct row_source {
  const T* data = nullptr;            ///< null: x is out's own element (in place)
  Index row_stride = 0;               ///< elements between rows of `data`
  Index col_stride = 1;               ///< elements between columns of `data`
  Index count = 0;                    ///< rows of `data`: every id must be in [0, count)
  const Index* ids = nullptr;         ///< device, batch * rows ids, sequence-major
  unsigned long long* bad = nullptr;  ///< device error flag (cuda::error_flag)
};

/// The row of `src` that output row (b, r) reads, or nullptr (reported) for a bad id.
template <class T>
__device__ inline const T* source_row(const row_source<T>& src, Index rows, Index b, Index r) {
  const Index k = b * rows + r;
  const Index id = src.ids[k];
  if (id < 0 || id >= src.count) {
    cuda::report_bad_index(src.bad, k);
    return nullptr;
  }
  return src.data + id * src.row_stride;
}

/// Reports every i with idx[i] outside [lo, hi] to `bad`. (A template, as every kernel of
/// these headers: a header's __global__ function cannot be inline.)
template <class I>
__global__ void find_bad_indices_kernel(const I* idx, I n, I lo, I hi, unsigned long long* bad) {
  for (I i = thread_index(); i < n; i += grid_stride())
    if (idx[i] < lo || idx[i] > hi) cuda::report_bad_index(bad, i);
}

}  // namespace absolute

/// Checks a device array before a kernel that must not start on bad data (one that
/// updates in place): every idx[i] outside [lo, hi] is reported to `bad` (an armed
/// cuda::error_flag's word), whose smallest index the entry point reads back.
inline void find_bad_indices(backend::cuda const&, const Index* idx, Index n, Index lo, Index hi,
                             unsigned long long* bad, cudaStream_t stream) {
  if (n <= 0) return;
  absolute::find_bad_indices_kernel<Index>
      <<<absolute::blocks_for(n), absolute::block_threads, 0, stream>>>(idx, n, lo, hi, bad);
  cuda::check_launch("posenc::kernels::find_bad_indices");
}

/// The CPU's sinusoidal_rows_args (whose pointers are device pointers here: inv_freq,
/// positions, out) plus what a device launch adds: a batch of sequences that get the same
/// rows (the table is evaluated once per row, for all of them), the source of x for a
/// fused embedding, and the flag for positions beyond +-2^53 in a device array.
template <class T>
struct sinusoidal_device_args {
  sinusoidal_rows_args<T> rows;    ///< as on the CPU; `out` is sequence 0
  Index batch = 1;                 ///< sequences
  Index batch_stride = 0;          ///< elements between sequences of `out`
  absolute::row_source<T> source;  ///< x of the accumulation when not `out` (rows.accumulate)
  /// Device flag for rows.positions: a position beyond +-2^53 is reported (its index) and
  /// its row left as it was. Null when the positions were checked on the host.
  unsigned long long* bad_position = nullptr;
};

namespace absolute {

template <class T>
__global__ void sinusoidal_rows_kernel(const sinusoidal_device_args<T> d) {
  const sinusoidal_rows_args<T>& a = d.rows;
  const Index columns = a.pairs + (a.dim - 2 * a.pairs);  // pairs, then the padding column
  const Index work = a.rows * columns;
  for (Index k = thread_index(); k < work; k += grid_stride()) {
    const Index r = k / columns, i = k - r * columns;
    const Index pos = a.positions ? a.positions[r] : a.first_position + r;
    if (d.bad_position && (pos < -exact_position_limit || pos > exact_position_limit)) {
      cuda::report_bad_index(d.bad_position, r);
      continue;
    }
    const bool pad = i >= a.pairs;
    const bool zero_row = a.has_zero_position && pos == a.zero_position;
    T s = T(0), c = T(0);
    if (!pad && !zero_row) {
      double sd, cd;
      ::sincos(math::angle(pos, a.inv_freq[i]), &sd, &cd);
      s = static_cast<T>(sd);
      c = static_cast<T>(cd);
    }
    const Index js = pad ? 2 * a.pairs : i * a.sin_step;  // the pair's columns
    const Index jc = js + a.cos_offset;
    // batch: the same row for every sequence
    for (Index b = 0; b < d.batch; ++b) {
      T* y = a.out + b * d.batch_stride + r * a.row_stride;
      if (!a.accumulate) {
        y[js * a.col_stride] = s;
        if (!pad) y[jc * a.col_stride] = c;
        continue;
      }
      const T* x = y;
      Index xs = a.col_stride;
      if (d.source.data) {
        x = source_row(d.source, a.rows, b, r);
        if (!x) continue;
        xs = d.source.col_stride;
      }
      if (pad) {  // PE is zero there: scale * x, as the CPU (no + 0, which would turn -0 to +0)
        y[js * a.col_stride] = mul_rn(a.scale, x[js * xs]);
        continue;
      }
      const T xc = x[jc * xs];  // read both before writing: x may be y
      y[js * a.col_stride] = add_rn(mul_rn(a.scale, x[js * xs]), s);
      y[jc * a.col_stride] = add_rn(mul_rn(a.scale, xc), c);
    }
  }
}

}  // namespace absolute

/// Writes or accumulates the sinusoidal rows of a batch on `stream` (asynchronous; launch
/// errors throw posenc::error). The arguments are those the validating entry point built
/// (encoding/cuda/sinusoidal.cuh), with device pointers.
template <class T>
void sinusoidal_rows(backend::cuda const&, const sinusoidal_device_args<T>& a,
                     cudaStream_t stream) {
  POSENC_KERNEL_TRACE("sinusoidal_rows", "cuda");
  const Index work = a.rows.rows * (a.rows.pairs + (a.rows.dim - 2 * a.rows.pairs));
  if (work == 0 || a.batch == 0) return;
  absolute::sinusoidal_rows_kernel<T>
      <<<absolute::blocks_for(work), absolute::block_threads, 0, stream>>>(a);
  cuda::check_launch("posenc::kernels::sinusoidal_rows");
}

/// The CPU's arguments as they are (one sequence, positions checked on the host).
template <class T>
void sinusoidal_rows(backend::cuda const& tag, const sinusoidal_rows_args<T>& a,
                     cudaStream_t stream) {
  sinusoidal_device_args<T> d;
  d.rows = a;
  sinusoidal_rows(tag, d, stream);
}

}  // namespace kernels
}  // namespace posenc
