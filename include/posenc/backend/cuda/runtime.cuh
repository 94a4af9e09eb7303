#pragma once
/// \file
/// The CUDA runtime as posenc uses it: errors become posenc::error, device memory is owned
/// by RAII buffers, Eigen matrices travel to and from the device, and kernels report bad
/// data (an index out of range in a device array) through a device error flag that the
/// entry point reads back, instead of reading out of bounds.
///
/// Only for translation units compiled by nvcc (the backend::cuda tag and everything under
/// backend/cuda/ and encoding/cuda/). posenc never allocates managed memory; the caller
/// owns the data its views point to.
///
///     posenc::cuda::device_buffer<float> q(n);        // cudaMalloc, freed by the destructor
///     auto dq = posenc::cuda::to_device(q_host);      // an Eigen matrix, row-major on device
///     posenc::row_matrix<float> back = posenc::cuda::to_host(dq, rows, cols);

#if !defined(__CUDACC__)
#error "posenc/backend/cuda: compile this translation unit with nvcc (the CUDA backend)"
#endif

#include <cuda_runtime.h>

#include <Eigen/Core>
#include <climits>
#include <cstddef>
#include <string>
#include <utility>

#include "../../config.hpp"
#include "../../core/error.hpp"
#include "../../core/types.hpp"

namespace posenc {
namespace cuda {

/// Throws posenc::error "posenc::cuda: <call>: <cudaGetErrorString> (<cudaGetErrorName>)"
/// unless `status` is cudaSuccess.
inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // reported here: not again by the next check_launch
    throw error(std::string("posenc::cuda: ") + call + ": " + cudaGetErrorString(status) + " (" +
                cudaGetErrorName(status) + ")");
  }
}

/// After a kernel launch: throws posenc::error naming `kernel` if the launch failed (bad
/// configuration, no device, an earlier asynchronous fault).
inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), (std::string("launch of ") + kernel).c_str());
}

/// The number of CUDA devices this process can use (0 without a device or driver).
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

/// Owns `size()` elements of device memory (cudaMalloc); move-only. An empty buffer holds
/// no allocation. Contents are uninitialised unless zero() is called.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  /// Allocates `count` elements. Throws posenc::error for count < 0 or a failed cudaMalloc.
  explicit device_buffer(Index count) { allocate(count); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~device_buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  Index size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  /// Makes room for `count` elements; the old contents are not kept.
  void resize(Index count) {
    if (count == size_) return;
    release();
    allocate(count);
  }
  /// Sets every byte to zero on `stream`.
  void zero(cudaStream_t stream = nullptr) {
    if (size_ > 0)
      check(cudaMemsetAsync(data_, 0, bytes(), stream), "cudaMemsetAsync(device_buffer::zero)");
  }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(size_) * sizeof(T); }

 private:
  void allocate(Index count) {
    detail::require(count >= 0, "cuda::device_buffer", "count", count, "must be >= 0");
    if (count == 0) return;
    detail::require(static_cast<unsigned long long>(count) <= ULLONG_MAX / sizeof(T),
                    "cuda::device_buffer", "count", count, "the size in bytes overflows");
    void* p = nullptr;
    check(cudaMalloc(&p, static_cast<std::size_t>(count) * sizeof(T)), "cudaMalloc");
    data_ = static_cast<T*>(p);
    size_ = count;
  }
  void release() noexcept {
    if (data_) (void)cudaFree(data_);  // a destructor cannot throw: a failed free is lost
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  Index size_ = 0;
};

