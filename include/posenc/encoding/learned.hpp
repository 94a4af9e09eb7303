#pragma once
/// \file
/// Learned absolute positional embeddings (a trainable [max_len, d] table, as in GPT-2's
/// `wpe` and BERT's `position_embeddings`; Gehring et al., "Convolutional Sequence to
/// Sequence Learning", 2017, introduced them): lookup, adding to token embeddings, the
/// backward pass (scatter-add), an SGD step, files, and resizing to a longer context.
///
///     forward   out(r, :)     = s * E(r, :) + W(pos_r, :)         s = 1 or sqrt(d)
///     backward  dL/dW(p, :)  += sum over r with pos_r = p of dL/dout(r, :)
///     SGD       W            -= lr * dL/dW
///
/// Positions are row indices of W: 0 <= p < max_len; anything else is a posenc::error
/// naming the position and max_len, never a clamp.

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/random.hpp"
#include "../core/view.hpp"
#include "../io/npy.hpp"
#include "../io/safetensors.hpp"
#include "detail/arguments.hpp"
#include "detail/rows.hpp"
#include "sinusoidal.hpp"

namespace posenc {

/// A trainable table of absolute position embeddings, [max_len, d] row-major, with its
/// gradient buffer. Scalar is float or double.
template <class Scalar>
class learned_table {
  static_assert(std::is_floating_point_v<Scalar>,
                "posenc::learned_table: Scalar must be floating point");

 public:
  using scalar_type = Scalar;  ///< element type of the table
  /// A [rows, d] row-major matrix.
  using matrix = row_matrix<Scalar>;

  /// The usual initial standard deviation (GPT-2, BERT: 0.02).
  static constexpr double default_stddev = 0.02;

  /// The most elements (max_len * dim) a table made here may have:
  /// posenc::limits::max_elements = 2^31 (8 GiB of float32, twice that with the gradient).
  /// Larger sizes are refused with posenc::error before anything is allocated, instead of
  /// overflowing the size or asking the allocator for an absurd amount (a size within it
  /// that the machine cannot hold is still std::bad_alloc).
  static constexpr Index max_elements = limits::max_elements;

  /// A [max_len, dim] table drawn from N(0, stddev^2) with posenc::random_generator(seed):
  /// element (r, c) is stddev * z_k rounded to Scalar, where z_k is the generator's
  /// k-th normal() and k = r * dim + c. The same seed gives the same table on every
  /// platform. Throws posenc::error for max_len < 1, dim < 1, max_len * dim >
  /// max_elements, or a negative or non-finite stddev.
  learned_table(Index max_len, Index dim, std::uint64_t seed, double stddev = default_stddev) {
    check_shape("learned_table", max_len, dim);
    detail::require(std::isfinite(stddev) && stddev >= 0, "learned_table", "stddev", stddev,
                    "must be finite and >= 0");
    weights_.resize(max_len, dim);
    random_generator gen(seed);
    Scalar* w = weights_.data();
    for (Index k = 0; k < max_len * dim; ++k) w[k] = static_cast<Scalar>(stddev * gen.normal());
    grad_ = matrix::Zero(max_len, dim);
  }

  /// A table holding the given [max_len, d] values (user data, a checkpoint, a
  /// sinusoidal table to fine-tune). Throws posenc::error for an empty matrix or a
  /// non-finite value.
  template <class Derived>
  explicit learned_table(const Eigen::MatrixBase<Derived>& weights)
      : weights_(weights.template cast<Scalar>()) {
    check_shape("learned_table", weights_.rows(), weights_.cols());
    for (Index k = 0; k < weights_.size(); ++k)
      detail::require(std::isfinite(weights_.data()[k]), "learned_table",
                      "weights[" + std::to_string(k / weights_.cols()) + ", " +
                          std::to_string(k % weights_.cols()) + "]",
                      weights_.data()[k], "must be finite");
    grad_ = matrix::Zero(weights_.rows(), weights_.cols());
  }

  /// Reads a [max_len, d] `.npy` (float32 or float64; see io/npy.hpp for the errors).
  static learned_table load_npy(const std::string& path) {
    const auto m = io::read_npy_matrix<Scalar>(path);
    return learned_table(m);
  }

