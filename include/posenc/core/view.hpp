#pragma once
/// \file
/// Strided views over caller-owned memory: pointer + extents + strides, no ownership.
///
/// They let posenc work on buffers it does not own (a contiguous PyTorch tensor, an
/// inference engine's activation arena) without copies. Strides count elements, not bytes.
///
/// Logical axis orders, whatever the memory order:
///
///     rank 2   [seq, dim]                 one token per row
///     rank 3   [batch, seq, dim]   or     [seq, head, dim]
///     rank 4   [batch, seq, head, dim]    always this logical order; a buffer laid out
///                                         [batch, head, seq, dim] is viewed through
///                                         permuted strides (see view_bhsd)
///
/// Kernels index views only after the entry point validated shapes, so element access
/// is unchecked (an assert in debug builds).

#include <Eigen/Core>
#include <array>
#include <cassert>
#include <cstddef>
#include <type_traits>

#include "error.hpp"

namespace posenc {

using Index = Eigen::Index;

template <class T, int Rank>
class strided_view {
  static_assert(Rank >= 1 && Rank <= 4, "posenc::strided_view supports ranks 1 to 4");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using shape_type = std::array<Index, Rank>;
  static constexpr int rank = Rank;

  strided_view() noexcept : data_(nullptr), extents_{}, strides_{} {}

  /// A view with explicit strides (in elements). Throws posenc::error for a negative
  /// extent, or a null pointer over a non-empty extent.
  strided_view(T* data, const shape_type& extents, const shape_type& strides)
      : data_(data), extents_(extents), strides_(strides) {
    for (int a = 0; a < Rank; ++a)
      detail::require(extents[a] >= 0, "strided_view", axis_name(a), extents[a],
                      "extents must be >= 0");
    detail::require(data != nullptr || size() == 0, "strided_view", "data", "nullptr",
                    "a non-empty view needs memory");
  }

  /// A row-major (C order) contiguous view.
  static strided_view contiguous(T* data, const shape_type& extents) {
    shape_type strides{};
    Index s = 1;
    for (int a = Rank - 1; a >= 0; --a) {
      strides[a] = s;
      s *= extents[a];
    }
    return strided_view(data, extents, strides);
  }

  /// Views of const elements convert implicitly from views of mutable ones.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  strided_view(const strided_view<U, Rank>& other) noexcept
      : data_(other.data()), extents_(other.extents()), strides_(other.strides()) {}

  T* data() const noexcept { return data_; }
  const shape_type& extents() const noexcept { return extents_; }
  const shape_type& strides() const noexcept { return strides_; }
  Index extent(int axis) const noexcept { return extents_[static_cast<std::size_t>(axis)]; }
  Index stride(int axis) const noexcept { return strides_[static_cast<std::size_t>(axis)]; }
  Index size() const noexcept {
    Index n = 1;
    for (Index e : extents_) n *= e;
    return n;
  }
  bool empty() const noexcept { return size() == 0; }
  /// True when the last axis is contiguous (the vectorisable case).
  bool inner_contiguous() const noexcept { return strides_[Rank - 1] == 1; }

  /// Element access, unchecked (asserted in debug builds).
  template <class... I>
  T& operator()(I... idx) const noexcept {
    static_assert(sizeof...(I) == Rank, "posenc::strided_view: wrong number of indices");
    const Index ids[Rank] = {static_cast<Index>(idx)...};
    Index off = 0;
    for (int a = 0; a < Rank; ++a) {
      assert(ids[a] >= 0 && ids[a] < extents_[a]);
      off += ids[a] * strides_[a];
    }
    return data_[off];
  }

  /// Pointer to the first element of the innermost vector at the leading indices.
  template <class... I>
  T* vector_ptr(I... leading) const noexcept {
    static_assert(sizeof...(I) == Rank - 1, "posenc::strided_view: give all but the last index");
    const Index ids[Rank] = {static_cast<Index>(leading)..., 0};
    Index off = 0;
    for (int a = 0; a < Rank - 1; ++a) {
      assert(ids[a] >= 0 && ids[a] < extents_[a]);
      off += ids[a] * strides_[a];
    }
    return data_ + off;
  }

