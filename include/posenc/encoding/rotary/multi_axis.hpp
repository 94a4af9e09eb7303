#pragma once
/// \file
/// Multi-axis rotary embeddings: each rotation pair follows one of several position axes.
///
/// Pair i of a token turns by p[axis(i)] * inv_freq[i], where p holds the token's position on
/// every axis. Two layouts in use are provided as factories:
///
/// - M-RoPE (Wang et al. 2024, "Qwen2-VL"): the r/2 frequencies base^(-2i/r) split into
///   consecutive sections driven by temporal, height and width position ids
///   (Qwen2-VL: base 1e6, mrope_section [16, 24, 24] pairs for head dim 128). With half
///   pairing, section s covers the same pairs in both halves:
///
///         [ t t t t | h h h h h h | w w w w w w ][ t t t t | h h ... | w w ... ]
///
///   Text tokens carry the same id on all three axes, which makes M-RoPE exactly 1D RoPE.
/// - 2D axial RoPE for image patches (Heo et al. 2024, "Rotary Position Embedding for Vision
///   Transformer", RoPE-Axial): the first r/4 pairs follow the patch row, the last r/4 the
///   column, both with frequencies base^(-2j/(r/2)), j < r/4.
///
/// Positions are an [axes, N] matrix: column l holds token l's position on each axis
/// (N = L shared by the batch, or B*L batch-major). The rotation itself is the same kernel
/// as 1D RoPE (backend/rotary.hpp), and so are the cos/sin of each pair (math::rope_cos_sin:
/// the angle in double, cos and sin rounded once).

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../backend/rotary.hpp"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/types.hpp"
#include "../../core/view.hpp"
#include "../../math/rotation.hpp"
#include "frequencies.hpp"

namespace posenc {

/// Per-token positions on each axis: [axes, tokens], row-major.
using rope_axis_positions = row_matrix<Index>;

/// Rotary embedding whose pairs follow different position axes (see the file comment).
template <class Scalar, class Backend = default_backend>
class multi_axis_rotary {
  static_assert(std::is_floating_point<Scalar>::value,
                "posenc::multi_axis_rotary: Scalar must be a floating-point type");
  // the CUDA specialisation lives in encoding/cuda/rotary.cuh, for nvcc translation units
  static_assert(!std::is_same_v<Backend, backend::cuda>,
                "posenc::multi_axis_rotary<Scalar, backend::cuda>: include <posenc/cuda.cuh> in "
                "a translation unit compiled by nvcc");

 public:
  /// head_dim D; inv_freq and axis_of_pair hold r/2 values (r <= D); axis_of_pair[i] in
  /// [0, axes). Throws posenc::error naming the parameter.
  multi_axis_rotary(Index head_dim, std::vector<double> inv_freq, std::vector<Index> axis_of_pair,
                    Index axes, rope_pairing pairing = rope_pairing::half,
                    double attention_factor = 1.0)
      : head_dim_(head_dim),
        axes_(axes),
        pairing_(pairing),
        attention_factor_(attention_factor),
        inv_freq_(std::move(inv_freq)),
        axis_of_pair_(std::move(axis_of_pair)) {
    const char* where = "multi_axis_rotary";
    detail::require(head_dim > 0, where, "head_dim", head_dim, "must be > 0");
    detail::require(axes > 0, where, "axes", axes, "must be > 0");
    detail::require(!inv_freq_.empty(), where, "inv_freq.size()", inv_freq_.size(),
                    "needs at least one frequency");
    detail::require(static_cast<Index>(2 * inv_freq_.size()) <= head_dim, where, "rotary_dim",
                    2 * inv_freq_.size(), "must be <= head_dim = " + std::to_string(head_dim));
    detail::require(axis_of_pair_.size() == inv_freq_.size(), where, "axis_of_pair.size()",
                    axis_of_pair_.size(),
                    "must equal inv_freq.size() = " + std::to_string(inv_freq_.size()));
    for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
      if (!std::isfinite(inv_freq_[i]))
        detail::fail(where, "inv_freq[" + std::to_string(i) + "]", inv_freq_[i], "must be finite");
      if (axis_of_pair_[i] < 0 || axis_of_pair_[i] >= axes)
        detail::fail(where, "axis_of_pair[" + std::to_string(i) + "]", axis_of_pair_[i],
                     "must be in [0, axes = " + std::to_string(axes) + ")");
    }
    detail::require(std::isfinite(attention_factor), where, "attention_factor", attention_factor,
                    "must be finite");
  }

