// The SIMD RoPE rotation kernels: both pairings, partial rotary, inverse, in place and out
// of place, strided heads, odd chunk tails. A SIMD kernel fuses the sin product into the
// sum (y_a = fl(fl(x_a c) - x_b s), y_b = fl(fl(x_b c) + x_a s), backend/simd/rotary.hpp),
// so it is checked bit for bit against that arithmetic written here with std::fma, and
// within the documented bound of the scalar kernel, which rounds both products (this
// target is built with -ffp-contract=off, so nothing here is fused but the std::fma calls).
#include <posenc/backend/avx2/rotary.hpp>
#include <posenc/backend/neon/rotary.hpp>
#include <posenc/encoding/rotary/rotary.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends.hpp"
#include "support/catch.hpp"

using posenc::Index;
namespace be = posenc::backend;

namespace {

struct rope_case {
  Index head_dim, rotary_dim, heads;
  bool interleaved;
};

// The SIMD kernels' arithmetic, one pair at a time: the cos product rounded, the sin
// product fused into the sum (std::fma rounds once).
template <class T>
void fused_rope(const be::rope_token<T>& t) {
  const Index pairs = t.rotary_dim / 2;
  for (Index h = 0; h < t.heads; ++h) {
    const T* x = t.in + h * t.in_head_stride;
    T* y = t.out + h * t.out_head_stride;
    for (Index i = 0; i < pairs; ++i) {
      const Index a = i * t.pair_step, b = a + t.pair_offset;
      const T c = t.cos[i], s = t.inverse ? -t.sin[i] : t.sin[i];
      const T xa = x[a], xb = x[b];
      y[a] = std::fma(-xb, s, xa * c);
      y[b] = std::fma(xa, s, xb * c);
    }
    if (y != x)
      for (Index d = t.rotary_dim; d < t.head_dim; ++d) y[d] = x[d];
  }
}

// Largest |a - b| over two equally long buffers.
template <class T>
double max_diff(const std::vector<T>& a, const std::vector<T>& b) {
  double m = 0;
  for (std::size_t k = 0; k < a.size(); ++k)
    m = std::max(m, std::abs(static_cast<double>(a[k]) - static_cast<double>(b[k])));
  return m;
}

// One token of `heads` heads, head stride `hs` >= head_dim (the gap must stay untouched),
// dim stride `ds`; rotated by B, by scalar and (contiguous dims) by fused_rope, in place or
// into a second buffer.
template <class T, class B>
void compare_token(const rope_case& rc, Index hs, Index ds, bool in_place, bool inverse) {
  const Index pairs = rc.rotary_dim / 2;
  const std::size_t n = static_cast<std::size_t>(rc.heads * hs * ds + 5);
  const std::vector<T> x0 = posenc_test::random_values<T>(n, 11);
  const std::vector<T> cs = posenc_test::random_values<T>(static_cast<std::size_t>(2 * pairs), 12);
  std::vector<T> xa = x0, xb = x0, xf = x0;
  const std::vector<T> y0 = posenc_test::random_values<T>(n, 13);
  std::vector<T> ya = y0, yb = y0, yf = y0;

  auto token = [&](std::vector<T>& x, std::vector<T>& y) {
    be::rope_token<T> t;
    t.in = x.data();
    t.in_head_stride = hs * ds;
    t.in_dim_stride = ds;
    t.out = in_place ? x.data() : y.data();
    t.out_head_stride = hs * ds;
    t.out_dim_stride = ds;
    t.heads = rc.heads;
    t.head_dim = rc.head_dim;
    t.rotary_dim = rc.rotary_dim;
    t.pair_step = rc.interleaved ? 2 : 1;
    t.pair_offset = rc.interleaved ? 1 : pairs;
    t.cos = cs.data();
    t.sin = cs.data() + pairs;
    t.inverse = inverse;
    return t;
  };
  be::rope_rotate(B{}, token(xa, ya));
  be::rope_rotate(be::scalar{}, token(xb, yb));
  INFO(B::name() << (rc.interleaved ? " interleaved" : " half") << " D " << rc.head_dim << " r "
                 << rc.rotary_dim << " H " << rc.heads << " head stride " << hs << " dim stride "
                 << ds << (in_place ? " in place" : " out of place") << (inverse ? " inverse" : ""));
  if (ds == 1) {
    // contiguous dims: the packet kernel, bit for bit its fused arithmetic
    fused_rope(token(xf, yf));
    CHECK(xa == xf);
    CHECK(ya == yf);
  } else {
    // strided dims go to the scalar kernel unchanged
    CHECK(xa == xb);
    CHECK(ya == yb);
  }
  // against the scalar kernel: inputs and cos/sin lie in [-1, 1), so |x_a c| + |x_b s| <= 2;
  // one product's rounding (u = eps/2) plus both results' (u each, |y| <= 2): < 5u + O(u^2)
  const double tol = 3 * static_cast<double>(std::numeric_limits<T>::epsilon());
  CHECK(max_diff(xa, xb) <= tol);
  CHECK(max_diff(ya, yb) <= tol);
  // the rotation really happened, and the partial-rotary tail / gaps kept their bits
  CHECK((in_place ? xa != x0 : ya != y0));
  bool tail_kept = true;
  if (in_place)
    for (Index h = 0; h < rc.heads; ++h)
      for (Index d = rc.rotary_dim; d < hs; ++d) {
        const std::size_t k = static_cast<std::size_t>((h * hs + d) * ds);
        tail_kept = tail_kept && xa[k] == x0[k];
      }
  CHECK(tail_kept);
}

}  // namespace