  /// The innermost vector at the leading indices, as an Eigen row-vector map.
  template <class... I>
  auto vector(I... leading) const noexcept {
    using Row = Eigen::Matrix<value_type, 1, Eigen::Dynamic>;
    using MapT = std::conditional_t<std::is_const_v<T>, const Row, Row>;
    return Eigen::Map<MapT, Eigen::Unaligned, Eigen::InnerStride<>>(
        vector_ptr(leading...), extents_[Rank - 1], Eigen::InnerStride<>(strides_[Rank - 1]));
  }

  static const char* axis_name(int axis) noexcept {
    static const char* names[4] = {"extent[0]", "extent[1]", "extent[2]", "extent[3]"};
    return names[axis];
  }

 private:
  T* data_;
  shape_type extents_;
  shape_type strides_;
};

template <class T>
using seq_view = strided_view<T, 2>;  ///< [seq, dim]
template <class T>
using batch_view = strided_view<T, 3>;  ///< [batch, seq, dim] (or [seq, head, dim])
template <class T>
using heads_view = strided_view<T, 4>;  ///< logical [batch, seq, head, dim]

/// View of an Eigen dense matrix or block as [rows, cols] with its real strides
/// (row-major or column-major storage both work).
template <class Derived>
auto view_of(Eigen::DenseBase<Derived>& m) {
  using T = std::remove_pointer_t<decltype(m.derived().data())>;
  const Index inner = m.innerStride(), outer = m.outerStride();
  const bool row_major = Derived::IsRowMajor;
  return strided_view<T, 2>(m.derived().data(), {m.rows(), m.cols()},
                            {row_major ? outer : inner, row_major ? inner : outer});
}
template <class Derived>
auto view_of(const Eigen::DenseBase<Derived>& m) {
  using T = std::add_const_t<std::remove_pointer_t<decltype(m.derived().data())>>;
  const Index inner = m.innerStride(), outer = m.outerStride();
  const bool row_major = Derived::IsRowMajor;
  return strided_view<T, 2>(m.derived().data(), {m.rows(), m.cols()},
                            {row_major ? outer : inner, row_major ? inner : outer});
}

/// Splits a [seq, heads*dim] view into [seq, heads, dim] (the usual fused-QKV slice).
template <class T>
strided_view<T, 3> split_heads(const strided_view<T, 2>& v, Index heads) {
  detail::require(heads > 0, "split_heads", "heads", heads, "must be > 0");
  detail::require(v.extent(1) % heads == 0, "split_heads", "dim", v.extent(1),
                  "must be divisible by heads");
  const Index d = v.extent(1) / heads;
  return strided_view<T, 3>(v.data(), {v.extent(0), heads, d},
                            {v.stride(0), d * v.stride(1), v.stride(1)});
}

/// A contiguous [batch, seq, head, dim] buffer (Hugging Face / PyTorch (B, L, H, D)).
template <class T>
heads_view<T> view_bshd(T* data, Index batch, Index seq, Index heads, Index dim) {
  return heads_view<T>::contiguous(data, {batch, seq, heads, dim});
}

/// A contiguous [batch, head, seq, dim] buffer (PyTorch SDPA's (B, H, L, D)), seen in
/// posenc's logical order [batch, seq, head, dim] through permuted strides.
template <class T>
heads_view<T> view_bhsd(T* data, Index batch, Index heads, Index seq, Index dim) {
  return heads_view<T>(data, {batch, seq, heads, dim}, {heads * seq * dim, dim, seq * dim, 1});
}

/// A contiguous [seq, head, dim] buffer as a rank-4 view with batch 1.
template <class T>
heads_view<T> view_shd(T* data, Index seq, Index heads, Index dim) {
  return view_bshd(data, 1, seq, heads, dim);
}

}  // namespace posenc
