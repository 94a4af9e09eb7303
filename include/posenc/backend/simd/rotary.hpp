#pragma once
/// \file
/// The vectorised RoPE rotation, written once on packets: rope_rotate() for every tag
/// whose packets this compilation defines (avx2, avx512, neon: one constrained overload,
/// so which kernel runs never depends on which headers a file included). Same contract as
/// the portable kernel in backend/scalar/rotary.hpp (y_a = x_a c - x_b s,
/// y_b = x_b c + x_a s), computed with one explicit fused multiply-add per output
/// (math::rotate_pair_fused): the cos product is rounded, the sin product is fused into the
/// sum,
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
/// order; the token's cos/sin are reused by every head. The half pairing keeps them in
/// registers (up to 8 packets); the interleaved pairing expands them once per call (with
/// packet shuffles) and keeps the expansion in registers when the rotation is 1, 2, 4 or 8
/// whole packets within half the register file (AVX-512: up to 128 dims), and, for float
/// streaming from memory on AVX2, 8 or 16 (partly spilled), so both pairings then do the same
/// work per packet plus one in-register pair swap. Otherwise the expansion stays in L1: in
/// cache four heads are walked side by side, so each cos/sin load serves four; a call that
/// streams from memory (rope_token::streaming) walks one head at a time.
///
///     half         chunk i: a = x[i .. i+W), b = x[i+r/2 .. i+r/2+W), c, s = cos/sin[i .. i+W)
///                  y_a = fnmadd(b, s, a c),  y_b = fmadd(a, s, b c)
///     interleaved  chunk e: x = [a0 b0 a1 b1 ...] (W values), c = [c0 c0 c1 c1 ...],
///                  s = [-s0 s0 -s1 s1 ...]:  y = fmadd(swap_pairs(x), s, x c)
///
/// Tokens whose dims are not contiguous (dim stride != 1: a column-major matrix, a strided
/// view) are copied a few heads at a time into a contiguous stack buffer, rotated there in
/// place and copied out: the same bits as a contiguous token, at packet speed. Storage
/// types without packet loads on the tag, and heads wider than the buffer, go to the
/// scalar kernel.
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
#include <cstddef>
#include <type_traits>

#include "../../math/rotation.hpp"
#include "../scalar/rotary.hpp"
#include "lowp.hpp"
#include "packets.hpp"

