#pragma once
/// \file
/// The vectorised RoPE rotation, written once on packets and instantiated per architecture
/// by backend/{avx2,avx512,neon}/rotary.hpp. Same contract as the portable kernel in
/// backend/scalar/rotary.hpp (y_a = x_a c - x_b s, y_b = x_b c + x_a s), computed with one
/// explicit fused multiply-add per output: the cos product is rounded, the sin product is
/// fused into the sum,
///
///     y_a = fl(fl(x_a c) - x_b s)      y_b = fl(fl(x_b c) + x_a s)
///
/// in both pairings (the interleaved sin lanes carry the sign, and negation is exact), so
/// the two pairings are bit-identical after the dim permutation, on every architecture and
/// whatever the compiler's -ffp-contract: an FMA intrinsic is never re-fused or split. An
/// unfused a*c - b*s leaves the contraction to the compiler, which may fuse a different
/// product in each pairing's loop. Against the unfused scalar kernel the difference is the
/// rounding of one product plus the two results' roundings: |y - y_scalar| <=
/// u (|x_b s| + |y| + |y_scalar|), u = 2^-24 for float, 2^-53 for double.
///
/// Loop order: heads outside, packet chunks inside, so each head is streamed in memory
/// order; the token's cos/sin (for the interleaved pairing expanded once per token) stay in
/// L1 and are reused by every head.
///
///     half         chunk i: a = x[i .. i+W), b = x[i+r/2 .. i+r/2+W), c, s = cos/sin[i .. i+W)
///                  y_a = fnmadd(b, s, a c),  y_b = fmadd(a, s, b c)
///     interleaved  chunk e: x = [a0 b0 a1 b1 ...] (W values), c = [c0 c0 c1 c1 ...],
///                  s = [-s0 s0 -s1 s1 ...]:  y = fmadd(swap_pairs(x), s, x c)
///
/// Tokens whose dims are not contiguous (dim stride != 1) go to the scalar kernel.
///
/// 16-bit storage (Eigen::half, Eigen::bfloat16; lowp.hpp): the same loop on float packets,
/// with each load widened to float and each store rounded once to T (round to nearest
/// even, as Eigen's conversions), so a result is T(the float kernel's value for float(x))
/// bit for bit; cos/sin stay float. Against the scalar kernel on the same T the two float
/// values obey the bound above and each is then rounded to T: |y - y_scalar| <=
/// u (|x_b s| + |y| + |y_scalar|) + ulp_T(y), u = 2^-24. Rounding to nearest is monotone,
/// so unless the rotation cancels far below |x| (the float bound then exceeds T's spacing at
/// y) the two are equal or adjacent values of T.

#include <algorithm>
#include <type_traits>

#include "../scalar/rotary.hpp"
#include "lowp.hpp"
#include "packet.hpp"

