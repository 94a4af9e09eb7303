#pragma once
/// \file
/// The learned table's kernels on CUDA: row lookup / add (also the fused embedding's token
/// gather), the backward pass (scatter-add), and the SGD step. W and its gradient are
/// [max_len, dim] row-major and contiguous on the device.
///
/// Mapping:
///
///     learned_rows        one thread per (row, column), flat and grid-stride, columns
///                         fastest (coalesced on W and on a row-major out); the W element
///                         is read once and written to every sequence of the batch
///     learned_backward    offset form: one thread per (row, column) summing the batch in
///                         order, no atomics (each gradient element has one writer);
///                         positions form: one thread per (row, column), atomicAdd into
///                         the gradient (the order of repeated positions varies run to run;
///                         a float atomicAdd may flush subnormal values to zero: PTX's
///                         atom.add.f32)
///     learned_backward_sorted   positions form, deterministic: a stable radix sort of
///                         (position, row) (CUB), then one thread per (first row of a run of
///                         equal positions, column) adds the run's rows in row order, as
///                         the CPU loop does: bit-identical to the CPU, and to itself
///     learned_sgd         one thread per element, w = fl(w - fl(lr * g))
///
/// Every product and sum is explicitly rounded (absolute::mul_rn / add_rn / sub_rn), so
/// nvcc cannot contract what the CPU rounds twice: lookups, adds, the offset backward,
/// the sorted backward and SGD give the CPU scalar code's bits.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "../../core/backend.hpp"
#include "../../core/types.hpp"
#include "runtime.cuh"
#include "sinusoidal.cuh"