namespace posenc {
namespace simd {

/// Interleaved cos/sin of up to this many rotary dims are expanded once per token on the
/// stack ([c0 c0 c1 c1 ...], [-s0 s0 -s1 s1 ...]); wider rotations expand per chunk.
inline constexpr Index rope_stack_dims = 1024;

/// How far ahead a call on float or double storage that streams from memory
/// (rope_token::streaming) asks for a head's cache lines: each line it reads is asked for
/// again this many bytes on, along the head and into the next heads and tokens (which
/// follow in memory in a [tokens, heads, dim] buffer). q and k in place, [4096, 32, 128]
/// float on Zen 3, calls alternated in one process: 1.04-1.08x at one thread with 1-4 KiB
/// (both pairings, cached and on the fly), none with 512 B, 0.99-1.03x at two; 16-bit
/// storage ran 0.94-1.01x and asks for nothing (docs/benchmarks.md).
inline constexpr Index rope_stream_ahead = 2048;

template <class Arch, class T, class C>
void rope_rotate(const kernels::rope_token<T, C>& t) noexcept;

namespace detail {

/// Asks for the cache line rope_stream_ahead bytes past x + i, once per 64 bytes of a
/// head (i: the head's element offset, a multiple of a packet), in streaming calls on
/// float or double storage only.
template <class T>
POSENC_INLINE void rope_ask_ahead(bool streaming, const T* x, Index i) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    if (streaming && (i * static_cast<Index>(sizeof(T))) % 64 == 0) {
      POSENC_PREFETCH(reinterpret_cast<const char*>(x + i) + rope_stream_ahead);
      POSENC_PREFETCH_KEEP(x);  // a function that only prefetches is not dead code (config.hpp)
    }
  } else {
    static_cast<void>(streaming);
    static_cast<void>(x);
    static_cast<void>(i);
  }
}

/// Partial rotary: dims [r, D) pass through bit for bit (only out of place).
template <class T, class C>
void rope_copy_tail(const kernels::rope_token<T, C>& t) noexcept {
  const Index r = t.rotary_dim;
  if (static_cast<const T*>(t.out) != t.in && r < t.head_dim)
    for (Index h = 0; h < t.heads; ++h)
      std::copy(t.in + h * t.in_head_stride + r, t.in + h * t.in_head_stride + t.head_dim,
                t.out + h * t.out_head_stride + r);
}

/// The half pairing of one token, K > 0: the first K packets of cos/sin held in registers
/// across heads (K = pairs / W, at most 8: 16 registers); K = 0: every packet reloaded
/// (wide rotations). Heads stay outermost and each head is streamed in dim order: a
/// heads-inner order that also keeps cos/sin in registers was slower from memory
/// (docs/benchmarks-history.md).
template <int K, class Arch, class T, class C>
void rope_half(const kernels::rope_token<T, C>& t) noexcept {
  using IO = storage_io<T, Arch>;
  using P = typename IO::packet_type;
  constexpr int W = P::size;
  const Index pairs = t.rotary_dim / 2, off = t.pair_offset;
  const C* const cs = t.cos;
  const C* const sn = t.sin;
  const T* const in = t.in;
  T* const out = t.out;
  const Index heads = t.heads, ihs = t.in_head_stride, ohs = t.out_head_stride;
  const bool streaming = t.streaming;
  const P sign = P::broadcast(t.inverse ? C(-1) : C(1));  // exact: the inverse negates sin
  constexpr std::size_t regs{K > 0 ? K : 1};              // array bounds are unsigned
  P c[regs], s[regs];
  POSENC_UNROLL
  for (int k = 0; k < K; ++k) {
    c[k] = P::load(cs + k * W);
    s[k] = sign * P::load(sn + k * W);
  }
  for (Index h = 0; h < heads; ++h) {
    const T* x = in + h * ihs;
    T* y = out + h * ohs;
    POSENC_UNROLL
    for (int k = 0; k < K; ++k) {
      rope_ask_ahead(streaming, x, k * W);
      rope_ask_ahead(streaming, x, k * W + off);
      P ya, yb;
      math::rotate_pair_fused(IO::load(x + k * W), IO::load(x + k * W + off), c[k], s[k], ya, yb);
      IO::store(y + k * W, ya);
      IO::store(y + k * W + off, yb);
    }
    Index i = K * W;
    if constexpr (K == 0)
      for (; i + W <= pairs; i += W) {
        rope_ask_ahead(streaming, x, i);
        rope_ask_ahead(streaming, x, i + off);
        P ya, yb;
        math::rotate_pair_fused(IO::load(x + i), IO::load(x + i + off), P::load(cs + i),
                                sign * P::load(sn + i), ya, yb);
        IO::store(y + i, ya);
        IO::store(y + i + off, yb);
      }
    if (i < pairs) {
      const int lanes = static_cast<int>(pairs - i);
      P ya, yb;
      math::rotate_pair_fused(IO::load_partial(x + i, lanes), IO::load_partial(x + i + off, lanes),
                              P::load_partial(cs + i, lanes), sign * P::load_partial(sn + i, lanes),
                              ya, yb);
      IO::store_partial(y + i, ya, lanes);
      IO::store_partial(y + i + off, yb, lanes);
    }
  }
  rope_copy_tail(t);
}

/// The interleaved pairing's cos/sin of one token expanded for packets: cb = [c0 c0 c1 c1
/// ...], sb = [-s0 s0 -s1 s1 ...] with s = sgn * sin (2 * pairs values each; the signs are
/// exact multiplications, so -0 stays -0). A packet of pairs at a time: a scalar loop here
/// cost about as much as the rotation it feeds when q and k stream from memory
/// (docs/benchmarks-history.md, issue 27).
template <class Arch, class C>
void rope_expand_interleaved(const C* cos, const C* sin, Index pairs, C sgn, C* cb,
                             C* sb) noexcept {
  using P = packet<C, Arch>;
  constexpr int W = P::size;
  const P pos = P::broadcast(sgn), neg = P::broadcast(-sgn);
  Index i = 0;
  for (; i + W <= pairs; i += W) {
    const P c = P::load(cos + i), sn = P::load(sin + i);
    store_interleaved(cb + 2 * i, c, c);
    store_interleaved(sb + 2 * i, sn * neg, sn * pos);
  }
  for (; i < pairs; ++i) {
    const C c = cos[i], sn = sgn * sin[i];
    cb[2 * i] = c;
    cb[2 * i + 1] = c;
    sb[2 * i] = -sn;
    sb[2 * i + 1] = sn;
  }
}

/// The interleaved pairing of one token whose rotary dims are exactly K packets: the
/// expanded cos/sin (2K packets) held across heads, so each packet of a head costs one
/// load, one pair swap, a multiply, an FMA and one store, the half pairing's work. One
/// head at a time, in dim order (in cache and from memory). With 2K packets above the
/// register file (rope_interleaved_if_fits) the compiler keeps what it can in registers
/// and spills the rest to its own stack slots, which no store of a head can alias, so it
/// need not reload them for every packet as it must reload cb and sb.
template <int K, class Arch, class T, class C>
void rope_interleaved(const kernels::rope_token<T, C>& t, const C* cb, const C* sb) noexcept {
  using IO = storage_io<T, Arch>;
  using P = typename IO::packet_type;
  constexpr int W = P::size;
  static_assert(K >= 1 && K <= P::registers, "cos/sin: at most the register file");
  constexpr std::size_t packets = K;  // array bounds are unsigned
  P c[packets], s[packets];
  POSENC_UNROLL
  for (int k = 0; k < K; ++k) {
    c[k] = P::load(cb + k * W);
    s[k] = P::load(sb + k * W);
  }
  const T* const in = t.in;
  T* const out = t.out;
  const Index ihs = t.in_head_stride, ohs = t.out_head_stride;
  const bool streaming = t.streaming;
  for (Index h = 0; h < t.heads; ++h) {
    const T* x = in + h * ihs;
    T* y = out + h * ohs;
    POSENC_UNROLL
    for (int k = 0; k < K; ++k) {
      rope_ask_ahead(streaming, x, k * W);
      const P v = IO::load(x + k * W);
      IO::store(y + k * W, fmadd(swap_pairs(v), s[k], v * c[k]));
    }
  }
}

/// rope_interleaved<K> when its 2K cos/sin packets fit half the register file, and, on a
/// 16-register file (AVX2), up to 2 x 16 of them for float storage in a call that streams
/// from memory (t.streaming); false, having done nothing, otherwise. There the loads of cb
/// and sb for every packet (from L1, beside the head's own load and store) left fewer of
/// the head's cache lines in flight: the interleaved pairing of q and k [4096, 32, 128] in
/// place ran at 0.87-0.90x the half pairing's speed on Zen 3, and at 0.94-0.95x with the
/// expansion held (docs/benchmarks.md). 16-bit storage, whose widening needs registers of
/// its own, measured no gain; in cache the four-head passes of rope_rotate (one load of cb
/// and sb for four heads) stay.
template <int K, class Arch, class T, class C>
bool rope_interleaved_if_fits(const kernels::rope_token<T, C>& t, const C* cb,
                              const C* sb) noexcept {
  constexpr int registers = storage_io<T, Arch>::packet_type::registers;
  if constexpr (4 * K <= registers) {
    rope_interleaved<K, Arch>(t, cb, sb);
    return true;
  } else if constexpr (registers == 16 && K <= registers && std::is_same_v<T, float>) {
    if (!t.streaming) return false;
    rope_interleaved<K, Arch>(t, cb, sb);
    return true;
  } else {
    return false;
  }
}

/// The interleaved pairing with its expansion held for a rotation of `packets` whole
/// packets (1, 2, 4, 8 or 16, as rope_interleaved_if_fits allows); false, having done
/// nothing, for other counts.
template <class Arch, class T, class C>
bool rope_interleaved_in_registers(const kernels::rope_token<T, C>& t, Index packets, const C* cb,
                                   const C* sb) noexcept {
  switch (packets) {
    case 1:
      return rope_interleaved_if_fits<1, Arch>(t, cb, sb);
    case 2:
      return rope_interleaved_if_fits<2, Arch>(t, cb, sb);
    case 4:
      return rope_interleaved_if_fits<4, Arch>(t, cb, sb);
    case 8:
      return rope_interleaved_if_fits<8, Arch>(t, cb, sb);
    case 16:
      return rope_interleaved_if_fits<16, Arch>(t, cb, sb);
    default:
      return false;
  }
}

/// Elements of T in the stack buffer of rope_rotate_strided.
inline constexpr Index rope_strided_buffer = 2048;

/// A token whose dims are strided: its heads, as many at a time as fill the buffer,
/// gathered into contiguous rows, rotated in place by the packet kernel, scattered back
/// (the whole head dim, so a partial-rotary tail is copied bit for bit out of place).
template <class Arch, class T, class C>
void rope_rotate_strided(const kernels::rope_token<T, C>& t) noexcept {
  const Index D = t.head_dim;
  if (D > rope_strided_buffer) {
    kernels::rope_rotate(backend::scalar{}, t);
    return;
  }
  alignas(64) T buf[rope_strided_buffer];
  const Index per_pass = rope_strided_buffer / D;
  for (Index h0 = 0; h0 < t.heads; h0 += per_pass) {
    const Index n = std::min(per_pass, t.heads - h0);
    for (Index h = 0; h < n; ++h)
      for (Index d = 0; d < D; ++d)
        buf[h * D + d] = t.in[(h0 + h) * t.in_head_stride + d * t.in_dim_stride];
    kernels::rope_token<T, C> c = t;
    c.in = c.out = buf;
    c.in_head_stride = c.out_head_stride = D;
    c.in_dim_stride = c.out_dim_stride = 1;
    c.heads = n;
    simd::rope_rotate<Arch>(c);
    for (Index h = 0; h < n; ++h)
      for (Index d = 0; d < D; ++d)
        t.out[(h0 + h) * t.out_head_stride + d * t.out_dim_stride] = buf[h * D + d];
  }
}

}  // namespace detail