  /// Reads the rank-2 tensor `name` of a `.safetensors` checkpoint, e.g.
  /// "transformer.wpe.weight" (GPT-2) or "bert.embeddings.position_embeddings.weight"
  /// (BERT); F32/F64/F16/BF16 convert to Scalar (see io/safetensors.hpp for the errors).
  static learned_table load_safetensors(const std::string& path, const std::string& name) {
    const auto m = io::read_safetensors_matrix<Scalar>(path, name);
    return learned_table(m);
  }

  /// Writes the table as a [max_len, d] `.npy` (float32 for float, float64 for double).
  void save_npy(const std::string& path) const { io::write_npy(path, weights_); }

  /// Number of positions, the table's rows.
  Index max_len() const noexcept { return weights_.rows(); }
  /// d, the width of every row.
  Index dim() const noexcept { return weights_.cols(); }
  /// The [max_len, d] table W.
  const matrix& weights() const noexcept { return weights_; }
  /// W, writable in place (its shape is fixed).
  Eigen::Map<matrix> mutable_weights() noexcept {
    return Eigen::Map<matrix>(weights_.data(), weights_.rows(), weights_.cols());
  }
  /// dL/dW accumulated by backward() since the last zero_grad(), [max_len, d].
  const matrix& gradient() const noexcept { return grad_; }
  /// Sets dL/dW to zero.
  void zero_grad() noexcept { grad_.setZero(); }

  /// Rows W(positions[r], :): [n, d] (the verb of every encoding: sinusoidal::at too).
  matrix at(const std::vector<Index>& positions) const {
    check_positions("learned_table::at", positions);
    matrix out(static_cast<Index>(positions.size()), dim());
    for (Index r = 0; r < out.rows(); ++r) out.row(r) = weights_.row(pos_at(positions, r));
    return out;
  }
  /// Rows W(positions(r), :) for an integer Eigen vector of positions: [n, d].
  template <class Derived>
  matrix at(const Eigen::DenseBase<Derived>& positions) const {
    return at(to_positions(positions));
  }
  /// The former name of at().
  [[deprecated("use learned_table::at")]] matrix lookup(const std::vector<Index>& positions) const {
    return at(positions);
  }
  template <class Derived>
  [[deprecated("use learned_table::at")]] matrix lookup(
      const Eigen::DenseBase<Derived>& positions) const {
    return at(positions);
  }

  /// Rows offset .. offset + len - 1 of W: [len, d].
  matrix table(Index len, Index offset = 0) const {
    check_range("learned_table::table", len, offset);
    return weights_.middleRows(offset, len);
  }

  /// E(r, :) = s * E(r, :) + W(offset + r, :) for an [seq, d] Eigen lvalue (row- or
  /// column-major, blocks fine). The `const&` is cast away, as Eigen documents for
  /// output arguments.
  template <class Derived>
  void add_to(const Eigen::MatrixBase<Derived>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none) const {
    add_to(checked_view(embeddings, "learned_table::add_to"), offset, scale);
  }
  /// E(r, :) = s * E(r, :) + W(offset + r, :) for a caller-owned [seq, d] buffer.
  void add_to(const seq_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none) const {
    check_width("learned_table::add_to", embeddings.extent(1));
    check_range("learned_table::add_to", embeddings.extent(0), offset);
    const Scalar s = scale_value(scale);
    for (Index r = 0; r < embeddings.extent(0); ++r)
      add_row(embeddings.vector_ptr(r), embeddings.stride(1), offset + r, s);
  }
  /// Every sequence of a caller-owned [batch, seq, d] buffer gets W(offset + t, :) added.
  void add_to(const batch_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none) const {
    check_width("learned_table::add_to", embeddings.extent(2));
    check_range("learned_table::add_to", embeddings.extent(1), offset);
    const Scalar s = scale_value(scale);
    for (Index b = 0; b < embeddings.extent(0); ++b)
      for (Index t = 0; t < embeddings.extent(1); ++t)
        add_row(embeddings.vector_ptr(b, t), embeddings.stride(2), offset + t, s);
  }
  /// E(r, :) = s * E(r, :) + W(positions[r], :) for arbitrary positions (packed
  /// sequences, left padding): E is [positions.size(), d].
  template <class Derived>
  void add_at(const Eigen::MatrixBase<Derived>& embeddings, const std::vector<Index>& positions,
              embedding_scale scale = embedding_scale::none) const {
    const auto v = checked_view(embeddings, "learned_table::add_at");
    check_rows("learned_table::add_at", v.extent(0), positions);
    check_positions("learned_table::add_at", positions);
    const Scalar s = scale_value(scale);
    for (Index r = 0; r < v.extent(0); ++r)
      add_row(v.vector_ptr(r), v.stride(1), pos_at(positions, r), s);
  }

