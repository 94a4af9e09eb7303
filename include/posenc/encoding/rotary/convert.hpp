#pragma once
/// \file
/// Converting checkpoints between the two RoPE pairings.
///
/// The pairing is a property of a checkpoint's Q/K projection weights: a model trained with
/// half pairing (Hugging Face LLaMA) and one with interleaved pairing (Meta's original LLaMA
/// code, GPT-J) differ by a fixed permutation P of the output rows of W_q and W_k within
/// each head. With the per-head dim permutation (rotary part only; the tail stays)
///
///     interleaved dim 2i     <->  half dim i
///     interleaved dim 2i + 1 <->  half dim i + r/2          (i < r/2)
///
/// R_interleaved(theta) P x = P R_half(theta) x for every x, so q.k after the rotation is
/// unchanged when both W_q and W_k (and their biases) are permuted: rotate the converted
/// weights with the other pairing and attention is identical.
///
///     head rows (half):        [a0 a1 a2 a3 | b0 b1 b2 b3 | tail]
///     head rows (interleaved): [a0 b0 a1 b1 a2 b2 a3 b3   | tail]

#include <Eigen/Core>
#include <cstddef>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/view.hpp"
#include "frequencies.hpp"

namespace posenc {

/// The per-head dim permutation taking a `from`-paired vector to the `to` pairing:
/// out[j] = in[perm[j]] for j < head_dim. Identity when from == to and past the rotary dim.
/// rotary_dim -1 = head_dim. Throws posenc::error naming `head_dim` or `rotary_dim`.
inline std::vector<Index> rope_dim_permutation(Index head_dim, rope_pairing from, rope_pairing to,
                                               Index rotary_dim = -1) {
  const char* where = "rope_dim_permutation";
  detail::require(head_dim > 0, where, "head_dim", head_dim, "must be > 0");
  const Index r = rotary_dim == -1 ? head_dim : rotary_dim;  // only -1 means head_dim
  detail::require(r > 0 && r % 2 == 0, where, "rotary_dim", r, "must be even and > 0");
  detail::require(r <= head_dim, where, "rotary_dim", r,
                  "must be <= head_dim = " + std::to_string(head_dim));
  std::vector<Index> perm(static_cast<std::size_t>(head_dim));
  for (Index j = 0; j < head_dim; ++j) perm[static_cast<std::size_t>(j)] = j;
  if (from == to) return perm;
  const Index half = r / 2;
  for (Index i = 0; i < half; ++i) {
    if (to == rope_pairing::interleaved) {  // half -> interleaved
      perm[static_cast<std::size_t>(2 * i)] = i;
      perm[static_cast<std::size_t>(2 * i + 1)] = i + half;
    } else {  // interleaved -> half
      perm[static_cast<std::size_t>(i)] = 2 * i;
      perm[static_cast<std::size_t>(i + half)] = 2 * i + 1;
    }
  }
  return perm;
}

/// Permutes the rows of a Q or K projection weight [heads * head_dim, in_features] (PyTorch
/// nn.Linear layout: output features are rows), or of its bias [heads * head_dim, 1], head
/// by head, from the `from` pairing to `to`. For K under GQA pass the number of KV heads.
/// Returns a new row-major matrix. Throws posenc::error naming `heads` or `rotary_dim`.
template <class Derived>
row_matrix<typename Derived::Scalar> rope_convert_weight(const Eigen::MatrixBase<Derived>& weight,
                                                         Index heads, rope_pairing from,
                                                         rope_pairing to, Index rotary_dim = -1) {
  const char* where = "rope_convert_weight";
  detail::require(heads > 0, where, "heads", heads, "must be > 0");
  detail::require(weight.rows() % heads == 0 && weight.rows() > 0, where, "weight.rows()",
                  weight.rows(), "must be a positive multiple of heads = " + std::to_string(heads));
  const Index head_dim = weight.rows() / heads;
  const std::vector<Index> perm = rope_dim_permutation(head_dim, from, to, rotary_dim);
  row_matrix<typename Derived::Scalar> out(weight.rows(), weight.cols());
  for (Index h = 0; h < heads; ++h)
    for (Index j = 0; j < head_dim; ++j)
      out.row(h * head_dim + j) = weight.row(h * head_dim + perm[static_cast<std::size_t>(j)]);
  return out;
}

}  // namespace posenc
