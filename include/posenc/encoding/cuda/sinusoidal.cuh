#pragma once
/// \file
/// The sinusoidal encoding on a CUDA device: `posenc::sinusoidal<Scalar, backend::cuda>`,
/// the same configuration, validation, frequencies and error messages as the CPU class
/// (encoding/sinusoidal.hpp), with methods that write device memory on a stream.
///
///     posenc::sinusoidal<float, posenc::backend::cuda>
///     pe(posenc::sinusoidal_config::vaswani(512));
///     pe.add_to(posenc::seq_view<float>::contiguous(d_emb, {seq, 512}), 0,
///               posenc::embedding_scale::sqrt_dim, stream);    // E = sqrt(d) E + PE, on device
///
/// Views and position arrays hold device pointers; the caller owns them. Every call is
/// asynchronous on its stream except those that take device positions, which wait for the
/// stream to read back the error flag (a position beyond +-2^53 is a posenc::error naming
/// its index and value, e.g. `posenc::sinusoidal::at: positions[3] = 9007199254740993:
/// must be within +-2^53 (exact in double)`).
///
/// Results: each value within 1 ulp of Scalar of the CPU scalar backend's (sin and cos in
/// double, rounded once; CUDA's double sin/cos are within 2 double ulp), and add_to rounds
/// fl(fl(s * E) + PE) as the CPU does.
///
/// An object holds its frequencies, a staging buffer for host positions and an error flag
/// on the device that was current when it was made; its calls are ordered on the stream
/// they are given, so one object used from two streams at once needs the caller's
/// synchronisation.

#include <cuda_runtime.h>

#include <string>
#include <type_traits>
#include <vector>

#include "../../backend/cuda/runtime.cuh"
#include "../../backend/cuda/sinusoidal.cuh"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/types.hpp"
#include "../../core/view.hpp"
#include "../sinusoidal.hpp"

namespace posenc {
namespace cuda {
namespace detail {
struct absolute_access;  // cuda::embed's way to the encodings' kernel arguments
}  // namespace detail
}  // namespace cuda

/// The sinusoidal encoding on a CUDA device (see the file comment). Copying uploads the
/// frequencies again (a blocking copy).
template <class Scalar>
class sinusoidal<Scalar, backend::cuda> {
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>,
                "posenc::sinusoidal<Scalar, backend::cuda>: Scalar must be float or double");

 public:
  using scalar_type = Scalar;          ///< element type of tables and embeddings
  using backend_type = backend::cuda;  ///< kernel tag
  /// A [rows, d] row-major host table.
  using matrix = row_matrix<Scalar>;

  /// Validates as the CPU class does (same posenc::error messages), computes the
  /// frequencies on the host in double and copies them to the current device.
  explicit sinusoidal(const sinusoidal_config& config)
      : config_(config), inv_freq_(detail::sinusoidal_frequencies(config)) {
    upload();
  }
  /// The Vaswani et al. encoding of width `dim` with base 10000.
  explicit sinusoidal(Index dim) : sinusoidal(sinusoidal_config::vaswani(dim)) {}
  sinusoidal(const sinusoidal& other) : config_(other.config_), inv_freq_(other.inv_freq_) {
    upload();
  }
  sinusoidal& operator=(const sinusoidal& other) {
    if (this != &other) {
      config_ = other.config_;
      inv_freq_ = other.inv_freq_;
      upload();
    }
    return *this;
  }
  sinusoidal(sinusoidal&&) noexcept = default;
  sinusoidal& operator=(sinusoidal&&) noexcept = default;
  ~sinusoidal() = default;

  /// The validated configuration.
  const sinusoidal_config& config() const noexcept { return config_; }
  /// d, the width of every row.
  Index dim() const noexcept { return config_.dim; }
  /// Number of (sin, cos) pairs: d / 2 (rounded down).
  Index pairs() const noexcept { return config_.dim / 2; }
  /// w_i on the host, identical to the CPU class's.
  const std::vector<double>& frequencies() const noexcept { return inv_freq_; }
  /// The same `pairs()` frequencies in device memory.
  const double* device_frequencies() const noexcept { return d_inv_freq_.data(); }
  /// True for [s0 c0 s1 c1 ...] (vaswani), false for [s0 s1 ... c0 c1 ...].
  bool interleaved() const noexcept { return config_.preset == sinusoidal_preset::vaswani; }
  /// Column holding sin(p w_i).
  Index sin_column(Index i) const noexcept { return interleaved() ? 2 * i : i; }
  /// Column holding cos(p w_i).
  Index cos_column(Index i) const noexcept { return interleaved() ? 2 * i + 1 : pairs() + i; }
  /// fairseq's position of the first real token, padding_idx + 1 (0 without padding_idx).
  Index fairseq_first_position() const noexcept { return config_.padding_idx + 1; }

  /// Writes the table of positions offset .. offset + len - 1 into a device [len, d] view
  /// (any strides): row r = PE(offset + r).
  void table_into(const seq_view<Scalar>& out, Index offset = 0,
                  cudaStream_t stream = nullptr) const {
    check_width("sinusoidal::table_into", out.extent(1));
    detail::sinusoidal_check_range("sinusoidal::table_into", out.extent(0), offset);
    run(args(out, offset, nullptr, false, Scalar(1)), stream);
  }