  /// Accumulates dL/dW from dL/d(output) ([n, d]) of a lookup/add at `positions`:
  /// gradient(positions[r], :) += grad_output(r, :); repeated positions add up.
  template <class Derived>
  void backward(const Eigen::MatrixBase<Derived>& grad_output,
                const std::vector<Index>& positions) {
    check_width("learned_table::backward", grad_output.cols());
    check_rows("learned_table::backward", grad_output.rows(), positions);
    check_positions("learned_table::backward", positions);
    for (Index r = 0; r < grad_output.rows(); ++r)
      grad_.row(pos_at(positions, r)) += grad_output.row(r).template cast<Scalar>();
  }
  /// Accumulates dL/dW for an add_to(E, offset) of an [seq, d] E:
  /// gradient(offset + r, :) += grad_output(r, :).
  template <class Derived>
  void backward(const Eigen::MatrixBase<Derived>& grad_output, Index offset = 0) {
    check_width("learned_table::backward", grad_output.cols());
    check_range("learned_table::backward", grad_output.rows(), offset);
    grad_.middleRows(offset, grad_output.rows()) += grad_output.template cast<Scalar>();
  }
  /// Accumulates dL/dW for an add_to of a [batch, seq, d] buffer at `offset`: the
  /// batch's gradients at each position add up.
  void backward(const batch_view<const Scalar>& grad_output, Index offset = 0) {
    check_width("learned_table::backward", grad_output.extent(2));
    check_range("learned_table::backward", grad_output.extent(1), offset);
    for (Index b = 0; b < grad_output.extent(0); ++b)
      for (Index t = 0; t < grad_output.extent(1); ++t)
        grad_.row(offset + t) += grad_output.vector(b, t);
  }

  /// Plain SGD: W -= learning_rate * dL/dW. The gradient is kept (call zero_grad()).
  /// Throws posenc::error for a negative or non-finite learning rate.
  void sgd_step(double learning_rate) {
    detail::require(std::isfinite(learning_rate) && learning_rate >= 0, "learned_table::sgd_step",
                    "learning_rate", learning_rate, "must be finite and >= 0");
    weights_ -= static_cast<Scalar>(learning_rate) * grad_;
  }

  /// The table resized to `new_len` rows by linear interpolation along positions, with
  /// the endpoints aligned (align_corners): new row j samples old position
  /// x_j = j (max_len - 1) / (new_len - 1), so the first and last rows are kept exactly
  /// and rows in between mix the two nearest old rows, (1 - t) W(floor x) + t W(floor x + 1)
  /// computed in double. new_len = 1 keeps row 0; a one-row table repeats its row.
  /// Works for shrinking too. Throws posenc::error for new_len < 1 or new_len * dim >
  /// max_elements.
  learned_table interpolated(Index new_len) const {
    detail::require(new_len >= 1, "learned_table::interpolated", "new_len", new_len,
                    "must be >= 1");
    check_size("learned_table::interpolated", "new_len", new_len, dim());
    const Index old_len = max_len();
    matrix out(new_len, dim());
    // x_j = j (L - 1) / (N - 1) split exactly into integer part lo and remainder rem,
    // stepped by (L - 1) / (N - 1) per row: j (L - 1) itself may overflow an Index
    const Index den = new_len > 1 ? new_len - 1 : 1;
    const Index step_lo = (old_len - 1) / den, step_rem = (old_len - 1) % den;
    Index lo = 0, rem = 0;
    for (Index j = 0; j < new_len; ++j) {
      if (j > 0) {
        lo += step_lo;
        rem += step_rem;  // both < den: no overflow
        if (rem >= den) {
          rem -= den;
          ++lo;
        }
      }
      if (new_len == 1 || old_len == 1) {
        out.row(j) = weights_.row(0);
        continue;
      }
      if (rem == 0) {
        out.row(j) = weights_.row(lo);  // on an old row: copied bit for bit
        continue;
      }
      const double t = static_cast<double>(rem) / static_cast<double>(den);
      out.row(j) = ((1.0 - t) * weights_.row(lo).template cast<double>() +
                    t * weights_.row(lo + 1).template cast<double>())
                       .template cast<Scalar>();
    }
    return learned_table(out);
  }

