#pragma once
/// \file
/// Learned absolute position embeddings on a CUDA device, `posenc::cuda::learned_table`,
/// and the device embedding layer `posenc::cuda::embed`.
///
///     forward   out(r, :)     = s * E(r, :) + W(pos_r, :)         s = 1 or sqrt(d)
///     backward  dL/dW(p, :)  += sum over r with pos_r = p of dL/dout(r, :)
///     SGD       W            -= lr * dL/dW
///     embed     out(r, :)     = s * tokens(id_r, :) + PE(offset + r)
///
/// The table lives on the device (W and its gradient, [max_len, d] row-major); it is made
/// from a host posenc::learned_table (or matrix) and goes back with to_host(). Host
/// arguments are validated as on the CPU, with the same messages from
/// "cuda::learned_table::<method>". Positions and token ids in device arrays are checked by
/// the kernels (never read out of bounds): the call waits for its stream and throws
/// posenc::error naming the first bad index and its value, e.g.
/// `posenc::cuda::learned_table::at: positions[17] = 4096: must be in [0, max_len) with
/// max_len = 1024`. The calls that update in place (add_at, backward) check the device
/// positions before they change anything; at() and embed() leave the bad rows of their
/// output as they were.
///
/// Results: lookups, adds, the backward pass with offsets or with
/// backward_mode::deterministic, and sgd_step give the CPU's bits (every product and sum
/// rounded as the CPU rounds it); backward_mode::atomic too where positions do not repeat
/// (and no value is subnormal: a float atomicAdd may flush those to zero), and otherwise sums
/// repeated positions in a varying order.
///
/// An object's calls are ordered on the stream they are given; one object used from two
/// streams at once needs the caller's synchronisation. Move-only.

#include <cuda_runtime.h>

#include <Eigen/Core>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../../backend/cuda/learned.cuh"
#include "../../backend/cuda/runtime.cuh"
#include "../../backend/cuda/sinusoidal.cuh"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/types.hpp"
#include "../../core/view.hpp"
#include "../learned.hpp"
#include "../sinusoidal.hpp"
#include "sinusoidal.cuh"

namespace posenc {
namespace cuda {

/// How backward() with positions sums repeated positions.
enum class backward_mode {
  atomic,         ///< atomicAdd: fastest; repeated positions add up in a varying order
  deterministic,  ///< sort, then sum each position's rows in row order: the CPU's bits
};

/// A trainable [max_len, d] table of position embeddings with its gradient, on the device
/// (see the file comment). Scalar is float or double.
template <class Scalar>
class learned_table {
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>,
                "posenc::cuda::learned_table: Scalar must be float or double");

 public:
  using scalar_type = Scalar;  ///< element type of the table
  /// A [rows, d] row-major host matrix.
  using matrix = row_matrix<Scalar>;

  /// A device copy of a host table: its weights and its gradient.
  explicit learned_table(const posenc::learned_table<Scalar>& host, cudaStream_t stream = nullptr)
      : max_len_(host.max_len()),
        dim_(host.dim()),
        weights_(host.max_len() * host.dim()),
        grad_(host.max_len() * host.dim()) {
    copy_to_device(weights_.data(), host.weights().data(), weights_.size(), stream);
    copy_to_device(grad_.data(), host.gradient().data(), grad_.size(), stream);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(learned_table)");
  }
  /// A device table holding the given [max_len, d] values, with a zero gradient; validated
  /// as posenc::learned_table(weights) is (same messages).
  template <class Derived>
  explicit learned_table(const Eigen::MatrixBase<Derived>& weights, cudaStream_t stream = nullptr)
      : learned_table(posenc::learned_table<Scalar>(weights), stream) {}

  learned_table(learned_table&&) noexcept = default;
  learned_table& operator=(learned_table&&) noexcept = default;

  /// Number of positions, the table's rows.
  Index max_len() const noexcept { return max_len_; }
  /// d, the width of every row.
  Index dim() const noexcept { return dim_; }
  /// W on the device, [max_len, d] row-major.
  Scalar* weights() noexcept { return weights_.data(); }
  const Scalar* weights() const noexcept { return weights_.data(); }
  /// dL/dW on the device, [max_len, d] row-major.
  const Scalar* gradient() const noexcept { return grad_.data(); }