  /// Writes PE(positions[r]) into row r of a device [n, d] view; the host positions are
  /// checked as on the CPU, then copied to the device.
  void at(const std::vector<Index>& positions, const seq_view<Scalar>& out,
          cudaStream_t stream = nullptr) const {
    const Index n = static_cast<Index>(positions.size());
    check_out("sinusoidal::at", out, n);
    detail::sinusoidal_check_positions("sinusoidal::at", positions);
    if (n == 0) return;
    if (staged_.size() < n) staged_.resize(n);
    cuda::copy_to_device(staged_.data(), positions.data(), n, stream);
    run(args(out, 0, staged_.data(), false, Scalar(1)), stream);
  }

  /// Writes PE(positions[r]) into row r of a device [count, d] view, for `count` positions
  /// in device memory. Waits for the stream; a position beyond +-2^53 is a posenc::error
  /// naming the first one (its row of `out` is left as it was).
  void at(const Index* positions, Index count, const seq_view<Scalar>& out,
          cudaStream_t stream = nullptr) const {
    detail::require(count >= 0, "sinusoidal::at", "count", count, "must be >= 0");
    detail::require(positions != nullptr || count == 0, "sinusoidal::at", "positions", "nullptr",
                    "must point to `count` device positions");
    check_out("sinusoidal::at", out, count);
    if (count == 0) return;
    auto a = args(out, 0, positions, false, Scalar(1));
    flag_.arm(stream);
    a.bad_position = flag_.device();
    run(a, stream);
    const Index bad = flag_.first_bad(stream);
    if (bad >= 0) {
      Index value = 0;
      cuda::copy_to_host(&value, positions + bad, 1, stream);
      detail::fail("sinusoidal::at", "positions[" + std::to_string(bad) + "]", value,
                   "must be within +-2^53 (exact in double)");
    }
  }

  /// Adds PE to a device [seq, d] view in place: E(r, :) = s * E(r, :) + PE(offset + r),
  /// s = 1 or sqrt(d), fused in one pass.
  void add_to(const seq_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none, cudaStream_t stream = nullptr) const {
    check_width("sinusoidal::add_to", embeddings.extent(1));
    detail::sinusoidal_check_range("sinusoidal::add_to", embeddings.extent(0), offset);
    run(args(embeddings, offset, nullptr, true, detail::sinusoidal_scale<Scalar>(scale, dim())),
        stream);
  }

  /// Adds PE to a device [batch, seq, d] view: every sequence gets PE(offset) ..
  /// PE(offset + seq - 1); each value is computed once for the whole batch.
  void add_to(const batch_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none, cudaStream_t stream = nullptr) const {
    check_width("sinusoidal::add_to", embeddings.extent(2));
    detail::sinusoidal_check_range("sinusoidal::add_to", embeddings.extent(1), offset);
    run(batch_args(embeddings, offset, true, detail::sinusoidal_scale<Scalar>(scale, dim())),
        stream);
  }

 private:
  friend struct cuda::detail::absolute_access;

  void upload() {
    d_inv_freq_.resize(pairs());
    cuda::copy_to_device(d_inv_freq_.data(), inv_freq_.data(), pairs());
    cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize(sinusoidal)");
  }

  // the kernel's arguments for the rows of one [rows, d] view
  kernels::sinusoidal_device_args<Scalar> args(const seq_view<Scalar>& out, Index first,
                                               const Index* positions, bool accumulate,
                                               Scalar scale) const noexcept {
    kernels::sinusoidal_device_args<Scalar> d;
    kernels::sinusoidal_rows_args<Scalar>& a = d.rows;
    a.inv_freq = d_inv_freq_.data();
    a.pairs = pairs();
    a.dim = dim();
    a.sin_step = interleaved() ? 2 : 1;
    a.cos_offset = interleaved() ? 1 : pairs();
    a.rows = out.extent(0);
    a.first_position = first;
    a.positions = positions;
    a.has_zero_position = config_.padding_idx >= 0;
    a.zero_position = config_.padding_idx;
    a.out = out.data();
    a.row_stride = out.stride(0);
    a.col_stride = out.stride(1);
    a.accumulate = accumulate;
    a.scale = scale;
    return d;
  }
  kernels::sinusoidal_device_args<Scalar> batch_args(const batch_view<Scalar>& out, Index first,
                                                     bool accumulate, Scalar scale) const {
    const seq_view<Scalar> first_sequence =
        out.empty() ? seq_view<Scalar>()
                    : seq_view<Scalar>(out.data(), {out.extent(1), out.extent(2)},
                                       {out.stride(1), out.stride(2)});
    auto d = args(first_sequence, first, nullptr, accumulate, scale);
    d.batch = out.extent(0);
    d.batch_stride = out.stride(0);
    return d;
  }

  static void run(const kernels::sinusoidal_device_args<Scalar>& a, cudaStream_t stream) {
    kernels::sinusoidal_rows(backend::cuda{}, a, stream);
  }

  // the CPU's width message (its table_into and add_to name the view "embeddings")
  void check_width(const char* where, Index cols) const {
    detail::require(cols == dim(), where, "embeddings.cols", cols,
                    "must equal the encoding's dim (" + std::to_string(dim()) + ")");
  }
  void check_out(const char* where, const seq_view<Scalar>& out, Index n) const {
    detail::require(out.extent(1) == dim(), where, "out.cols", out.extent(1),
                    "must equal the encoding's dim (" + std::to_string(dim()) + ")");
    detail::require(out.extent(0) == n, where, "out.rows", out.extent(0),
                    "must equal the number of positions (" + std::to_string(n) + ")");
  }

  sinusoidal_config config_;
  std::vector<double> inv_freq_;
  cuda::device_buffer<double> d_inv_freq_;
  mutable cuda::device_buffer<Index> staged_;  // host positions, copied for the kernel
  mutable cuda::error_flag flag_;              // bad device positions
};

}  // namespace posenc