 private:
  static Index pos_at(const std::vector<Index>& positions, Index r) noexcept {
    return positions[static_cast<std::size_t>(r)];
  }

  void add_row(Scalar* y, Index stride, Index pos, Scalar s) const noexcept {
    detail::scale_add_row(y, stride, weights_.data() + pos * dim(), dim(), s);
  }

  Scalar scale_value(embedding_scale scale) const noexcept {
    return scale == embedding_scale::sqrt_dim
               ? static_cast<Scalar>(std::sqrt(static_cast<double>(dim())))
               : Scalar(1);
  }

  static void check_shape(const char* where, Index max_len, Index dim) {
    detail::require(max_len >= 1, where, "max_len", max_len, "must be >= 1");
    detail::require(dim >= 1, where, "dim", dim, "must be >= 1");
    check_size(where, "max_len", max_len, dim);
  }

  /// rows * dim <= max_elements, checked without forming the product.
  static void check_size(const char* where, const char* rows_name, Index rows, Index dim) {
    detail::require(dim <= max_elements, where, "dim", dim,
                    "must be <= 2^31 (learned_table::max_elements)");
    detail::require(rows <= max_elements / dim, where, rows_name, rows,
                    "must be <= " + std::to_string(max_elements / dim) +
                        " for dim = " + std::to_string(dim) + " (at most 2^31 elements)");
  }

  void check_width(const char* where, Index cols) const {
    detail::require(cols == dim(), where, "cols", cols,
                    "must equal the table's dim (" + std::to_string(dim()) + ")");
  }

  static void check_rows(const char* where, Index rows, const std::vector<Index>& positions) {
    detail::require(
        rows == static_cast<Index>(positions.size()), where, "rows", rows,
        "must equal the number of positions (" + std::to_string(positions.size()) + ")");
  }

  void check_positions(const char* where, const std::vector<Index>& positions) const {
    for (std::size_t r = 0; r < positions.size(); ++r)
      detail::require(positions[r] >= 0 && positions[r] < max_len(), where,
                      "positions[" + std::to_string(r) + "]", positions[r],
                      "must be in [0, max_len) with max_len = " + std::to_string(max_len()));
  }

  void check_range(const char* where, Index len, Index offset) const {
    detail::require(len >= 0, where, "len", len, "must be >= 0");
    detail::require(offset >= 0 && offset <= max_len(), where, "offset", offset,
                    "must be in [0, max_len] with max_len = " + std::to_string(max_len()));
    detail::require(len <= max_len() - offset, where, "offset + len", offset + len,
                    "must be <= max_len = " + std::to_string(max_len()) +
                        " (positions past the table; no clamping)");
  }

  template <class Derived>
  static std::vector<Index> to_positions(const Eigen::DenseBase<Derived>& p) {
    return detail::positions_from(p, "learned_table::at");
  }

  template <class Derived>
  seq_view<Scalar> checked_view(const Eigen::MatrixBase<Derived>& m, const char* where) const {
    static_assert(std::is_same_v<typename Derived::Scalar, Scalar>,
                  "posenc::learned_table: the matrix's scalar type must be the table's");
    const auto v = writable_view(m);
    check_width(where, v.extent(1));
    return v;
  }

  matrix weights_;
  matrix grad_;
};

}  // namespace posenc
