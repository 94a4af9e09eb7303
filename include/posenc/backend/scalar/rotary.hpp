#pragma once
/// \file
/// The RoPE kernel's arguments (rope_token) and its portable implementation: rotates
/// every head of one token by precomputed cos/sin values. The packet kernel
/// (backend/simd/rotary.hpp) overloads rope_rotate() for every tag with packets and hands
/// it what it does not take; include backend/rotary.hpp to see them all.
///
/// One routine serves both pairings: pair i is the dims (a, b) = (i * step, i * step + offset)
///
///     half        (step 1, offset r/2):  [a0 a1 .. a(r/2-1) | b0 b1 .. b(r/2-1) | tail]
///                 cos/sin per dim:        [c0 c1 ..         | c0 c1 ..          ]
///     interleaved (step 2, offset 1):    [a0 b0 | a1 b1 | ... | tail]
///                 cos/sin per dim:        [c0 c0 | c1 c1 | ... ]
///
///     y_a = x_a cos_i - x_b sin_i
///     y_b = x_b cos_i + x_a sin_i        (the inverse: the same with sin_i negated)
///
/// (math::rotate_pair). The dims past the rotary dim r (partial rotary) are copied
/// unchanged when the output is a different buffer, and not touched at all in place.
///
/// Storage and arithmetic types: a token stores T and carries cos/sin of type C, its
/// arithmetic type (real_t<T>: float and double compute in themselves, Eigen::half and
/// Eigen::bfloat16 in float). Each element is widened to C, rotated with exactly the
/// arithmetic of a C token, and rounded once to T (Eigen's round-to-nearest-even), so a
/// half/bfloat16 result is T(the float kernel applied to float(x)) bit for bit.

#include <Eigen/Core>
#include <type_traits>

#include "../../config.hpp"
#include "../../core/backend.hpp"
#include "../../core/types.hpp"
#include "../../math/rotation.hpp"

namespace posenc {
namespace kernels {

/// The heads of one token and the rotation to apply to them; the arguments of
/// rope_rotate(). Built by the validating entry points in encoding/rotary/, so a kernel
/// may assume: 0 < rotary_dim <= head_dim, rotary_dim even, pair_step/pair_offset one of
/// the two pairings above, `cos`/`sin` hold rotary_dim/2 values, and `out` either is
/// exactly `in` (same pointer and strides: in place) or shares no element with it.
/// T: the storage type of `in`/`out`; C: the type of `cos`/`sin` and of the arithmetic
/// (real_t<T> for the entry points; C = T for float and double).
template <class T, class C = T>
struct rope_token {
  const T* in = nullptr;     ///< first element of head 0
  Index in_head_stride = 0;  ///< elements between heads
  Index in_dim_stride = 1;   ///< elements between dims
  T* out = nullptr;
  Index out_head_stride = 0;
  Index out_dim_stride = 1;
  Index heads = 0;
  Index head_dim = 0;      ///< D
  Index rotary_dim = 0;    ///< r <= D, even
  Index pair_step = 1;     ///< 1 (half) or 2 (interleaved)
  Index pair_offset = 0;   ///< r/2 (half) or 1 (interleaved)
  const C* cos = nullptr;  ///< r/2 values for this token (attention factor, xPos folded in)
  const C* sin = nullptr;  ///< r/2 values
  bool inverse = false;    ///< rotate by -angle (sin negated)
  /// The call moves more than rope_streaming_bytes: memory-bound, so a kernel should read
  /// in memory order (one forward stream) rather than save loads of cos/sin.
  bool streaming = false;
};

/// Calls that read more bytes of Q and K than this set rope_token::streaming: their data
/// is taken to come from memory, not from the caches (8 MiB: where the packet kernel's
/// cache-friendly head walk stopped paying on the CPUs measured, docs/backends.md).
inline constexpr Index rope_streaming_bytes = Index(8) << 20;

/// rope_token::streaming for a call over `values` elements of T (in double: the extents of
/// broadcast views may multiply past Index).
template <class T>
inline bool rope_streams(double values) noexcept {
  return values * static_cast<double>(sizeof(T)) > static_cast<double>(rope_streaming_bytes);
}

namespace detail {

/// Rotates the pairs of one head vector; `InStride`/`OutStride` are the dim strides (a
/// compile-time 1 in the contiguous case, so compilers can vectorise the half layout).
/// Elements are read as C and the results rounded once to T (no-ops when T is C).
template <class T, class C, class InStride, class OutStride>
POSENC_INLINE void rope_rotate_head(const T* x, T* y, InStride is, OutStride os, Index pairs,
                                    Index step, Index offset, const C* cos, const C* sin,
                                    C sign) noexcept {
  for (Index i = 0; i < pairs; ++i) {
    const Index a = i * step;
    const Index b = a + offset;
    const C s = sign * sin[i];  // sign is +1 or -1: exact
    C ya, yb;
    math::rotate_pair(static_cast<C>(x[a * is]), static_cast<C>(x[b * is]), cos[i], s, ya, yb);
    y[a * os] = static_cast<T>(ya);
    y[b * os] = static_cast<T>(yb);
  }
}

}  // namespace detail

/// Rotates all heads of one token (portable reference kernel). Never throws.
template <class T, class C>
inline void rope_rotate(backend::scalar const&, const rope_token<T, C>& t) noexcept {
  POSENC_KERNEL_TRACE("rope_rotate", "scalar");
  const Index pairs = t.rotary_dim / 2;
  const bool copy_tail = static_cast<const T*>(t.out) != t.in;
  const bool contiguous = t.in_dim_stride == 1 && t.out_dim_stride == 1;
  const C sign = t.inverse ? C(-1) : C(1);
  // heads: the token's cos/sin are reused by every head
  for (Index h = 0; h < t.heads; ++h) {
    const T* x = t.in + h * t.in_head_stride;
    T* y = t.out + h * t.out_head_stride;
    // pairs: both inputs are read before either output is written, so in place is safe
    if (contiguous)
      detail::rope_rotate_head(x, y, std::integral_constant<Index, 1>{},
                               std::integral_constant<Index, 1>{}, pairs, t.pair_step,
                               t.pair_offset, t.cos, t.sin, sign);
    else
      detail::rope_rotate_head(x, y, t.in_dim_stride, t.out_dim_stride, pairs, t.pair_step,
                               t.pair_offset, t.cos, t.sin, sign);
    // tail: partial rotary passes the remaining dims through bit for bit
    if (copy_tail)
      for (Index d = t.rotary_dim; d < t.head_dim; ++d)
        y[d * t.out_dim_stride] = x[d * t.in_dim_stride];
  }
}

}  // namespace kernels
}  // namespace posenc