  /// W copied to the host, bit for bit.
  matrix weights_to_host(cudaStream_t stream = nullptr) const {
    return cuda::to_host(weights_, max_len_, dim_, stream);
  }
  /// dL/dW copied to the host, bit for bit.
  matrix gradient_to_host(cudaStream_t stream = nullptr) const {
    return cuda::to_host(grad_, max_len_, dim_, stream);
  }
  /// A host table with these weights and this gradient (the gradient added to a zero one,
  /// so a -0 element comes back as +0; weights must be finite, as the host class requires).
  posenc::learned_table<Scalar> to_host(cudaStream_t stream = nullptr) const {
    posenc::learned_table<Scalar> host(weights_to_host(stream));
    host.backward(gradient_to_host(stream), 0);
    return host;
  }

  /// Writes W(positions[r], :) into row r of a device [n, d] view (host positions, checked
  /// as on the CPU).
  void at(const std::vector<Index>& positions, const seq_view<Scalar>& out,
          cudaStream_t stream = nullptr) const {
    const char* where = "cuda::learned_table::at";
    check_out(where, out, static_cast<Index>(positions.size()));
    check_positions(where, positions);
    rows(out, 0, stage(positions, stream), false, Scalar(1), nullptr, stream);
  }
  /// Writes W(positions[r], :) into row r of a device [count, d] view for `count` device
  /// positions. Waits for the stream; a bad position is a posenc::error (its row of `out`
  /// left as it was).
  void at(const Index* positions, Index count, const seq_view<Scalar>& out,
          cudaStream_t stream = nullptr) const {
    const char* where = "cuda::learned_table::at";
    check_device_positions(where, positions, count);
    check_out(where, out, count);
    if (count == 0) return;
    flag_.arm(stream);
    rows(out, 0, positions, false, Scalar(1), flag_.device(), stream);
    throw_bad_position(where, positions, stream);
  }

  /// Writes rows offset .. offset + len - 1 of W into a device [len, d] view.
  void table_into(const seq_view<Scalar>& out, Index offset = 0,
                  cudaStream_t stream = nullptr) const {
    const char* where = "cuda::learned_table::table_into";
    check_width(where, out.extent(1));
    check_range(where, out.extent(0), offset);
    check_no_weights(where, out);
    rows(out, offset, nullptr, false, Scalar(1), nullptr, stream);
  }

  /// E(r, :) = s * E(r, :) + W(offset + r, :) for a device [seq, d] view.
  void add_to(const seq_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none, cudaStream_t stream = nullptr) const {
    const char* where = "cuda::learned_table::add_to";
    check_width(where, embeddings.extent(1));
    check_range(where, embeddings.extent(0), offset);
    check_no_weights(where, embeddings);
    rows(embeddings, offset, nullptr, true, scale_value(scale), nullptr, stream);
  }
  /// Every sequence of a device [batch, seq, d] view gets W(offset + t, :) added.
  void add_to(const batch_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none, cudaStream_t stream = nullptr) const {
    const char* where = "cuda::learned_table::add_to";
    check_width(where, embeddings.extent(2));
    check_range(where, embeddings.extent(1), offset);
    check_no_weights(where, embeddings);
    kernels::learned_rows(backend::cuda{}, batch_args(embeddings, offset, scale), stream);
  }

  /// E(r, :) = s * E(r, :) + W(positions[r], :) for a device [n, d] view (host positions).
  void add_at(const seq_view<Scalar>& embeddings, const std::vector<Index>& positions,
              embedding_scale scale = embedding_scale::none, cudaStream_t stream = nullptr) const {
    const char* where = "cuda::learned_table::add_at";
    check_width(where, embeddings.extent(1));
    check_rows(where, embeddings.extent(0), static_cast<Index>(positions.size()));
    check_positions(where, positions);
    check_no_weights(where, embeddings);
    rows(embeddings, 0, stage(positions, stream), true, scale_value(scale), nullptr, stream);
  }
  /// add_at() for `count` device positions: they are all checked first (waiting for the
  /// stream), so a bad one throws before E changes.
  void add_at(const seq_view<Scalar>& embeddings, const Index* positions, Index count,
              embedding_scale scale = embedding_scale::none, cudaStream_t stream = nullptr) const {
    const char* where = "cuda::learned_table::add_at";
    check_device_positions(where, positions, count);
    check_width(where, embeddings.extent(1));
    check_rows(where, embeddings.extent(0), count);
    check_no_weights(where, embeddings);
    if (count == 0) return;
    precheck(where, positions, count, stream);
    rows(embeddings, 0, positions, true, scale_value(scale), nullptr, stream);
  }