  Index head_dim() const noexcept { return head_dim_; }
  Index rotary_dim() const noexcept { return static_cast<Index>(2 * inv_freq_.size()); }
  Index axes() const noexcept { return axes_; }
  rope_pairing pairing() const noexcept { return pairing_; }
  double attention_factor() const noexcept { return attention_factor_; }
  const std::vector<double>& inv_freq() const noexcept { return inv_freq_; }
  const std::vector<Index>& axis_of_pair() const noexcept { return axis_of_pair_; }

  /// In place on one head x [L, D] (writable Eigen matrix/block/map), positions [axes, L].
  template <class Derived>
  void apply(const Eigen::MatrixBase<Derived>& x,
             const Eigen::Ref<const rope_axis_positions>& positions) {
    static_assert(std::is_same<typename Derived::Scalar, Scalar>::value,
                  "posenc::multi_axis_rotary: the matrix's Scalar must be the embedding's");
    const heads_view<Scalar> none;
    run(as_heads(writable_view(x)), none, positions);
  }
  /// In place on [L, H, D], positions [axes, L].
  void apply(const strided_view<Scalar, 3>& x,
             const Eigen::Ref<const rope_axis_positions>& positions) {
    const heads_view<Scalar> none;
    run(as_heads(x), none, positions);
  }
  /// In place on [B, L, H, D], positions [axes, L] or [axes, B*L].
  void apply(const heads_view<Scalar>& x, const Eigen::Ref<const rope_axis_positions>& positions) {
    const heads_view<Scalar> none;
    run(x, none, positions);
  }
  /// In place on q [B, L, Hq, D] and k [B, L, Hk, D] together.
  void apply_qk(const heads_view<Scalar>& q, const heads_view<Scalar>& k,
                const Eigen::Ref<const rope_axis_positions>& positions) {
    const char* where = "multi_axis_rotary::apply_qk";
    detail::require(k.extent(0) == q.extent(0), where, "k.batch", k.extent(0),
                    "must equal q.batch = " + std::to_string(q.extent(0)));
    detail::require(k.extent(1) == q.extent(1), where, "k.seq", k.extent(1),
                    "must equal q.seq = " + std::to_string(q.extent(1)));
    detail::check_no_overlap(where, "k", k, "q", q);
    run(q, k, positions);
  }

 private:
  void run(const heads_view<Scalar>& q, const heads_view<Scalar>& k,
           const Eigen::Ref<const rope_axis_positions>& positions) {
    const char* where = "multi_axis_rotary::apply";
    const bool has_k = k.data() != nullptr;
    const Index batch = q.extent(0), seq = q.extent(1);
    detail::require(q.extent(3) == head_dim_, where, "dim", q.extent(3),
                    "must equal head_dim = " + std::to_string(head_dim_));
    if (has_k)
      detail::require(k.extent(3) == head_dim_, where, "k.dim", k.extent(3),
                      "must equal head_dim = " + std::to_string(head_dim_));
    detail::require(positions.rows() == axes_, where, "positions.rows()", positions.rows(),
                    "must equal axes = " + std::to_string(axes_));
    const Index n = positions.cols();
    detail::require(n == seq || n == batch * seq, where, "positions.cols()", n,
                    "must equal seq = " + std::to_string(seq) +
                        " or batch * seq = " + std::to_string(batch * seq));
    for (Index a = 0; a < positions.rows(); ++a)
      for (Index l = 0; l < n; ++l)
        if (positions(a, l) < 0)
          detail::fail(where, "positions(" + std::to_string(a) + ", " + std::to_string(l) + ")",
                       positions(a, l), "must be >= 0");
    const Index heads = q.extent(2) + (has_k ? k.extent(2) : 0);
    if (batch == 0 || seq == 0 || heads == 0) return;

    const Index pairs = static_cast<Index>(inv_freq_.size());
    std::vector<Scalar> cs(static_cast<std::size_t>(2 * pairs));
    kernels::rope_token<Scalar> t;
    t.head_dim = head_dim_;
    t.rotary_dim = 2 * pairs;
    t.pair_step = pairing_ == rope_pairing::half ? 1 : 2;
    t.pair_offset = pairing_ == rope_pairing::half ? pairs : 1;
    t.cos = cs.data();
    t.sin = cs.data() + pairs;
    double values = 0;  // of Q and K
    for (const heads_view<Scalar>* v : {&q, &k})
      if (v->data() != nullptr)
        values += static_cast<double>(batch) * static_cast<double>(seq) *
                  static_cast<double>(v->extent(2)) * static_cast<double>(head_dim_);
    t.streaming = kernels::rope_streams<Scalar>(values);
    // batch, tokens: one cos/sin row per token, shared by every head of q and k
    for (Index b = 0; b < batch; ++b) {
      for (Index l = 0; l < seq; ++l) {
        const Index col = n == seq ? l : b * seq + l;
        for (Index i = 0; i < pairs; ++i) {
          const auto u = static_cast<std::size_t>(i);
          math::rope_cos_sin(math::angle(positions(axis_of_pair_[u], col), inv_freq_[u]),
                             attention_factor_, cs[u], cs[static_cast<std::size_t>(pairs + i)]);
        }
        for (const heads_view<Scalar>* v : {&q, &k}) {
          if (v->data() == nullptr) continue;
          t.out = v->data() + b * v->stride(0) + l * v->stride(1);
          t.in = t.out;
          t.in_head_stride = t.out_head_stride = v->stride(2);
          t.in_dim_stride = t.out_dim_stride = v->stride(3);
          t.heads = v->extent(2);
          kernels::rope_rotate(Backend{}, t);
        }
      }
    }
  }