/// Copies `count` elements from host memory to device memory (blocking the host until the
/// source may be reused, as cudaMemcpyAsync from pageable memory does).
template <class T>
void copy_to_device(T* device, const T* host, Index count, cudaStream_t stream = nullptr) {
  detail::require(count >= 0, "cuda::copy_to_device", "count", count, "must be >= 0");
  if (count == 0) return;
  check(cudaMemcpyAsync(device, host, static_cast<std::size_t>(count) * sizeof(T),
                        cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync(host to device)");
}

/// Copies `count` elements from device memory to host memory; returns when they are there.
template <class T>
void copy_to_host(T* host, const T* device, Index count, cudaStream_t stream = nullptr) {
  detail::require(count >= 0, "cuda::copy_to_host", "count", count, "must be >= 0");
  if (count == 0) return;
  check(cudaMemcpyAsync(host, device, static_cast<std::size_t>(count) * sizeof(T),
                        cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(device to host)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(copy_to_host)");
}

/// Device scratch memory in stream order (cudaMallocAsync / cudaFreeAsync on one stream):
/// what a call uploads for its kernels (tables, masks, partial results) can be released as
/// the call returns, before the kernels have run, without waiting for them. Move-only.
template <class T>
class stream_buffer {
 public:
  stream_buffer() = default;
  stream_buffer(Index count, cudaStream_t stream) : stream_(stream) {
    detail::require(count >= 0, "cuda::stream_buffer", "count", count, "must be >= 0");
    if (count == 0) return;
    detail::require(static_cast<unsigned long long>(count) <= ULLONG_MAX / sizeof(T),
                    "cuda::stream_buffer", "count", count, "the size in bytes overflows");
    void* p = nullptr;
    check(cudaMallocAsync(&p, static_cast<std::size_t>(count) * sizeof(T), stream),
          "cudaMallocAsync");
    data_ = static_cast<T*>(p);
  }
  /// A device copy of `count` host elements, in stream order.
  stream_buffer(const T* host, Index count, cudaStream_t stream) : stream_buffer(count, stream) {
    copy_to_device(data_, host, count, stream);
  }
  stream_buffer(const stream_buffer&) = delete;
  stream_buffer& operator=(const stream_buffer&) = delete;
  stream_buffer(stream_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), stream_(o.stream_) {}
  stream_buffer& operator=(stream_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      stream_ = o.stream_;
    }
    return *this;
  }
  ~stream_buffer() { release(); }
  T* data() const noexcept { return data_; }

 private:
  void release() noexcept {
    if (data_) (void)cudaFreeAsync(data_, stream_);  // after the work queued before it
    data_ = nullptr;
  }
  T* data_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

/// A device copy of any Eigen matrix, stored row-major (one token per row), as the views
/// of the API expect.
template <class Derived>
device_buffer<typename Derived::Scalar> to_device(const Eigen::MatrixBase<Derived>& m,
                                                  cudaStream_t stream = nullptr) {
  using T = typename Derived::Scalar;
  const row_matrix<T> host = m;  // row-major and contiguous
  device_buffer<T> d(host.size());
  copy_to_device(d.data(), host.data(), host.size(), stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(to_device)");
  return d;
}

/// A [rows, cols] row-major host matrix of the first rows * cols elements at `device`.
template <class T>
row_matrix<T> to_host(const T* device, Index rows, Index cols, cudaStream_t stream = nullptr) {
  detail::require(rows >= 0, "cuda::to_host", "rows", rows, "must be >= 0");
  detail::require(cols >= 0, "cuda::to_host", "cols", cols, "must be >= 0");
  row_matrix<T> host(rows, cols);
  copy_to_host(host.data(), device, host.size(), stream);
  return host;
}

/// to_host() of a buffer, which must hold at least rows * cols elements.
template <class T>
row_matrix<T> to_host(const device_buffer<T>& d, Index rows, Index cols,
                      cudaStream_t stream = nullptr) {
  detail::require(rows >= 0 && cols >= 0 && (cols == 0 || rows <= d.size() / cols), "cuda::to_host",
                  "rows * cols", static_cast<double>(rows) * static_cast<double>(cols),
                  "must be <= the buffer's size = " + std::to_string(d.size()));
  return to_host(d.data(), rows, cols, stream);
}

/// The first bad index a kernel met in a device array, reported by atomicMin. One per
/// entry point call: arm() before the launch, then first_bad() after it (a blocking read of
/// 8 bytes) is -1 when every index was good.
class error_flag {
 public:
  static constexpr unsigned long long none = ULLONG_MAX;

  /// The flag's device word, for the kernel's argument struct.
  unsigned long long* device() noexcept { return word_.data(); }
  /// Resets the flag to `none` on `stream` (allocating it on first use).
  void arm(cudaStream_t stream) {
    if (word_.empty()) word_.resize(1);
    check(cudaMemcpyAsync(word_.data(), &none_value, sizeof(none), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync(error_flag::arm)");
  }
  /// Waits for `stream` and returns the smallest bad index reported, or -1.
  Index first_bad(cudaStream_t stream) {
    unsigned long long v = none;
    copy_to_host(&v, word_.data(), 1, stream);
    return v == none ? Index(-1) : static_cast<Index>(v);
  }

 private:
  static constexpr unsigned long long none_value = none;
  device_buffer<unsigned long long> word_;
};

/// In a kernel: records that element `index` of a checked device array was bad.
__device__ inline void report_bad_index(unsigned long long* flag, Index index) {
  atomicMin(flag, static_cast<unsigned long long>(index));
}

}  // namespace cuda
}  // namespace posenc