  /// Accumulates dL/dW from a device [n, d] dL/d(output) of a lookup/add at host
  /// `positions`: gradient(positions[r], :) += grad_output(r, :).
  void backward(const seq_view<const Scalar>& grad_output, const std::vector<Index>& positions,
                backward_mode mode = backward_mode::atomic, cudaStream_t stream = nullptr) {
    const char* where = "cuda::learned_table::backward";
    check_width(where, grad_output.extent(1));
    check_rows(where, grad_output.extent(0), static_cast<Index>(positions.size()));
    check_positions(where, positions);
    check_no_gradient(where, grad_output);
    scatter(grad_output, stage(positions, stream), mode, stream);
  }
  /// backward() for `count` device positions, all checked before the gradient changes
  /// (waiting for the stream).
  void backward(const seq_view<const Scalar>& grad_output, const Index* positions, Index count,
                backward_mode mode = backward_mode::atomic, cudaStream_t stream = nullptr) {
    const char* where = "cuda::learned_table::backward";
    check_device_positions(where, positions, count);
    check_width(where, grad_output.extent(1));
    check_rows(where, grad_output.extent(0), count);
    check_no_gradient(where, grad_output);
    if (count == 0) return;
    precheck(where, positions, count, stream);
    scatter(grad_output, positions, mode, stream);
  }
  /// Accumulates dL/dW for an add_to(E, offset) of a device [seq, d] E:
  /// gradient(offset + r, :) += grad_output(r, :). Deterministic (one writer per element).
  void backward(const seq_view<const Scalar>& grad_output, Index offset = 0,
                cudaStream_t stream = nullptr) {
    backward(batch_view<const Scalar>(grad_output.data(),
                                      {1, grad_output.extent(0), grad_output.extent(1)},
                                      {0, grad_output.stride(0), grad_output.stride(1)}),
             offset, stream);
  }
  /// Accumulates dL/dW for an add_to of a device [batch, seq, d] view at `offset`: the
  /// batch's gradients at each position add up in batch order, as on the CPU.
  void backward(const batch_view<const Scalar>& grad_output, Index offset = 0,
                cudaStream_t stream = nullptr) {
    const char* where = "cuda::learned_table::backward";
    check_width(where, grad_output.extent(2));
    check_range(where, grad_output.extent(1), offset);
    check_no_gradient(where, grad_output);
    kernels::learned_backward_args<Scalar> a = backward_args(grad_output.data());
    a.rows = grad_output.extent(1);
    a.batch = grad_output.extent(0);
    a.batch_stride = grad_output.stride(0);
    a.row_stride = grad_output.stride(1);
    a.col_stride = grad_output.stride(2);
    a.first_position = offset;
    kernels::learned_backward(backend::cuda{}, a, stream);
  }

  /// Sets dL/dW to zero.
  void zero_grad(cudaStream_t stream = nullptr) { grad_.zero(stream); }

  /// Plain SGD: W -= learning_rate * dL/dW, rounded as the CPU's sgd_step. The gradient is
  /// kept. Throws posenc::error for a negative or non-finite learning rate.
  void sgd_step(double learning_rate, cudaStream_t stream = nullptr) {
    posenc::detail::require(std::isfinite(learning_rate) && learning_rate >= 0,
                            "cuda::learned_table::sgd_step", "learning_rate", learning_rate,
                            "must be finite and >= 0");
    kernels::learned_sgd(backend::cuda{}, weights_.data(), grad_.data(), weights_.size(),
                         static_cast<Scalar>(learning_rate), stream);
  }

 private:
  friend struct detail::absolute_access;

  Scalar scale_value(embedding_scale scale) const noexcept {
    return posenc::detail::sinusoidal_scale<Scalar>(scale, dim_);
  }

  // host positions copied to the device, for the kernel
  const Index* stage(const std::vector<Index>& positions, cudaStream_t stream) const {
    const Index n = static_cast<Index>(positions.size());
    if (staged_.size() < n) staged_.resize(n);
    copy_to_device(staged_.data(), positions.data(), n, stream);
    return staged_.data();
  }