TEST_CASE("SIMD RoPE rotation: its fused arithmetic bit for bit, the scalar kernel within 3 eps",
          "[backend][simd][rotary]") {
  const rope_case cases[] = {
      {128, 128, 32, false}, {128, 128, 3, true},  {128, 32, 4, false},  {128, 32, 4, true},
      {64, 64, 2, false},    {72, 72, 3, false},   {72, 72, 3, true},    {80, 80, 2, false},
      {96, 96, 2, true},     {256, 64, 2, true},   {2, 2, 5, false},     {2, 2, 5, true},
      {10, 6, 3, false},     {10, 6, 3, true},     {34, 34, 1, false},   {34, 34, 1, true},
      {128, 24, 2, false},   {130, 130, 2, true},   {1030, 1030, 2, true},  {1030, 1030, 2, false}};
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (const auto& rc : cases)
      for (bool in_place : {true, false})
        for (bool inverse : {false, true}) {
          compare_token<float, B>(rc, rc.head_dim, 1, in_place, inverse);
          compare_token<double, B>(rc, rc.head_dim, 1, in_place, inverse);
          compare_token<float, B>(rc, rc.head_dim + 3, 1, in_place, inverse);  // gaps between heads
          compare_token<float, B>(rc, rc.head_dim, 2, in_place, inverse);      // strided dims: scalar path
        }
    ++tested;
  });
  CHECK(tested == POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE("rotary_embedding with a SIMD backend agrees with the scalar backend", "[backend][simd][rotary]") {
  // [B, L, H, D] and [B, H, L, D] buffers, both pairings, partial rotary, cached and on
  // the fly, offsets far out: the entry point dispatches the token kernel per backend.
  // Values in [-1, 1), c^2 + s^2 = 1: within 3 eps of the scalar kernel (see above).
  const double tol = 3 * static_cast<double>(std::numeric_limits<float>::epsilon());
  const Index Bn = 2, L = 5, H = 3, D = 80;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (auto pairing : {posenc::rope_pairing::half, posenc::rope_pairing::interleaved})
      for (auto mode : {posenc::rope_cache_mode::cached, posenc::rope_cache_mode::on_the_fly})
        for (Index r : {Index{80}, Index{40}}) {
          posenc::rope_options opt;
          opt.cache = mode;
          posenc::rotary_embedding<float, B> fast(D, r, 10000.0, pairing, opt);
          posenc::rotary_embedding<float, be::scalar> ref(D, r, 10000.0, pairing, opt);
          std::vector<float> a = posenc_test::random_values<float>(static_cast<std::size_t>(Bn * L * H * D), 3);
          std::vector<float> b = a, c = a, d = a;
          // far positions only on the fly (a cache would hold every row up to them)
          const Index far = mode == posenc::rope_cache_mode::cached ? 1000 : 1'000'000;
          fast.apply(posenc::view_bshd(a.data(), Bn, L, H, D), far);
          ref.apply(posenc::view_bshd(b.data(), Bn, L, H, D), far);
          fast.apply(posenc::view_bhsd(c.data(), Bn, H, L, D), Index{7});
          ref.apply(posenc::view_bhsd(d.data(), Bn, H, L, D), Index{7});
          INFO(B::name() << " " << posenc::to_string(pairing) << " r " << r
                         << (mode == posenc::rope_cache_mode::cached ? " cached" : " on the fly"));
          CHECK(max_diff(a, b) <= tol);
          CHECK(max_diff(c, d) <= tol);
          CHECK(max_diff(a, c) > 0.1);
        }
  });
}