  Index head_dim_;
  Index axes_;
  rope_pairing pairing_;
  double attention_factor_;
  std::vector<double> inv_freq_;
  std::vector<Index> axis_of_pair_;
};

/// Qwen2-VL M-RoPE: frequencies base^(-2i/r), r = 2 * sum(sections), split into consecutive
/// sections of pairs driven by axes 0, 1, 2, ... (temporal, height, width). Positions [3, N]
/// for three sections. Throws posenc::error naming `sections` or `base`.
template <class Scalar, class Backend = default_backend>
multi_axis_rotary<Scalar, Backend> mrope(Index head_dim, const std::vector<Index>& sections,
                                         double base = 1000000.0,
                                         rope_pairing pairing = rope_pairing::half) {
  const char* where = "mrope";
  detail::require(!sections.empty(), where, "sections.size()", sections.size(), "must be > 0");
  Index pairs = 0;
  for (std::size_t s = 0; s < sections.size(); ++s) {
    if (sections[s] < 0)
      detail::fail(where, "sections[" + std::to_string(s) + "]", sections[s], "must be >= 0");
    pairs += sections[s];
  }
  detail::require(pairs > 0, where, "sum(sections)", pairs, "must be > 0");
  detail::require(2 * pairs <= head_dim, where, "sum(sections)", pairs,
                  "2 * sum(sections) must be <= head_dim = " + std::to_string(head_dim));
  std::vector<Index> axis;
  for (std::size_t s = 0; s < sections.size(); ++s)
    axis.insert(axis.end(), static_cast<std::size_t>(sections[s]), static_cast<Index>(s));
  return multi_axis_rotary<Scalar, Backend>(
      head_dim, plain_rope_frequencies(2 * pairs, base).inv_freq, std::move(axis),
      static_cast<Index>(sections.size()), pairing);
}

/// 2D axial RoPE for image patches: rotary dim r (-1 = head_dim, a multiple of 4); the first
/// r/4 pairs follow axis 0 (row), the last r/4 axis 1 (column), each with frequencies
/// base^(-2j/(r/2)). Positions [2, N]: (row, column) of each patch.
template <class Scalar, class Backend = default_backend>
multi_axis_rotary<Scalar, Backend> axial_rope_2d(Index head_dim, double base = 10000.0,
                                                 Index rotary_dim = -1,
                                                 rope_pairing pairing = rope_pairing::half) {
  const char* where = "axial_rope_2d";
  detail::require(head_dim > 0, where, "head_dim", head_dim, "must be > 0");
  const Index r = rotary_dim == -1 ? head_dim : rotary_dim;  // only -1 means head_dim
  detail::require(r > 0 && r % 4 == 0, where, "rotary_dim", r, "must be a positive multiple of 4");
  detail::require(r <= head_dim, where, "rotary_dim", r,
                  "must be <= head_dim = " + std::to_string(head_dim));
  std::vector<double> per_axis = plain_rope_frequencies(r / 2, base).inv_freq;
  std::vector<double> inv(per_axis);
  inv.insert(inv.end(), per_axis.begin(), per_axis.end());
  std::vector<Index> axis(per_axis.size(), 0);
  axis.insert(axis.end(), per_axis.size(), 1);
  return multi_axis_rotary<Scalar, Backend>(head_dim, std::move(inv), std::move(axis), 2, pairing);
}

}  // namespace posenc