  kernels::learned_rows_args<Scalar> seq_args(const seq_view<Scalar>& out, Index first,
                                              const Index* positions, bool accumulate,
                                              Scalar scale) const noexcept {
    kernels::learned_rows_args<Scalar> a;
    a.weights = weights_.data();
    a.max_len = max_len_;
    a.dim = dim_;
    a.rows = out.extent(0);
    a.first_position = first;
    a.positions = positions;
    a.out = out.data();
    a.row_stride = out.stride(0);
    a.col_stride = out.stride(1);
    a.accumulate = accumulate;
    a.scale = scale;
    return a;
  }
  kernels::learned_rows_args<Scalar> batch_args(const batch_view<Scalar>& out, Index first,
                                                embedding_scale scale) const {
    const seq_view<Scalar> first_sequence =
        out.empty() ? seq_view<Scalar>()
                    : seq_view<Scalar>(out.data(), {out.extent(1), out.extent(2)},
                                       {out.stride(1), out.stride(2)});
    auto a = seq_args(first_sequence, first, nullptr, true, scale_value(scale));
    a.batch = out.extent(0);
    a.batch_stride = out.stride(0);
    return a;
  }
  void rows(const seq_view<Scalar>& out, Index first, const Index* positions, bool accumulate,
            Scalar scale, unsigned long long* bad, cudaStream_t stream) const {
    auto a = seq_args(out, first, positions, accumulate, scale);
    a.bad_position = bad;
    kernels::learned_rows(backend::cuda{}, a, stream);
  }

  kernels::learned_backward_args<Scalar> backward_args(const Scalar* grad_output) {
    kernels::learned_backward_args<Scalar> a;
    a.grad = grad_.data();
    a.max_len = max_len_;
    a.dim = dim_;
    a.grad_output = grad_output;
    return a;
  }
  void scatter(const seq_view<const Scalar>& g, const Index* positions, backward_mode mode,
               cudaStream_t stream) {
    kernels::learned_backward_args<Scalar> a = backward_args(g.data());
    a.rows = g.extent(0);
    a.row_stride = g.stride(0);
    a.col_stride = g.stride(1);
    a.positions = positions;
    if (mode == backward_mode::deterministic)
      kernels::learned_backward_sorted(backend::cuda{}, a, workspace_, stream);
    else
      kernels::learned_backward(backend::cuda{}, a, stream);
  }

  // every device position in [0, max_len) before an in-place update, else posenc::error
  void precheck(const char* where, const Index* positions, Index count, cudaStream_t stream) const {
    flag_.arm(stream);
    kernels::find_bad_indices(backend::cuda{}, positions, count, 0, max_len_ - 1, flag_.device(),
                              stream);
    throw_bad_position(where, positions, stream);
  }
  void throw_bad_position(const char* where, const Index* positions, cudaStream_t stream) const {
    const Index bad = flag_.first_bad(stream);
    if (bad < 0) return;
    Index value = 0;
    copy_to_host(&value, positions + bad, 1, stream);
    posenc::detail::fail(where, "positions[" + std::to_string(bad) + "]", value,
                         "must be in [0, max_len) with max_len = " + std::to_string(max_len_));
  }