/// Rotates every head of one token with packets of C on Arch, T loaded and stored through
/// storage_io<T, Arch>; see kernels::rope_rotate().
template <class Arch, class T, class C>
void rope_rotate(const kernels::rope_token<T, C>& t) noexcept {
  using IO = storage_io<T, Arch>;
  using P = typename IO::packet_type;
  static_assert(std::is_same_v<typename P::value_type, C>,
                "posenc: the token's cos/sin type must be its storage type's arithmetic type");
  constexpr int W = P::size;
  if (t.in_dim_stride != 1 || t.out_dim_stride != 1) {
    detail::rope_rotate_strided<Arch>(t);
    return;
  }
  const Index r = t.rotary_dim;
  const Index pairs = r / 2;
  const C sgn = t.inverse ? C(-1) : C(1);  // exact: the inverse is sin negated
  if (t.pair_step == 1) {
    // half: pair i is (i, i + r/2); cos/sin load straight into packets. Up to 8 full
    // packets of them stay in registers for all heads (the switch makes the count a
    // compile-time constant); a partial packet, and wider rotations, reload from L1.
    const Index full = pairs / W;
    switch (full) {
      case 1:
        return detail::rope_half<1, Arch>(t);
      case 2:
        return detail::rope_half<2, Arch>(t);
      case 3:
        return detail::rope_half<3, Arch>(t);
      case 4:
        return detail::rope_half<4, Arch>(t);
      case 5:
        return detail::rope_half<5, Arch>(t);
      case 6:
        return detail::rope_half<6, Arch>(t);
      case 7:
        return detail::rope_half<7, Arch>(t);
      case 8:
        return detail::rope_half<8, Arch>(t);
      default:
        return detail::rope_half<0, Arch>(t);
    }
  } else if (r <= rope_stack_dims) {
    // interleaved: pair i is (2i, 2i + 1): y = fmadd(swap_pairs(x), s, x c) with the
    // token's cos/sin expanded once to [c0 c0 c1 c1 ...] and [-s0 s0 -s1 s1 ...]: lane 2i
    // is fl(fl(a c) - b s), lane 2i+1 fl(fl(b c) + a s), the half pairing's arithmetic
    alignas(64) C cb[rope_stack_dims];
    alignas(64) C sb[rope_stack_dims];
    detail::rope_expand_interleaved<Arch>(t.cos, t.sin, pairs, sgn, cb, sb);
    // whole packets whose expansion the register file holds (rope_interleaved_if_fits)
    if (r % W == 0 && detail::rope_interleaved_in_registers<Arch>(t, r / W, cb, sb)) {
      detail::rope_copy_tail(t);
      return;
    }
    // In cache, four heads per pass over the expanded cos/sin: one load of each serves
    // four rotations (the stack copy is reloaded from L1 for every packet; an 8-lane
    // register file cannot hold it). From memory (t.streaming), one head at a time: four
    // streams a head apart outran the hardware prefetchers of the AMD CPUs measured
    // (docs/backends.md).
    constexpr Index group = 4;
    const Index ihs = t.in_head_stride, ohs = t.out_head_stride;
    // g heads from h (a compile-time constant): the g loads are issued before the g
    // stores, which the compiler may not reorder itself (the heads could alias as far as
    // it knows)
    const auto pass = [&](Index h, auto g) {
      const T* x = t.in + h * ihs;
      T* y = t.out + h * ohs;
      P v[group];
      Index e = 0;
      for (; e + W <= r; e += W) {
        const P c = P::load(cb + e), s = P::load(sb + e);
        if constexpr (decltype(g)::value == 1) detail::rope_ask_ahead(t.streaming, x, e);
        for (Index j = 0; j < g; ++j) v[j] = IO::load(x + j * ihs + e);
        for (Index j = 0; j < g; ++j)
          IO::store(y + j * ohs + e, fmadd(swap_pairs(v[j]), s, v[j] * c));
      }
      if (e < r) {
        const int n = static_cast<int>(r - e);
        const P c = P::load_partial(cb + e, n), s = P::load_partial(sb + e, n);
        for (Index j = 0; j < g; ++j) v[j] = IO::load_partial(x + j * ihs + e, n);
        for (Index j = 0; j < g; ++j)
          IO::store_partial(y + j * ohs + e, fmadd(swap_pairs(v[j]), s, v[j] * c), n);
      }
    };
    Index h = 0;
    if (!t.streaming)
      for (; h + group <= t.heads; h += group) pass(h, std::integral_constant<Index, group>{});
    for (; h < t.heads; ++h) pass(h, std::integral_constant<Index, 1>{});
  } else {
    // interleaved, very wide rotation: expand one chunk at a time, heads inside
    for (Index e = 0; e < r; e += W) {
      const int lanes = static_cast<int>(std::min<Index>(W, r - e));
      alignas(64) C cb[std::size_t{W}] = {};
      alignas(64) C sb[std::size_t{W}] = {};
      detail::rope_expand_interleaved<Arch>(t.cos + e / 2, t.sin + e / 2, lanes / 2, sgn, cb, sb);
      const P c = P::load(cb), s = P::load(sb);
      for (Index h = 0; h < t.heads; ++h) {
        const T* x = t.in + h * t.in_head_stride + e;
        T* y = t.out + h * t.out_head_stride + e;
        const P v = IO::load_partial(x, lanes);
        IO::store_partial(y, fmadd(swap_pairs(v), s, v * c), lanes);
      }
    }
  }
  detail::rope_copy_tail(t);
}

}  // namespace simd

namespace kernels {

/// Rotates all heads of one token on a tag with packets (avx2, avx512, neon, or a tag
/// built on one: simd::packet_arch_t): the packet kernel for storage it loads as packets,
/// the portable kernel otherwise. Never throws.
template <class Tag, class T, class C, std::enable_if_t<simd::has_packet_arch_v<Tag>, int> = 0>
inline void rope_rotate(Tag const&, const rope_token<T, C>& t) noexcept {
  using Arch = simd::packet_arch_t<Tag>;
  if constexpr (simd::has_storage_io_v<T, Arch> && std::is_same_v<C, real_t<T>>) {
    POSENC_KERNEL_TRACE("rope_rotate", Arch::name());
    simd::rope_rotate<Arch>(t);
  } else {
    rope_rotate(backend::scalar{}, t);
  }
}

}  // namespace kernels
}  // namespace posenc
