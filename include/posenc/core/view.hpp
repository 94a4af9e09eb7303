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
#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "error.hpp"
#include "types.hpp"

namespace posenc {

template <class T, int Rank>
class strided_view {
  static_assert(Rank >= 1 && Rank <= 4, "posenc::strided_view supports ranks 1 to 4");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using shape_type = std::array<Index, std::size_t{Rank}>;
  static constexpr int rank = Rank;

  strided_view() noexcept : data_(nullptr), extents_{}, strides_{} {}

  /// A view with explicit strides (in elements). Throws posenc::error for a negative
  /// extent, or a null pointer over a non-empty extent.
  strided_view(T* data, const shape_type& extents, const shape_type& strides)
      : data_(data), extents_(extents), strides_(strides) {
    for (std::size_t a = 0; a < extents.size(); ++a)
      detail::require(extents[a] >= 0, "strided_view", axis_name(a), extents[a],
                      "extents must be >= 0");
    detail::require(data != nullptr || size() == 0, "strided_view", "data", "nullptr",
                    "a non-empty view needs memory");
  }

  /// A row-major (C order) contiguous view.
  static strided_view contiguous(T* data, const shape_type& extents) {
    shape_type strides{};
    Index s = 1;
    for (std::size_t a = extents.size(); a-- > 0;) {
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
    const Index ids[] = {static_cast<Index>(idx)...};
    Index off = 0;
    for (std::size_t a = 0; a < extents_.size(); ++a) {
      assert(ids[a] >= 0 && ids[a] < extents_[a]);
      off += ids[a] * strides_[a];
    }
    return data_[off];
  }

  /// Pointer to the first element of the innermost vector at the leading indices.
  template <class... I>
  T* vector_ptr(I... leading) const noexcept {
    static_assert(sizeof...(I) == Rank - 1, "posenc::strided_view: give all but the last index");
    const Index ids[] = {static_cast<Index>(leading)..., 0};  // + 0: never zero-sized
    Index off = 0;
    for (std::size_t a = 0; a + 1 < extents_.size(); ++a) {
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

  static const char* axis_name(std::size_t axis) noexcept {
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

/// A writable [rows, cols] view of a caller's matrix, map, block or Ref (row- or
/// column-major; the view keeps its real strides), taken through the `const
/// MatrixBase&` that Eigen documents for output arguments (so temporaries such as blocks
/// are accepted): the one place posenc casts that const away.
template <class Derived>
strided_view<typename Derived::Scalar, 2> writable_view(const Eigen::MatrixBase<Derived>& m) {
  static_assert(
      bool(Derived::Flags & Eigen::DirectAccessBit) && bool(Derived::Flags & Eigen::LvalueBit),
      "posenc: an output must be a writable Matrix, Map, Block or Ref with direct "
      "access");
  return view_of(const_cast<Eigen::MatrixBase<Derived>&>(m).derived());
}

/// A read-only [rows, cols] view of any Eigen input without copying it: a matrix, map,
/// block or Ref is viewed where it is (either storage order, its real strides); only an
/// expression without storage (a product, a sum) is evaluated, once, into a row-major
/// temporary this object owns. Not copyable: build it where it is used,
/// `const auto in = posenc::matrix_input(q);`, then read `in.view()`.
template <class Derived>
class matrix_input {
 public:
  using scalar_type = typename Derived::Scalar;
  using view_type = strided_view<const scalar_type, 2>;
  /// True when the input is read in place (no copy).
  static constexpr bool in_place = bool(Derived::Flags & Eigen::DirectAccessBit);

  explicit matrix_input(const Eigen::MatrixBase<Derived>& m) {
    if constexpr (in_place) {
      view_ = view_of(m.derived());
    } else {
      copy_ = m;
      view_ = view_of(static_cast<const row_matrix<scalar_type>&>(copy_));
    }
  }
  matrix_input(const matrix_input&) = delete;
  matrix_input& operator=(const matrix_input&) = delete;

  const view_type& view() const noexcept { return view_; }

 private:
  row_matrix<scalar_type> copy_;  // only for expressions without storage
  view_type view_;
};

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

/// One head [seq, dim] as a rank-4 view [1, seq, 1, dim] (same memory, same strides).
template <class T>
heads_view<T> as_heads(const strided_view<T, 2>& v) {
  return heads_view<T>(v.data(), {1, v.extent(0), 1, v.extent(1)},
                       {0, v.stride(0), 0, v.stride(1)});
}
/// [seq, head, dim] as a rank-4 view [1, seq, head, dim].
template <class T>
heads_view<T> as_heads(const strided_view<T, 3>& v) {
  return heads_view<T>(v.data(), {1, v.extent(0), v.extent(1), v.extent(2)},
                       {0, v.stride(0), v.stride(1), v.stride(2)});
}
/// A [seq, heads*dim] view with the heads packed along the columns (a fused projection's
/// output) as [1, seq, heads, dim]. Throws posenc::error unless heads divides the columns.
template <class T>
heads_view<T> packed_heads(const strided_view<T, 2>& v, Index heads) {
  return as_heads(split_heads(v, heads));
}

namespace detail {

/// The memory of a view as runs: `count` elements `stride` bytes apart from byte `start`,
/// stride > 0 (a run with stride = element size is one contiguous block). Axes of extent 1
/// are dropped and axes that continue each other (stride[a] = extent[a+1] * stride[a+1])
/// merged, so a contiguous buffer is one run and a column block of a row-major matrix one
/// run per row.
struct memory_run {
  std::uintptr_t start = 0;
  Index count = 1;
  Index stride = 1;  ///< bytes
  std::uintptr_t end(Index size) const noexcept {
    return start + static_cast<std::uintptr_t>((count - 1) * stride + size);
  }
};

/// At most this many runs per view are compared exactly (views_overlap).
inline constexpr Index overlap_runs_limit = Index(1) << 22;

/// The runs of a non-empty view into `runs`; false (and nothing added) when there would be
/// more than overlap_runs_limit.
template <class T, int R>
bool memory_runs(const strided_view<T, R>& v, std::vector<memory_run>& runs) {
  constexpr Index size = static_cast<Index>(sizeof(T));
  Index ext[std::size_t{R}], str[std::size_t{R}];  // array bounds are unsigned
  int n = 0;
  for (int a = 0; a < R; ++a)
    if (v.extent(a) > 1) {
      ext[n] = v.extent(a);
      str[n] = v.stride(a) * size;
      ++n;
    }
  for (int a = n - 2; a >= 0; --a)  // merge axis a into a + 1 where it continues it
    if (str[a] == ext[a + 1] * str[a + 1]) {
      ext[a + 1] *= ext[a];
      for (int b = a; b < n - 1; ++b) ext[b] = ext[b + 1], str[b] = str[b + 1];
      --n;
    }
  Index count = n > 0 ? ext[n - 1] : 1, stride = n > 0 ? str[n - 1] : size;
  Index shift = 0;  // a backward inner axis starts at its last element
  if (stride < 0) {
    shift = (count - 1) * stride;
    stride = -stride;
  } else if (stride == 0) {  // a broadcast axis: one element
    count = 1;
    stride = size;
  }
  Index outer = 1;
  for (int a = 0; a + 1 < n; ++a) {
    if (outer > overlap_runs_limit / ext[a]) return false;
    outer *= ext[a];
  }
  runs.reserve(runs.size() + static_cast<std::size_t>(outer));
  Index idx[std::size_t{R}] = {};
  const auto base = reinterpret_cast<std::uintptr_t>(v.data());
  for (Index r = 0; r < outer; ++r) {
    Index off = shift;
    for (int a = 0; a + 1 < n; ++a) off += idx[a] * str[a];
    runs.push_back({base + static_cast<std::uintptr_t>(off), count, stride});
    for (int a = n - 2; a >= 0; --a) {  // the next outer index, the last axis fastest
      if (++idx[a] < ext[a]) break;
      idx[a] = 0;
    }
  }
  return true;
}

/// The bytes [first, end) a non-empty view can touch.
template <class T, int R>
std::pair<std::uintptr_t, std::uintptr_t> byte_range(const strided_view<T, R>& v) {
  Index low = 0, high = 0;
  for (int a = 0; a < R; ++a) {
    const Index step = v.stride(a) * (v.extent(a) - 1) * static_cast<Index>(sizeof(T));
    (step < 0 ? low : high) += step;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data());
  return {base + static_cast<std::uintptr_t>(low),
          base + static_cast<std::uintptr_t>(high) + sizeof(T)};
}

/// True when run a (elements of size_a bytes) and run b (size_b) share a byte.
inline bool runs_meet(const memory_run& a, Index size_a, const memory_run& b, Index size_b) {
  const std::uintptr_t end_a = a.end(size_a), end_b = b.end(size_b);
  if (end_a <= b.start || end_b <= a.start) return false;
  const bool dense_a = a.count == 1 || a.stride == size_a;
  const bool dense_b = b.count == 1 || b.stride == size_b;
  if (dense_a && dense_b) return true;
  if (dense_a || dense_b) {  // a block against a strided run: does an element fall in it?
    const memory_run& s = dense_a ? b : a;
    const auto ss = static_cast<std::uintptr_t>(dense_a ? size_b : size_a);
    const std::uintptr_t lo = dense_a ? a.start : b.start, hi = dense_a ? end_a : end_b;
    const auto step = static_cast<std::uintptr_t>(s.stride);
    // the first element of s that ends after lo
    const std::uintptr_t k = lo >= s.start + ss ? (lo - s.start - ss) / step + 1 : 0;
    return k < static_cast<std::uintptr_t>(s.count) && s.start + k * step < hi;
  }
  if (a.stride == b.stride && size_a == size_b) {  // one grid step: offset under an element?
    const std::uintptr_t d = a.start > b.start ? a.start - b.start : b.start - a.start;
    const std::uintptr_t m = d % static_cast<std::uintptr_t>(a.stride);
    return m < static_cast<std::uintptr_t>(size_a) ||
           m > static_cast<std::uintptr_t>(a.stride - size_a);
  }
  return true;  // differently strided runs whose ranges meet: taken to share a byte
}

}  // namespace detail

/// True when views a and b share memory. Exact when their innermost runs are contiguous or
/// strided alike (every layout of docs/layouts.md); two differently strided runs whose
/// address ranges meet, and views of more than 2^22 runs whose ranges meet, count as
/// sharing. O(1) for views of different buffers.
template <class A, int RA, class B, int RB>
bool views_overlap(const strided_view<A, RA>& a, const strided_view<B, RB>& b) {
  if (a.empty() || b.empty()) return false;
  const auto [lo_a, hi_a] = detail::byte_range(a);
  const auto [lo_b, hi_b] = detail::byte_range(b);
  if (hi_a <= lo_b || hi_b <= lo_a) return false;
  std::vector<detail::memory_run> ra, rb;
  if (!detail::memory_runs(a, ra) || !detail::memory_runs(b, rb)) return true;
  const Index size_a = static_cast<Index>(sizeof(A)), size_b = static_cast<Index>(sizeof(B));
  const auto by_start = [](const detail::memory_run& x, const detail::memory_run& y) {
    return x.start < y.start;
  };
  std::sort(ra.begin(), ra.end(), by_start);
  std::sort(rb.begin(), rb.end(), by_start);
  // each run of a against the runs of b that start before it ends; b's runs that ended
  // before it starts are passed for good (a's starts only grow)
  std::size_t first = 0;
  for (const detail::memory_run& x : ra) {
    while (first < rb.size() && rb[first].end(size_b) <= x.start) ++first;
    for (std::size_t j = first; j < rb.size() && rb[j].start < x.end(size_a); ++j)
      if (detail::runs_meet(x, size_a, rb[j], size_b)) return true;
  }
  return false;
}

namespace detail {
/// Throws posenc::error from `where` when `out` shares memory with `in`, unless
/// `in_place_ok` and `out` is `in` itself (same data, extents and strides).
template <class A, int RA, class B, int RB>
void check_no_overlap(const char* where, const char* out_name, const strided_view<A, RA>& out,
                      const char* in_name, const strided_view<B, RB>& in,
                      bool in_place_ok = false) {
  if constexpr (RA == RB && std::is_same_v<std::remove_cv_t<A>, std::remove_cv_t<B>>) {
    if (in_place_ok &&
        static_cast<const void*>(out.data()) == static_cast<const void*>(in.data()) &&
        out.strides() == in.strides() && out.extents() == in.extents())
      return;
  }
  if (views_overlap(out, in))
    detail::fail(where, out_name, std::string("shares memory with ") + in_name,
                 in_place_ok ? "an output must be its input itself (in place, same strides) or "
                               "share no element with any input"
                             : "an output must share no element with the inputs");
}
}  // namespace detail

}  // namespace posenc