  // the CPU class's checks and messages
  void check_width(const char* where, Index cols) const {
    posenc::detail::require(cols == dim_, where, "cols", cols,
                            "must equal the table's dim (" + std::to_string(dim_) + ")");
  }
  static void check_rows(const char* where, Index rows, Index positions) {
    posenc::detail::require(
        rows == positions, where, "rows", rows,
        "must equal the number of positions (" + std::to_string(positions) + ")");
  }
  void check_positions(const char* where, const std::vector<Index>& positions) const {
    for (std::size_t r = 0; r < positions.size(); ++r)
      posenc::detail::require(positions[r] >= 0 && positions[r] < max_len_, where,
                              "positions[" + std::to_string(r) + "]", positions[r],
                              "must be in [0, max_len) with max_len = " + std::to_string(max_len_));
  }
  void check_range(const char* where, Index len, Index offset) const {
    posenc::detail::require(len >= 0, where, "len", len, "must be >= 0");
    posenc::detail::require(offset >= 0 && offset <= max_len_, where, "offset", offset,
                            "must be in [0, max_len] with max_len = " + std::to_string(max_len_));
    posenc::detail::require(len <= max_len_ - offset, where, "offset + len", offset + len,
                            "must be <= max_len = " + std::to_string(max_len_) +
                                " (positions past the table; no clamping)");
  }
  // device-only checks
  static void check_device_positions(const char* where, const Index* positions, Index count) {
    posenc::detail::require(count >= 0, where, "count", count, "must be >= 0");
    posenc::detail::require(positions != nullptr || count == 0, where, "positions", "nullptr",
                            "must point to `count` device positions");
  }
  void check_out(const char* where, const seq_view<Scalar>& out, Index n) const {
    posenc::detail::require(out.extent(1) == dim_, where, "out.cols", out.extent(1),
                            "must equal the table's dim (" + std::to_string(dim_) + ")");
    posenc::detail::require(out.extent(0) == n, where, "out.rows", out.extent(0),
                            "must equal the number of positions (" + std::to_string(n) + ")");
    check_no_weights(where, out);
  }
  template <int Rank>
  void check_no_weights(const char* where, const strided_view<Scalar, Rank>& out) const {
    posenc::detail::check_no_overlap(where, "out", out, "the table's weights", weights_view());
  }
  template <int Rank>
  void check_no_gradient(const char* where, const strided_view<const Scalar, Rank>& in) const {
    posenc::detail::check_no_overlap(where, "the table's gradient", gradient_view(), "grad_output",
                                     in);
  }
  seq_view<const Scalar> weights_view() const {
    return seq_view<const Scalar>::contiguous(weights_.data(), {max_len_, dim_});
  }
  seq_view<const Scalar> gradient_view() const {
    return seq_view<const Scalar>::contiguous(grad_.data(), {max_len_, dim_});
  }

  Index max_len_ = 0;
  Index dim_ = 0;
  device_buffer<Scalar> weights_;
  device_buffer<Scalar> grad_;
  kernels::scatter_workspace workspace_;  // the deterministic backward's scratch
  mutable device_buffer<Index> staged_;   // host positions, copied for the kernel
  mutable error_flag flag_;               // bad device positions
};

namespace detail {

/// T itself, in a context that does not deduce it (so a view of T converts to a view of
/// const T where the other arguments fix T).
template <class T>
struct non_deduced {
  using type = T;
};
template <class T>
using non_deduced_t = typename non_deduced<T>::type;

/// A [seq, d] view as the batch [1, seq, d].
template <class T>
batch_view<T> seq_as_batch(const seq_view<T>& v) {
  return batch_view<T>(v.data(), {1, v.extent(0), v.extent(1)}, {0, v.stride(0), v.stride(1)});
}

/// cuda::embed's access to the encodings' kernel arguments and error flags.
struct absolute_access {
  template <class Scalar>
  static error_flag& flag(const sinusoidal<Scalar, backend::cuda>& e) {
    return e.flag_;
  }
  template <class Scalar>
  static error_flag& flag(const learned_table<Scalar>& e) {
    return e.flag_;
  }

  // the positions offset .. offset + seq - 1 exist; out shares no memory with the table
  template <class Scalar>
  static void check(const sinusoidal<Scalar, backend::cuda>&, const batch_view<Scalar>& out,
                    Index offset) {
    posenc::detail::sinusoidal_check_range("cuda::embed", out.extent(1), offset);
  }
  template <class Scalar>
  static void check(const learned_table<Scalar>& e, const batch_view<Scalar>& out, Index offset) {
    e.check_range("cuda::embed", out.extent(1), offset);
    e.check_no_weights("cuda::embed", out);
  }

