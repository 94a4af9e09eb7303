// The SIMD RoPE rotation kernels against the scalar kernel: both pairings, partial rotary,
// inverse, in place and out of place, strided heads, odd chunk tails; bit for bit (this
// target is built with -ffp-contract=off, so the scalar kernel rounds each product too).
#include <posenc/backend/avx2/rotary.hpp>
#include <posenc/backend/neon/rotary.hpp>
#include <posenc/encoding/rotary/rotary.hpp>

#include <cmath>
#include <cstring>
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

// One token of `heads` heads, head stride `hs` >= head_dim (the gap must stay untouched),
// dim stride `ds`; rotated by B and by scalar, in place or into a second buffer.
template <class T, class B>
void compare_token(const rope_case& rc, Index hs, Index ds, bool in_place, bool inverse) {
  const Index pairs = rc.rotary_dim / 2;
  const std::size_t n = static_cast<std::size_t>(rc.heads * hs * ds + 5);
  const std::vector<T> x0 = posenc_test::random_values<T>(n, 11);
  const std::vector<T> cs = posenc_test::random_values<T>(static_cast<std::size_t>(2 * pairs), 12);
  std::vector<T> xa = x0, xb = x0;
  const std::vector<T> y0 = posenc_test::random_values<T>(n, 13);
  std::vector<T> ya = y0, yb = y0;

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
  CHECK(xa == xb);
  CHECK(ya == yb);
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

TEST_CASE("SIMD RoPE rotation matches the scalar kernel bit for bit", "[backend][simd][rotary]") {
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

TEST_CASE("rotary_embedding with a SIMD backend equals the scalar backend", "[backend][simd][rotary]") {
  // [B, L, H, D] and [B, H, L, D] buffers, both pairings, partial rotary, cached and on
  // the fly, offsets far out: the entry point dispatches the token kernel per backend.
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
          CHECK(a == b);
          CHECK(c == d);
          CHECK(a != c);
        }
  });
}
