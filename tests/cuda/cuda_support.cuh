#pragma once
// Helpers of the CUDA tests: host vectors to device buffers and back.
#include <posenc/backend/cuda/runtime.cuh>
#include <vector>

namespace posenc_test {

/// A device copy of `host`; returns when the copy is complete.
template <class T>
posenc::cuda::device_buffer<T> upload(const std::vector<T>& host) {
  posenc::cuda::device_buffer<T> d(static_cast<posenc::Index>(host.size()));
  posenc::cuda::copy_to_device(d.data(), host.data(), d.size());
  posenc::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(upload)");
  return d;
}

/// The buffer's elements on the host (waits for the default stream).
template <class T>
std::vector<T> download(const posenc::cuda::device_buffer<T>& d) {
  std::vector<T> host(static_cast<std::size_t>(d.size()));
  posenc::cuda::copy_to_host(host.data(), d.data(), d.size());
  return host;
}

}  // namespace posenc_test