namespace posenc {
namespace simd {

/// Interleaved cos/sin of up to this many rotary dims are expanded once per token on the
/// stack ([c0 c0 c1 c1 ...], [-s0 s0 -s1 s1 ...]); wider rotations expand per chunk.
inline constexpr Index rope_stack_dims = 1024;

/// Rotates every head of one token with packets of C on Arch, T loaded and stored through
/// storage_io<T, Arch>; see backend::rope_rotate().
template <class Arch, class T, class C>
void rope_rotate(const backend::rope_token<T, C>& t) noexcept {
  using IO = storage_io<T, Arch>;
  using P = typename IO::packet_type;
  static_assert(std::is_same_v<typename P::value_type, C>,
                "posenc: the token's cos/sin type must be its storage type's arithmetic type");
  constexpr int W = P::size;
  if (t.in_dim_stride != 1 || t.out_dim_stride != 1) {
    backend::rope_rotate(backend::scalar{}, t);
    return;
  }
  const Index r = t.rotary_dim;
  const Index pairs = r / 2;
  const C sgn = t.inverse ? C(-1) : C(1);  // exact: the inverse is sin negated
  if (t.pair_step == 1) {
    // half: pair i is (i, i + r/2); cos/sin load straight into packets
    const Index off = t.pair_offset;
    const P sign = P::broadcast(sgn);
    // heads outermost: each head's dims are streamed in order (what the prefetchers like);
    // the token's cos/sin stay in L1 across heads
    for (Index h = 0; h < t.heads; ++h) {
      const T* x = t.in + h * t.in_head_stride;
      T* y = t.out + h * t.out_head_stride;
      Index i = 0;
      for (; i + W <= pairs; i += W) {
        const P c = P::load(t.cos + i), s = sign * P::load(t.sin + i);
        const P a = IO::load(x + i), b = IO::load(x + i + off);
        IO::store(y + i, fnmadd(b, s, a * c));
        IO::store(y + i + off, fmadd(a, s, b * c));
      }
      if (i < pairs) {
        const int lanes = static_cast<int>(pairs - i);
        const P c = P::load_partial(t.cos + i, lanes);
        const P s = sign * P::load_partial(t.sin + i, lanes);
        const P a = IO::load_partial(x + i, lanes), b = IO::load_partial(x + i + off, lanes);
        IO::store_partial(y + i, fnmadd(b, s, a * c), lanes);
        IO::store_partial(y + i + off, fmadd(a, s, b * c), lanes);
      }
    }
  } else if (r <= rope_stack_dims) {
    // interleaved: pair i is (2i, 2i + 1): y = fmadd(swap_pairs(x), s, x c) with the
    // token's cos/sin expanded once to [c0 c0 c1 c1 ...] and [-s0 s0 -s1 s1 ...]: lane 2i
    // is fl(fl(a c) - b s), lane 2i+1 fl(fl(b c) + a s), the half pairing's arithmetic
    alignas(64) C cb[rope_stack_dims];
    alignas(64) C sb[rope_stack_dims];
    for (Index i = 0; i < pairs; ++i) {
      const C c = t.cos[i], sn = sgn * t.sin[i];
      cb[2 * i] = c;
      cb[2 * i + 1] = c;
      sb[2 * i] = -sn;
      sb[2 * i + 1] = sn;
    }
    for (Index h = 0; h < t.heads; ++h) {
      const T* x = t.in + h * t.in_head_stride;
      T* y = t.out + h * t.out_head_stride;
      Index e = 0;
      for (; e + W <= r; e += W) {
        const P v = IO::load(x + e);
        IO::store(y + e, fmadd(swap_pairs(v), P::load(sb + e), v * P::load(cb + e)));
      }
      if (e < r) {
        const int lanes = static_cast<int>(r - e);
        const P v = IO::load_partial(x + e, lanes);
        IO::store_partial(y + e,
                          fmadd(swap_pairs(v), P::load_partial(sb + e, lanes),
                                v * P::load_partial(cb + e, lanes)),
                          lanes);
      }
    }
  } else {
    // interleaved, very wide rotation: expand one chunk at a time, heads inside
    for (Index e = 0; e < r; e += W) {
      const int lanes = static_cast<int>(std::min<Index>(W, r - e));
      alignas(64) C cb[W] = {};
      alignas(64) C sb[W] = {};
      for (int k = 0; k < lanes / 2; ++k) {
        const C c = t.cos[e / 2 + k], sn = sgn * t.sin[e / 2 + k];
        cb[2 * k] = c;
        cb[2 * k + 1] = c;
        sb[2 * k] = -sn;
        sb[2 * k + 1] = sn;
      }
      const P c = P::load(cb), s = P::load(sb);
      for (Index h = 0; h < t.heads; ++h) {
        const T* x = t.in + h * t.in_head_stride + e;
        T* y = t.out + h * t.out_head_stride + e;
        const P v = IO::load_partial(x, lanes);
        IO::store_partial(y, fmadd(swap_pairs(v), s, v * c), lanes);
      }
    }
  }
  // tail: partial rotary passes dims [r, D) through; only out of place
  if (static_cast<const T*>(t.out) != t.in && r < t.head_dim)
    for (Index h = 0; h < t.heads; ++h)
      std::copy(t.in + h * t.in_head_stride + r, t.in + h * t.in_head_stride + t.head_dim,
                t.out + h * t.out_head_stride + r);
}

}  // namespace simd
}  // namespace posenc