  // out(b, r, :) = s * tokens(ids[b * seq + r], :) + PE(offset + r)
  template <class Scalar>
  static void launch(const sinusoidal<Scalar, backend::cuda>& e, const batch_view<Scalar>& out,
                     Index offset, Scalar scale, const kernels::absolute::row_source<Scalar>& src,
                     cudaStream_t stream) {
    auto a = e.batch_args(out, offset, true, scale);
    a.source = src;
    kernels::sinusoidal_rows(backend::cuda{}, a, stream);
  }
  template <class Scalar>
  static void launch(const learned_table<Scalar>& e, const batch_view<Scalar>& out, Index offset,
                     Scalar scale, const kernels::absolute::row_source<Scalar>& src,
                     cudaStream_t stream) {
    auto a = e.batch_args(out, offset, embedding_scale::none);
    a.scale = scale;
    a.source = src;
    kernels::learned_rows(backend::cuda{}, a, stream);
  }
};

template <class Scalar, class Positions>
void embed(const seq_view<const Scalar>& tokens, const Index* token_ids, embedding_scale scale,
           const Positions& positions, const batch_view<Scalar>& out, Index offset,
           cudaStream_t stream) {
  const char* where = "cuda::embed";
  const Index d = positions.dim(), n = out.extent(0) * out.extent(1);
  posenc::detail::require(tokens.extent(1) == d, where, "tokens.cols", tokens.extent(1),
                          "must equal the encoding's dim (" + std::to_string(d) + ")");
  posenc::detail::require(out.extent(2) == d, where, "out.cols", out.extent(2),
                          "must equal the encoding's dim (" + std::to_string(d) + ")");
  posenc::detail::require(token_ids != nullptr || n == 0, where, "token_ids", "nullptr",
                          "must point to one device token id per output row");
  posenc::detail::check_no_overlap(where, "out", out, "tokens", tokens);
  absolute_access::check(positions, out, offset);
  if (n == 0) return;
  error_flag& flag = absolute_access::flag(positions);
  flag.arm(stream);
  kernels::absolute::row_source<Scalar> src;
  src.data = tokens.data();
  src.row_stride = tokens.stride(0);
  src.col_stride = tokens.stride(1);
  src.count = tokens.extent(0);
  src.ids = token_ids;
  src.bad = flag.device();
  absolute_access::launch(positions, out, offset,
                          posenc::detail::sinusoidal_scale<Scalar>(scale, d), src, stream);
  const Index bad = flag.first_bad(stream);
  if (bad < 0) return;
  Index value = 0;
  copy_to_host(&value, token_ids + bad, 1, stream);
  posenc::detail::fail(where, "token_ids[" + std::to_string(bad) + "]", value,
                       "must be in [0, vocab) with vocab = " + std::to_string(tokens.extent(0)));
}

}  // namespace detail

/// The embedding layer on the device: out(r, :) = s * tokens(token_ids[r], :) + PE(offset +
/// r), one fused pass, for a device [vocab, d] token table (any strides), `out.rows()`
/// device token ids, s = 1 or sqrt(d), and positions from a device sinusoidal encoding.
/// The same bits as the CPU's `E = tokens(ids, :); pe.add_to(E, offset, scale)` with the
/// device's PE values. Waits for the stream; a token id outside [0, vocab) is a
/// posenc::error naming the first one (`posenc::cuda::embed: token_ids[5] = 50000: must be
/// in [0, vocab) with vocab = 32000`) and its row of `out` is left as it was.
template <class Scalar>
void embed(const seq_view<const detail::non_deduced_t<Scalar>>& tokens, const Index* token_ids,
           embedding_scale scale, const sinusoidal<Scalar, backend::cuda>& positions,
           const seq_view<Scalar>& out, Index offset = 0, cudaStream_t stream = nullptr) {
  detail::embed(tokens, token_ids, scale, positions, detail::seq_as_batch(out), offset, stream);
}
/// embed() with positions from a device learned table: PE(p) = W(p, :).
template <class Scalar>
void embed(const seq_view<const detail::non_deduced_t<Scalar>>& tokens, const Index* token_ids,
           embedding_scale scale, const learned_table<Scalar>& positions,
           const seq_view<Scalar>& out, Index offset = 0, cudaStream_t stream = nullptr) {
  detail::embed(tokens, token_ids, scale, positions, detail::seq_as_batch(out), offset, stream);
}
/// embed() of a [batch, seq, d] output from batch * seq token ids (sequence-major): every
/// sequence gets positions offset .. offset + seq - 1.
template <class Scalar>
void embed(const seq_view<const detail::non_deduced_t<Scalar>>& tokens, const Index* token_ids,
           embedding_scale scale, const sinusoidal<Scalar, backend::cuda>& positions,
           const batch_view<Scalar>& out, Index offset = 0, cudaStream_t stream = nullptr) {
  detail::embed(tokens, token_ids, scale, positions, out, offset, stream);
}
/// embed() of a [batch, seq, d] output with positions from a device learned table.
template <class Scalar>
void embed(const seq_view<const detail::non_deduced_t<Scalar>>& tokens, const Index* token_ids,
           embedding_scale scale, const learned_table<Scalar>& positions,
           const batch_view<Scalar>& out, Index offset = 0, cudaStream_t stream = nullptr) {
  detail::embed(tokens, token_ids, scale, positions, out, offset, stream);
}

}  // namespace cuda
}  // namespace posenc