namespace posenc {
namespace kernels {

/// out(b, r, :) = W(pos_r, :), or scale * x(b, r, :) + W(pos_r, :) with x = out itself or
/// a gathered token row (source). pos_r = positions ? positions[r] : first_position + r.
template <class T>
struct learned_rows_args {
  const T* weights = nullptr;  ///< W, [max_len, dim] row-major, device
  Index max_len = 0;
  Index dim = 0;
  Index rows = 0;  ///< rows of one sequence
  Index first_position = 0;
  const Index* positions = nullptr;  ///< device, `rows` entries; null: first_position + r
  T* out = nullptr;                  ///< sequence 0, row 0 (device)
  Index batch = 1;
  Index batch_stride = 0;  ///< elements between sequences of out
  Index row_stride = 0;    ///< elements between rows of out
  Index col_stride = 1;    ///< elements between columns of out
  bool accumulate = false;
  T scale = T(1);
  absolute::row_source<T> source;  ///< x when accumulating from a token table
  /// Device flag: a position outside [0, max_len) is reported (its index) and its row left
  /// as it was. Null when the positions were checked before the launch.
  unsigned long long* bad_position = nullptr;
};

/// The gradient of W from dL/d(out) of a lookup/add: grad(pos_r, :) += g(b, r, :) for every
/// sequence b, in order. Positions (device) must lie in [0, max_len) (checked before the
/// launch; rows outside are skipped); with positions, batch is 1.
template <class T>
struct learned_backward_args {
  T* grad = nullptr;  ///< [max_len, dim] row-major, device
  Index max_len = 0;
  Index dim = 0;
  const T* grad_output = nullptr;  ///< g, device
  Index rows = 0;
  Index batch = 1;
  Index batch_stride = 0;
  Index row_stride = 0;
  Index col_stride = 1;
  Index first_position = 0;
  const Index* positions = nullptr;
};

/// A position as a radix-sort key: the unsigned type of Index (same bits for the
/// non-negative positions sorted, and allowed to alias them).
using position_key = std::make_unsigned_t<Index>;

/// Scratch of the sorted backward, grown on demand and kept by its owner between calls
/// (cudaMalloc synchronises the device; reuse avoids it).
struct scatter_workspace {
  cuda::device_buffer<unsigned char> temp;         ///< CUB's temporary storage
  cuda::device_buffer<position_key> keys;          ///< sorted positions
  cuda::device_buffer<Index> order_in, order_out;  ///< row numbers, before and after
};

namespace absolute {

template <class T>
__global__ void learned_rows_kernel(const learned_rows_args<T> a) {
  const Index work = a.rows * a.dim;
  for (Index k = thread_index(); k < work; k += grid_stride()) {
    const Index r = k / a.dim, j = k - r * a.dim;
    const Index pos = a.positions ? a.positions[r] : a.first_position + r;
    if (pos < 0 || pos >= a.max_len) {  // never read outside W
      if (a.bad_position) cuda::report_bad_index(a.bad_position, r);
      continue;
    }
    const T w = a.weights[pos * a.dim + j];
    // batch: the same W element for every sequence
    for (Index b = 0; b < a.batch; ++b) {
      T* y = a.out + b * a.batch_stride + r * a.row_stride + j * a.col_stride;
      if (!a.accumulate) {
        *y = w;
        continue;
      }
      T x;
      if (a.source.data) {
        const T* row = source_row(a.source, a.rows, b, r);
        if (!row) continue;
        x = row[j * a.source.col_stride];
      } else {
        x = *y;
      }
      *y = add_rn(mul_rn(a.scale, x), w);
    }
  }
}

template <class T>
__global__ void learned_backward_rows_kernel(const learned_backward_args<T> a) {
  const Index work = a.rows * a.dim;
  for (Index k = thread_index(); k < work; k += grid_stride()) {
    const Index r = k / a.dim, j = k - r * a.dim;
    T* g = a.grad + (a.first_position + r) * a.dim + j;
    T acc = *g;
    for (Index b = 0; b < a.batch; ++b)  // in order: the CPU's sum
      acc = add_rn(acc, a.grad_output[b * a.batch_stride + r * a.row_stride + j * a.col_stride]);
    *g = acc;
  }
}

template <class T>
__global__ void learned_scatter_atomic_kernel(const learned_backward_args<T> a) {
  const Index work = a.rows * a.dim;
  for (Index k = thread_index(); k < work; k += grid_stride()) {
    const Index r = k / a.dim, j = k - r * a.dim;
    const Index pos = a.positions[r];
    if (pos < 0 || pos >= a.max_len) continue;
    atomicAdd(a.grad + pos * a.dim + j, a.grad_output[r * a.row_stride + j * a.col_stride]);
  }
}

template <class I>
__global__ void iota_kernel(I* out, I n) {
  for (I i = thread_index(); i < n; i += grid_stride()) out[i] = i;
}

// blocks over sorted entries k (x), threads over columns (y blocks when dim is wide); only
// the first entry of each run of equal positions works
template <class T>
__global__ void learned_scatter_sorted_kernel(const learned_backward_args<T> a,
                                              const position_key* keys, const Index* order) {
  for (Index k = blockIdx.x; k < a.rows; k += gridDim.x) {
    const position_key pos = keys[k];
    if (k > 0 && keys[k - 1] == pos) continue;  // not the run's first entry
    if (pos >= static_cast<position_key>(a.max_len)) continue;
    for (Index j = static_cast<Index>(blockIdx.y) * blockDim.x + threadIdx.x; j < a.dim;
         j += static_cast<Index>(gridDim.y) * blockDim.x) {
      T* g = a.grad + static_cast<Index>(pos) * a.dim + j;
      T acc = *g;
      for (Index e = k; e < a.rows && keys[e] == pos; ++e)  // rows in order (stable sort)
        acc = add_rn(acc, a.grad_output[order[e] * a.row_stride + j * a.col_stride]);
      *g = acc;
    }
  }
}

template <class T>
__global__ void learned_sgd_kernel(T* w, const T* g, Index n, T lr) {
  for (Index i = thread_index(); i < n; i += grid_stride()) w[i] = sub_rn(w[i], mul_rn(lr, g[i]));
}

}  // namespace absolute

/// Looks up or adds W's rows on `stream` (asynchronous; launch errors throw posenc::error).
template <class T>
void learned_rows(backend::cuda const&, const learned_rows_args<T>& a, cudaStream_t stream) {
  POSENC_KERNEL_TRACE("learned_rows", "cuda");
  const Index work = a.rows * a.dim;
  if (work == 0 || a.batch == 0) return;
  absolute::learned_rows_kernel<T>
      <<<absolute::blocks_for(work), absolute::block_threads, 0, stream>>>(a);
  cuda::check_launch("posenc::kernels::learned_rows");
}

/// Accumulates the gradient on `stream`: the offset form in the CPU's order (deterministic),
/// the positions form with atomicAdd (repeated positions sum in a varying order).
template <class T>
void learned_backward(backend::cuda const&, const learned_backward_args<T>& a,
                      cudaStream_t stream) {
  POSENC_KERNEL_TRACE("learned_backward", "cuda");
  const Index work = a.rows * a.dim;
  if (work == 0 || a.batch == 0) return;
  if (a.positions)
    absolute::learned_scatter_atomic_kernel<T>
        <<<absolute::blocks_for(work), absolute::block_threads, 0, stream>>>(a);
  else
    absolute::learned_backward_rows_kernel<T>
        <<<absolute::blocks_for(work), absolute::block_threads, 0, stream>>>(a);
  cuda::check_launch("posenc::kernels::learned_backward");
}

/// The positions form of learned_backward, deterministic and bit-identical to the CPU:
/// a stable sort of the positions, then each run of equal positions summed in row order.
/// `ws` grows to fit (a cudaMalloc the first time, which synchronises the device).
template <class T>
void learned_backward_sorted(backend::cuda const&, const learned_backward_args<T>& a,
                             scatter_workspace& ws, cudaStream_t stream) {
  POSENC_KERNEL_TRACE("learned_backward_sorted", "cuda");
  const Index n = a.rows;
  if (n == 0 || a.dim == 0) return;
  if (ws.keys.size() < n) {
    ws.keys.resize(n);
    ws.order_in.resize(n);
    ws.order_out.resize(n);
  }
  absolute::iota_kernel<Index>
      <<<absolute::blocks_for(n), absolute::block_threads, 0, stream>>>(ws.order_in.data(), n);
  cuda::check_launch("posenc::kernels::learned_backward_sorted (row numbers)");
  // positions are in [0, max_len): sort only the bits that can differ; non-negative, so
  // their two's-complement bits read as unsigned keys in the same order
  const auto* keys_in = reinterpret_cast<const position_key*>(a.positions);
  int end_bit = 1;
  while (end_bit < 63 && (static_cast<position_key>(a.max_len - 1) >> end_bit) != 0) ++end_bit;
  std::size_t temp_bytes = 0;
  cuda::check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, ws.keys.data(),
                                              ws.order_in.data(), ws.order_out.data(), n, 0,
                                              end_bit, stream),
              "cub::DeviceRadixSort::SortPairs (size)");
  if (ws.temp.size() < static_cast<Index>(temp_bytes))
    ws.temp.resize(static_cast<Index>(temp_bytes));
  cuda::check(cub::DeviceRadixSort::SortPairs(ws.temp.data(), temp_bytes, keys_in, ws.keys.data(),
                                              ws.order_in.data(), ws.order_out.data(), n, 0,
                                              end_bit, stream),
              "cub::DeviceRadixSort::SortPairs");
  const int threads = static_cast<int>(std::min<Index>((a.dim + 31) / 32 * 32, 256));
  const dim3 grid(
      static_cast<unsigned int>(std::min<Index>(n, Index(1) << 20)),
      static_cast<unsigned int>(std::min<Index>((a.dim + threads - 1) / threads, 65535)));
  absolute::learned_scatter_sorted_kernel<T>
      <<<grid, threads, 0, stream>>>(a, ws.keys.data(), ws.order_out.data());
  cuda::check_launch("posenc::kernels::learned_backward_sorted");
}

/// w -= lr * g over `count` contiguous elements, each product and difference rounded as
/// the CPU's `weights -= Scalar(lr) * grad` does.
template <class T>
void learned_sgd(backend::cuda const&, T* weights, const T* grad, Index count, T learning_rate,
                 cudaStream_t stream) {
  POSENC_KERNEL_TRACE("learned_sgd", "cuda");
  if (count == 0) return;
  absolute::learned_sgd_kernel<T>
      <<<absolute::blocks_for(count), absolute::block_threads, 0, stream>>>(weights, grad, count,
                                                                            learning_rate);
  cuda::check_launch("posenc::kernels::learned_sgd");
}

}  // namespace kernels
}  // namespace posenc
