#pragma once
/// \file
/// The vectorised RoPE rotation, written once on packets and instantiated per architecture
/// by backend/{avx2,avx512,neon}/rotary.hpp. Same contract and result as the portable kernel
/// in backend/scalar/rotary.hpp (y_a = x_a c - x_b s, y_b = x_b c + x_a s, each product
/// rounded, then the sum: bit-identical to the scalar kernel when the compiler does not
/// contract the scalar expression into an FMA).
///
/// Loop order: packet chunks of pairs outside, heads inside, so each chunk's cos/sin
/// packets are loaded (or, for the interleaved pairing, expanded) once per token and reused
/// by every head.
///
///     half         chunk i: a = x[i .. i+W), b = x[i+r/2 .. i+r/2+W), c, s = cos/sin[i .. i+W)
///                  y_a = a c - b s,  y_b = b c + a s
///     interleaved  chunk e: x = [a0 b0 a1 b1 ...] (W values), c = [c0 c0 c1 c1 ...],
///                  s = [-s0 s0 -s1 s1 ...]:  y = x c + swap_pairs(x) s
///
/// Tokens whose dims are not contiguous (dim stride != 1) go to the scalar kernel.

#include <algorithm>

#include "../scalar/rotary.hpp"
#include "packet.hpp"

namespace posenc {
namespace simd {

/// Rotates every head of one token with packet<T, Arch>; see backend::rope_rotate().
template <class Arch, class T>
void rope_rotate(const backend::rope_token<T>& t) noexcept {
  using P = packet<T, Arch>;
  constexpr int W = P::size;
  if (t.in_dim_stride != 1 || t.out_dim_stride != 1) {
    backend::rope_rotate(backend::scalar{}, t);
    return;
  }
  const Index r = t.rotary_dim;
  const Index pairs = r / 2;
  if (t.pair_step == 1) {
    // half: pair i is (i, i + r/2); cos/sin load straight into packets
    const Index off = t.pair_offset;
    const P sign = P::broadcast(t.inverse ? T(-1) : T(1));
    for (Index i = 0; i < pairs; i += W) {
      const int lanes = static_cast<int>(std::min<Index>(W, pairs - i));
      const bool full = lanes == W;
      const P c = full ? P::load(t.cos + i) : P::load_partial(t.cos + i, lanes);
      const P s = sign * (full ? P::load(t.sin + i) : P::load_partial(t.sin + i, lanes));
      // heads: this chunk's cos/sin serve all of them
      for (Index h = 0; h < t.heads; ++h) {
        const T* x = t.in + h * t.in_head_stride + i;
        T* y = t.out + h * t.out_head_stride + i;
        const P a = full ? P::load(x) : P::load_partial(x, lanes);
        const P b = full ? P::load(x + off) : P::load_partial(x + off, lanes);
        const P ya = a * c - b * s;
        const P yb = b * c + a * s;
        if (full) {
          ya.store(y);
          yb.store(y + off);
        } else {
          ya.store_partial(y, lanes);
          yb.store_partial(y + off, lanes);
        }
      }
    }
  } else {
    // interleaved: pair i is (2i, 2i + 1); expand cos/sin to [c c], [-s s] per chunk
    const T sgn = t.inverse ? T(-1) : T(1);
    for (Index e = 0; e < r; e += W) {
      const int lanes = static_cast<int>(std::min<Index>(W, r - e));
      alignas(64) T cb[W] = {};
      alignas(64) T sb[W] = {};
      for (int k = 0; k < lanes / 2; ++k) {
        const T c = t.cos[e / 2 + k];
        const T s = sgn * t.sin[e / 2 + k];
        cb[2 * k] = c;
        cb[2 * k + 1] = c;
        sb[2 * k] = -s;
        sb[2 * k + 1] = s;
      }
      const P c = P::load(cb), s = P::load(sb);
      const bool full = lanes == W;
      for (Index h = 0; h < t.heads; ++h) {
        const T* x = t.in + h * t.in_head_stride + e;
        T* y = t.out + h * t.out_head_stride + e;
        const P v = full ? P::load(x) : P::load_partial(x, lanes);
        const P out = v * c + swap_pairs(v) * s;
        if (full)
          out.store(y);
        else
          out.store_partial(y, lanes);
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
