// The SIMD RoPE rotation kernels: both pairings, partial rotary, inverse, in place and out
// of place, strided heads, odd chunk tails. A SIMD kernel fuses the sin product into the
// sum (y_a = fl(fl(x_a c) - x_b s), y_b = fl(fl(x_b c) + x_a s), backend/simd/rotary.hpp),
// so it is checked bit for bit against that arithmetic written here with std::fma, and
// within the documented bound of the scalar kernel, which rounds both products (this
// target is built with -ffp-contract=off, so nothing here is fused but the std::fma calls).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <posenc/backend/simd/lowp.hpp>
#include <posenc/encoding/rotary/rotary.hpp>
#include <random>
#include <type_traits>
#include <utility>
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
// product fused into the sum (std::fma rounds once). Dims may be strided: the packet
// kernels gather such tokens and give them the same arithmetic.
template <class T>
void fused_rope(const posenc::kernels::rope_token<T>& t) {
  const Index pairs = t.rotary_dim / 2, is = t.in_dim_stride, os = t.out_dim_stride;
  for (Index h = 0; h < t.heads; ++h) {
    const T* x = t.in + h * t.in_head_stride;
    T* y = t.out + h * t.out_head_stride;
    for (Index i = 0; i < pairs; ++i) {
      const Index a = i * t.pair_step, b = a + t.pair_offset;
      const T c = t.cos[i], s = t.inverse ? -t.sin[i] : t.sin[i];
      const T xa = x[a * is], xb = x[b * is];
      y[a * os] = std::fma(-xb, s, xa * c);
      y[b * os] = std::fma(xa, s, xb * c);
    }
    if (y != x)
      for (Index d = t.rotary_dim; d < t.head_dim; ++d) y[d * os] = x[d * is];
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

// The rope_token of one test case: `heads` heads of x (head stride hs, dim stride ds),
// written to x itself (in place) or to y, with cos = cs[0, r/2) and sin = cs[r/2, r).
template <class S, class C>
posenc::kernels::rope_token<S, C> make_token(const rope_case& rc, Index hs, Index ds, bool in_place,
                                             bool inverse, S* x, S* y, const C* cs) {
  const Index pairs = rc.rotary_dim / 2;
  posenc::kernels::rope_token<S, C> t;
  t.in = x;
  t.in_head_stride = hs * ds;
  t.in_dim_stride = ds;
  t.out = in_place ? x : y;
  t.out_head_stride = hs * ds;
  t.out_dim_stride = ds;
  t.heads = rc.heads;
  t.head_dim = rc.head_dim;
  t.rotary_dim = rc.rotary_dim;
  t.pair_step = rc.interleaved ? 2 : 1;
  t.pair_offset = rc.interleaved ? 1 : pairs;
  t.cos = cs;
  t.sin = cs + pairs;
  t.inverse = inverse;
  return t;
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
    return make_token(rc, hs, ds, in_place, inverse, x.data(), y.data(), cs.data());
  };
  posenc::kernels::rope_rotate(B{}, token(xa, ya));
  posenc::kernels::rope_rotate(be::scalar{}, token(xb, yb));
  // a call that streams from memory walks the heads in another order: the same bits
  std::vector<T> xs = x0, ys = y0;
  auto streaming = token(xs, ys);
  streaming.streaming = true;
  posenc::kernels::rope_rotate(B{}, streaming);
  INFO(B::name() << (rc.interleaved ? " interleaved" : " half") << " D " << rc.head_dim << " r "
                 << rc.rotary_dim << " H " << rc.heads << " head stride " << hs << " dim stride "
                 << ds << (in_place ? " in place" : " out of place")
                 << (inverse ? " inverse" : ""));
  // contiguous or strided dims (gathered by the kernel): the packet kernel, bit for bit
  // its fused arithmetic
  fused_rope(token(xf, yf));
  CHECK(xa == xf);
  CHECK(ya == yf);
  CHECK(xs == xf);
  CHECK(ys == yf);
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
      {128, 128, 32, false},
      {128, 128, 3, true},
      {128, 32, 4, false},
      {128, 32, 4, true},
      {64, 64, 2, false},
      {72, 72, 3, false},
      {72, 72, 3, true},
      {80, 80, 2, false},
      {96, 96, 2, true},
      {256, 64, 2, true},
      {2, 2, 5, false},
      {2, 2, 5, true},
      {10, 6, 3, false},
      {10, 6, 3, true},
      {34, 34, 1, false},
      {34, 34, 1, true},
      {128, 24, 2, false},
      {130, 130, 2, true},
      {1030, 1030, 2, true},
      {1030, 1030, 2, false},
      // interleaved rotations of 1, 2, 4, 8 (and 16: 128 above) whole packets (cos/sin held
      // in registers on some architecture and type), alone and with a pass-through tail
      {64, 64, 2, true},
      {16, 16, 3, true},
      {8, 8, 3, true},
      {40, 16, 3, true},
      {136, 128, 2, true},
      {32, 32, 5, true}};
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (const auto& rc : cases)
      for (bool in_place : {true, false})
        for (bool inverse : {false, true}) {
          compare_token<float, B>(rc, rc.head_dim, 1, in_place, inverse);
          compare_token<double, B>(rc, rc.head_dim, 1, in_place, inverse);
          compare_token<float, B>(rc, rc.head_dim + 3, 1, in_place, inverse);  // gaps between heads
          compare_token<float, B>(rc, rc.head_dim, 2, in_place,
                                  inverse);  // strided dims: scalar path
        }
    ++tested;
  });
  CHECK(tested == POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE("rotary_embedding with a SIMD backend agrees with the scalar backend",
          "[backend][simd][rotary]") {
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
          std::vector<float> a =
              posenc_test::random_values<float>(static_cast<std::size_t>(Bn * L * H * D), 3);
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
    // a call over more than rope_streaming_bytes (the kernels' from-memory order)
    const Index Lb = posenc::kernels::rope_streaming_bytes / (8 * 128 * Index(sizeof(float))) + 3;
    for (auto pairing : {posenc::rope_pairing::half, posenc::rope_pairing::interleaved}) {
      posenc::rotary_embedding<float, B> fast(128, -1, 10000.0, pairing);
      posenc::rotary_embedding<float, be::scalar> ref(128, -1, 10000.0, pairing);
      std::vector<float> a =
          posenc_test::random_values<float>(static_cast<std::size_t>(Lb * 8 * 128), 4);
      std::vector<float> b = a;
      fast.apply(posenc::view_bshd(a.data(), 1, Lb, 8, 128), Index{3});
      ref.apply(posenc::view_bshd(b.data(), 1, Lb, 8, 128), Index{3});
      INFO(B::name() << " " << posenc::to_string(pairing) << ", " << Lb << " tokens");
      CHECK(max_diff(a, b) <= tol);
    }
  });
}

// ---- RoPE angles: vectorised angle addition ------------------------------------------------

namespace {

/// cos/sin(n w) as backend/simd/angles.hpp computes them, one value at a time with std::fma:
/// n = P + f, P = 64 floor(n / 64); s = fma(sin Pw, cos fw, cos Pw * sin fw),
/// c = fma(-sin Pw, sin fw, cos Pw * cos fw).
void emulate_angles(Index n, double w, double& c, double& s) {
  Index q = n / 64;
  if (n % 64 < 0) --q;
  const double P = static_cast<double>(q * 64), f = static_cast<double>(n - q * 64);
  const double sP = std::sin(P * w), cP = std::cos(P * w), sf = std::sin(f * w),
               cf = std::cos(f * w);
  s = std::fma(sP, cf, cP * sf);
  c = std::fma(-sP, sf, cP * cf);
}

posenc::rope_frequencies xpos_frequencies() {
  posenc::rope_frequencies f = posenc::plain_rope_frequencies(64, 10000.0);
  f.attention_factor = 1.25;
  f.xpos_scale_base = 512.0;
  return f;
}

}  // namespace

TEST_CASE("SIMD RoPE cos/sin rows: angle addition bit for bit, libm rows within one ulp",
          "[backend][simd][rotary]") {
  // Exact float rows on a backend with double packets come from angle addition; double rows
  // and the scalar backend's rows call libm per pair (detail::rope_row). Checked: the
  // documented arithmetic exactly (so avx2, avx512 and neon agree bit for bit), libm's float
  // rows equal or one ulp apart, double rows libm's bit for bit, cached rows = on-the-fly rows.
  const Index positions[] = {
      0, 1, 63, 64, 65, 127, 4096, 123'457, 1'000'000, 1'048'639, Index{1} << 33};
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    STATIC_REQUIRE(posenc::detail::rope_vector_angles_v<B>);
    for (const posenc::rope_frequencies& f :
         {posenc::plain_rope_frequencies(128), posenc::plain_rope_frequencies(74, 5e5),
          xpos_frequencies()}) {
      const posenc::rope_cache<float, B> cache(f);
      const posenc::rope_cache<double, B> cache_d(f);
      auto w = cache.writer();
      auto wd = cache_d.writer();
      const std::size_t pairs = f.inv_freq.size();
      std::vector<float> c(pairs), s(pairs), c_ref(pairs), s_ref(pairs);
      std::vector<double> cd(pairs), sd(pairs), cd_ref(pairs), sd_ref(pairs);
      for (Index n : positions)
        for (auto role : {posenc::rope_role::query, posenc::rope_role::key}) {
          if (f.has_xpos() && n > 4096) continue;  // zeta^(n/512) overflows double far out
          w.row(n, role, c.data(), s.data());
          posenc::detail::rope_row(f, posenc::rope_precision::exact, n, role, c_ref.data(),
                                   s_ref.data());
          wd.row(n, role, cd.data(), sd.data());
          posenc::detail::rope_row(f, posenc::rope_precision::exact, n, role, cd_ref.data(),
                                   sd_ref.data());
          CHECK(cd == cd_ref);
          CHECK(sd == sd_ref);
          for (std::size_t i = 0; i < pairs; ++i) {
            INFO(B::name() << " pairs " << pairs << " n " << n << " i " << i
                           << (f.has_xpos() ? " xpos" : ""));
            double ce, se;
            emulate_angles(n, f.inv_freq[i], ce, se);
            const double scale =
                f.attention_factor * f.xpos_scale(static_cast<Index>(i), static_cast<double>(n),
                                                  role == posenc::rope_role::key);
            CHECK(c[i] == static_cast<float>(ce * scale));
            CHECK(s[i] == static_cast<float>(se * scale));
            // one float ulp of the value (the double error ~1e-15 + 1.2e-16 |n w| is far below)
            const float ulp_c = std::nextafter(std::abs(c_ref[i]), INFINITY) - std::abs(c_ref[i]);
            const float ulp_s = std::nextafter(std::abs(s_ref[i]), INFINITY) - std::abs(s_ref[i]);
            CHECK(std::abs(c[i] - c_ref[i]) <= ulp_c);
            CHECK(std::abs(s[i] - s_ref[i]) <= ulp_s);
          }
        }
    }
    // float rows: the double value rounded once, so libm's float row or its neighbour
    const posenc::rope_frequencies f = posenc::plain_rope_frequencies(128);
    posenc::rope_cache<float, B> cache(f, posenc::rope_precision::exact, 200);
    auto w = cache.writer();
    std::vector<float> c(64), s(64), c_ref(64), s_ref(64);
    int differ = 0;
    for (Index n = 0; n < 200'000; n += 997) {
      w.row(n, posenc::rope_role::query, c.data(), s.data());
      posenc::detail::rope_row(f, posenc::rope_precision::exact, n, posenc::rope_role::query,
                               c_ref.data(), s_ref.data());
      for (std::size_t i = 0; i < 64; ++i) {
        INFO(B::name() << " n " << n << " i " << i);
        CHECK(std::abs(c[i] - c_ref[i]) <= std::numeric_limits<float>::epsilon() * 0.5f);
        CHECK(std::abs(s[i] - s_ref[i]) <= std::numeric_limits<float>::epsilon() * 0.5f);
        differ += (c[i] != c_ref[i]) + (s[i] != s_ref[i]);
      }
    }
    CHECK(differ <
          200 * 128 / 20);  // rare: only where the two doubles straddle a rounding boundary
    // the cache's rows (filled in bulk, across coarse blocks) are the writer's rows
    for (Index n : {Index{0}, Index{63}, Index{64}, Index{150}, Index{199}}) {
      w.row(n, posenc::rope_role::query, c.data(), s.data());
      CHECK(std::memcmp(c.data(), cache.cos(n), 64 * sizeof(float)) == 0);
      CHECK(std::memcmp(s.data(), cache.sin(n), 64 * sizeof(float)) == 0);
    }
    // float32_reference keeps PyTorch's float arithmetic: libm rows on every backend
    posenc::rope_cache<float, B> ref32(f, posenc::rope_precision::float32_reference, 0);
    auto w32 = ref32.writer();
    w32.row(777'777, posenc::rope_role::query, c.data(), s.data());
    posenc::detail::rope_row(f, posenc::rope_precision::float32_reference, 777'777,
                             posenc::rope_role::query, c_ref.data(), s_ref.data());
    CHECK(c == c_ref);
    CHECK(s == s_ref);
  });
}

TEST_CASE("SIMD RoPE on the fly: rows computed per token equal the cached rows, any thread",
          "[backend][simd][rotary]") {
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (auto pairing : {posenc::rope_pairing::half, posenc::rope_pairing::interleaved}) {
      posenc::rope_options cached, fly;
      fly.cache = posenc::rope_cache_mode::on_the_fly;
      posenc::rotary_embedding<float, B> a(64, -1, 10000.0, pairing, cached);
      const posenc::rotary_embedding<float, B> b0(64, -1, 10000.0, pairing, fly);
      posenc::rotary_embedding<float, B> b = b0;  // copies share the fine table
      std::vector<float> x = posenc_test::random_values<float>(std::size_t{3 * 300 * 2 * 64}, 11),
                         y = x;
      a.apply(posenc::view_bshd(x.data(), 3, 300, 2, 64), Index{1000});
      b.apply(posenc::view_bshd(y.data(), 3, 300, 2, 64), Index{1000});
      INFO(B::name() << " " << posenc::to_string(pairing));
      CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
    }
  });
}

TEST_CASE("SIMD RoPE q and k in blocks of tokens: every token as if rotated alone",
          "[backend][simd][rotary]") {
  // rotary_embedding computes the rows of a block of tokens (detail::rope_row_block) before
  // rotating them, q's tokens then k's: the result must be each token's own rotation, for
  // rows from the cache, computed on the fly (xPos: distinct key rows), and both mixed in
  // one block (ids past the cache limit), over several blocks and a partial one
  const Index Bn = 2, L = 2 * posenc::detail::rope_row_block + 37, Hq = 3, Hk = 1, D = 64;
  posenc::rope_config xc;
  xc.head_dim = D;
  xc.scaling = posenc::rope_scaling_type::xpos;
  const posenc::rope_frequencies xpos = xc.frequencies();
  std::vector<Index> ids(static_cast<std::size_t>(Bn * L));
  std::mt19937 gen(5);
  std::uniform_int_distribution<Index> far(0, 1 << 20);
  for (auto& id : ids) id = far(gen) % 3 == 0 ? far(gen) : far(gen) % 100;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (auto pairing : {posenc::rope_pairing::half, posenc::rope_pairing::interleaved})
      for (bool with_xpos : {false, true})
        for (auto mode : {posenc::rope_cache_mode::cached, posenc::rope_cache_mode::on_the_fly}) {
          posenc::rope_options opt;
          opt.cache = mode;
          opt.cache_limit = 100;  // ids below come from the cache, the far ones do not
          const auto freqs = with_xpos ? xpos : posenc::plain_rope_frequencies(D);
          posenc::rotary_embedding<float, B> all(D, freqs, pairing, opt), one = all;
          auto q = posenc_test::random_values<float>(std::size_t(Bn * L * Hq * D), 21), q1 = q;
          auto k = posenc_test::random_values<float>(std::size_t(Bn * L * Hk * D), 22), k1 = k;
          all.apply_qk(posenc::view_bshd(q.data(), Bn, L, Hq, D),
                       posenc::view_bshd(k.data(), Bn, L, Hk, D), ids);
          for (Index b = 0; b < Bn; ++b)
            for (Index l = 0; l < L; ++l) {
              const Index id = ids[static_cast<std::size_t>(b * L + l)];
              one.apply_qk(posenc::view_bshd(q1.data() + (b * L + l) * Hq * D, 1, 1, Hq, D),
                           posenc::view_bshd(k1.data() + (b * L + l) * Hk * D, 1, 1, Hk, D), id);
            }
          INFO(B::name() << " " << posenc::to_string(pairing) << (with_xpos ? " xPos" : "")
                         << (mode == posenc::rope_cache_mode::cached ? " cached" : " on the fly"));
          CHECK(std::memcmp(q.data(), q1.data(), q.size() * sizeof(float)) == 0);
          CHECK(std::memcmp(k.data(), k1.data(), k.size() * sizeof(float)) == 0);
          CHECK(q != posenc_test::random_values<float>(q.size(), 21));  // something rotated
        }
  });
}

// ---- 16-bit storage (Eigen::half, Eigen::bfloat16) ------------------------------------------

namespace {

template <class T>
std::uint16_t bits16(T v) {
  std::uint16_t u;
  std::memcpy(&u, &v, 2);
  return u;
}
template <class T>
T from_bits16(std::uint16_t u) {
  T v;
  std::memcpy(static_cast<void*>(&v), &u, 2);
  return v;
}
std::uint32_t bits32(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
float from_bits32(std::uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// Spacing of T at |v| (v finite): the distance from |v| to the next T away from zero.
template <class T>
double ulp16(T v) {
  const std::uint16_t a = static_cast<std::uint16_t>(bits16(v) & 0x7fff);
  return static_cast<double>(
             static_cast<float>(from_bits16<T>(static_cast<std::uint16_t>(a + 1)))) -
         static_cast<double>(static_cast<float>(from_bits16<T>(a)));
}

// storage_io<T, Arch> against Eigen's scalar conversions: every 16-bit pattern widened, a
// set of float patterns (specials, ties, subnormals, overflow, random bits) narrowed, bit
// for bit; partial loads and stores of every length touch only their lanes.
template <class T, class Arch>
void check_storage_io() {
  using IO = posenc::simd::storage_io<T, Arch>;
  using P = typename IO::packet_type;
  constexpr int W = P::size;
  INFO(Arch::name() << (std::is_same_v<T, Eigen::half> ? " half" : " bfloat16"));
  // widening: all 65536 patterns, W at a time
  bool widen_ok = true;
  for (std::uint32_t base = 0; base < 65536; base += W) {
    T in[W];
    float out[W];
    for (int k = 0; k < W; ++k)
      in[k] = from_bits16<T>(static_cast<std::uint16_t>(base + static_cast<std::uint32_t>(k)));
    IO::load(in).store(out);
    for (int k = 0; k < W; ++k) {
      const float want = static_cast<float>(in[k]);
      widen_ok =
          widen_ok && (bits32(out[k]) == bits32(want) || (std::isnan(want) && std::isnan(out[k])));
    }
  }
  CHECK(widen_ok);
  // narrowing
  std::vector<float> f = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.996f,
                          65520.0f,
                          -65520.0f,
                          1e6f,
                          3.4e38f,
                          -3.4e38f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::signaling_NaN(),
                          from_bits32(0x7f800001u),
                          from_bits32(0xffc12345u),
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          1e-39f,
                          6e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          5.96e-8f,
                          6.1e-5f,
                          6.09e-5f,
                          from_bits32(0x3f808000u),
                          from_bits32(0x3f818000u),
                          from_bits32(0x3f808001u),  // bf16 ties
                          1.0f + std::ldexp(1.0f, -11),
                          1.0f + 3 * std::ldexp(1.0f, -11),  // half ties
                          from_bits32(0x7f7f8000u),
                          from_bits32(0x7f7fffffu)};  // bf16: max rounds to inf
  std::mt19937 gen(5);
  for (int i = 0; i < 20000; ++i) f.push_back(from_bits32(static_cast<std::uint32_t>(gen())));
  for (int i = 0; i < 20000; ++i)
    f.push_back(std::ldexp(static_cast<float>(gen() % 8192) / 8192.0f + 0.5f,
                           static_cast<int>(gen() % 60) - 40));
  while (f.size() % W != 0) f.push_back(0.5f);
  int narrow_bad = 0;
  for (std::size_t base = 0; base < f.size(); base += W) {
    T out[W];
    IO::store(out, P::load(f.data() + base));
    for (int k = 0; k < W; ++k) {
      const T want = static_cast<T>(f[base + static_cast<std::size_t>(k)]);
      if (bits16(out[k]) != bits16(want)) {
        if (narrow_bad++ < 5)
          FAIL_CHECK("narrowing " << f[base + static_cast<std::size_t>(k)] << " (bits " << std::hex
                                  << bits32(f[base + static_cast<std::size_t>(k)]) << "): got "
                                  << bits16(out[k]) << ", Eigen " << bits16(want) << std::dec);
      }
    }
  }
  CHECK(narrow_bad == 0);
  // partial loads and stores: lanes [0, n) only, zeros beyond, guards untouched
  for (int n = 0; n <= W; ++n) {
    T src[W + 2], dst[W + 2];
    for (int k = 0; k < W + 2; ++k) {
      src[k] = T(static_cast<float>(k + 1));
      dst[k] = T(-7.0f);
    }
    float lanes[W];
    IO::load_partial(src + 1, n).store(lanes);
    bool ok = true;
    for (int k = 0; k < W; ++k) ok = ok && lanes[k] == (k < n ? static_cast<float>(k + 2) : 0.0f);
    IO::store_partial(dst + 1, IO::load(src + 1), n);
    for (int k = 0; k < W + 2; ++k)
      ok = ok &&
           static_cast<float>(dst[k]) == (k >= 1 && k <= n ? static_cast<float>(k + 1) : -7.0f);
    INFO("partial n = " << n);
    CHECK(ok);
  }
}

// One token of 16-bit storage T, float cos/sin: backend B bit for bit against the fused
// float model rounded once to T; the scalar kernel's T(unfused float) within its float bound
// plus one spacing of T at the result.
template <class T, class B>
void compare_token_lowp(const rope_case& rc, Index hs, Index ds, bool in_place, bool inverse) {
  const Index pairs = rc.rotary_dim / 2;
  const std::size_t n = static_cast<std::size_t>(rc.heads * hs * ds + 5);
  auto to_t = [](const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t k = 0; k < v.size(); ++k) out[k] = T(v[k]);
    return out;
  };
  auto to_f = [](const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (std::size_t k = 0; k < v.size(); ++k) out[k] = static_cast<float>(v[k]);
    return out;
  };
  const std::vector<T> x0 = to_t(posenc_test::random_values<float>(n, 21));
  const std::vector<float> cs =
      posenc_test::random_values<float>(static_cast<std::size_t>(2 * pairs), 22);
  const std::vector<T> y0 = to_t(posenc_test::random_values<float>(n, 23));
  std::vector<T> xa = x0, xb = x0, ya = y0, yb = y0;
  std::vector<float> xf = to_f(x0), yf = to_f(y0);

  auto token = [&](auto& x, auto& y) {
    return make_token(rc, hs, ds, in_place, inverse, x.data(), y.data(), cs.data());
  };
  posenc::kernels::rope_rotate(B{}, token(xa, ya));
  posenc::kernels::rope_rotate(be::scalar{}, token(xb, yb));
  // a call that streams from memory walks the heads in another order: the same bits
  std::vector<T> xs = x0, ys = y0;
  auto streaming = token(xs, ys);
  streaming.streaming = true;
  posenc::kernels::rope_rotate(B{}, streaming);
  INFO(B::name() << (std::is_same_v<T, Eigen::half> ? " half" : " bfloat16")
                 << (rc.interleaved ? " interleaved" : " half pairing") << " D " << rc.head_dim
                 << " r " << rc.rotary_dim << " H " << rc.heads << " head stride " << hs
                 << " dim stride " << ds << (in_place ? " in place" : " out of place")
                 << (inverse ? " inverse" : ""));
  const std::vector<T>& got = in_place ? xa : ya;
  const std::vector<T>& scal = in_place ? xb : yb;
  // contiguous or strided dims (gathered by the kernel): the packet kernel, its fused
  // float arithmetic rounded once to T
  fused_rope(token(xf, yf));
  const std::vector<T> want = to_t(in_place ? xf : yf);
  CHECK(std::memcmp(got.data(), want.data(), n * sizeof(T)) == 0);
  CHECK(std::memcmp(xs.data(), xa.data(), n * sizeof(T)) == 0);
  CHECK(std::memcmp(ys.data(), ya.data(), n * sizeof(T)) == 0);
  // against the scalar kernel: the float bound (3 eps, values in [-1, 1)) plus one spacing of
  // T at the larger of the two results
  const double feps = static_cast<double>(std::numeric_limits<float>::epsilon());
  bool within = true;
  for (std::size_t k = 0; k < n; ++k) {
    const double a = static_cast<double>(static_cast<float>(got[k]));
    const double b = static_cast<double>(static_cast<float>(scal[k]));
    const double spacing = std::max(ulp16(got[k]), ulp16(scal[k]));
    within = within && std::abs(a - b) <= 3 * feps + spacing;
  }
  CHECK(within);
  // the untouched parts kept their bits: in place the tail and the gaps, out of place the gaps
  bool kept = true;
  for (std::size_t k = 0; k < n; ++k) {
    const Index h = static_cast<Index>(k) / (hs * ds), rem = static_cast<Index>(k) % (hs * ds);
    const bool rotated =
        h < rc.heads && rem % ds == 0 && rem / ds < (in_place ? rc.rotary_dim : rc.head_dim);
    if (!rotated) kept = kept && bits16(got[k]) == bits16((in_place ? x0 : y0)[k]);
  }
  CHECK(kept);
  CHECK(std::memcmp(got.data(), (in_place ? x0 : y0).data(), n * sizeof(T)) != 0);
}

}  // namespace

TEST_CASE("SIMD 16-bit storage loads and stores convert like Eigen, bit for bit",
          "[backend][simd][lowp]") {
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    if constexpr (posenc::simd::has_storage_io_v<Eigen::bfloat16, B>) {
      check_storage_io<Eigen::bfloat16, B>();
      ++tested;
    }
    if constexpr (posenc::simd::has_storage_io_v<Eigen::half, B>) {
      check_storage_io<Eigen::half, B>();
      ++tested;
    }
  });
  // both types on every SIMD backend (x86-64-v3 and v4 have F16C)
  CHECK(tested == 2 * (POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON));
#ifdef POSENC_TEST_EXPECT_NATIVE_BF16
  // CI's bf16 build: the narrowing checked above is vcvtneps2bf16's, not the bit path's
  CHECK(POSENC_NATIVE_BF16 == POSENC_TEST_EXPECT_NATIVE_BF16);
#endif
}

// simd::dot_axpy_rows (MHA decode one head at a time: a run of key rows beside a run of
// value rows, rows ldk and ldv values apart, each run in a heap block of exactly the values
// it spans): the bits of dot_axpy key by key, scores and output row alike, for 0-5 keys.
template <class T, class B>
void check_dot_axpy_rows(Index n) {
  INFO("dot_axpy_rows, n = " << n);
  const Index ldk = n + 3, ldv = n + 5;
  for (int keys = 0; keys <= 5; ++keys) {
    INFO("keys " << keys);
    const auto span = [&](Index ld) {
      return static_cast<std::size_t>(keys > 0 ? (keys - 1) * ld + n : 0);
    };
    const std::vector<float> kf = posenc_test::random_values<float>(span(ldk), 90 + keys),
                             vf = posenc_test::random_values<float>(span(ldv), 91 + keys);
    const std::vector<T> k(kf.begin(), kf.end()), v(vf.begin(), vf.end());
    const std::vector<float> a = posenc_test::random_values<float>(static_cast<std::size_t>(n), 92),
                             y0 =
                                 posenc_test::random_values<float>(static_cast<std::size_t>(n), 93);
    std::vector<float> alpha =
        posenc_test::random_values<float>(static_cast<std::size_t>(keys), 94);
    for (const Index ahead : {Index(0), Index(2048)}) {
      std::vector<float> y = y0, y_want = y0, out(static_cast<std::size_t>(keys), 0.0f),
                         out_want(static_cast<std::size_t>(keys), 0.0f);
      posenc::simd::dot_axpy_rows<B>(a.data(), k.data(), ldk, alpha.data(), v.data(), ldv, keys, n,
                                     y.data(), out.data(), ahead);
      for (int c = 0; c < keys; ++c)
        out_want[static_cast<std::size_t>(c)] = posenc::simd::dot_axpy<B>(
            a.data(), k.data() + c * ldk, n, alpha[static_cast<std::size_t>(c)], v.data() + c * ldv,
            y_want.data(), ahead);
      bool same = true;
      for (std::size_t c = 0; c < out.size(); ++c)
        same = same && bits32(out[c]) == bits32(out_want[c]);
      for (std::size_t i = 0; i < y.size(); ++i) same = same && bits32(y[i]) == bits32(y_want[i]);
      CHECK(same);
      if (keys == 0) CHECK(y == y0);
    }
  }
}

// simd::dot_group_rows / axpy_group_rows (one query's GQA group, each row read whole, one
// at a time): the bits of dot_block and axpy key by key and row by row, for m rows of a
// group (2-4 in registers on AVX-512 with n = 4 or 8 packets; other m, n and backends
// dot_block and axpy), 0-9 keys (and 40: past a block of 16) (partial fours), rows ld values apart,
// each run of rows in a heap block of exactly the values it spans (ASan).
template <class T, class B>
void check_group_rows(Index n) {
  INFO("dot_group_rows / axpy_group_rows, n = " << n);
  const Index ld = n + 16;
  for (int m = 1; m <= 5; ++m)
    for (const int keys : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 40}) {
      INFO("rows " << m << ", keys " << keys);
      const std::size_t span = static_cast<std::size_t>(keys > 0 ? (keys - 1) * ld + n : 0);
      const std::vector<float> bf = posenc_test::random_values<float>(span, 95 + keys);
      const std::vector<T> b(bf.begin(), bf.end());
      std::vector<std::vector<float>> a, p, y, s, y_want;
      for (int i = 0; i < m; ++i) {
        a.push_back(posenc_test::random_values<float>(static_cast<std::size_t>(n), 96 + i));
        p.push_back(posenc_test::random_values<float>(static_cast<std::size_t>(keys), 97 + i));
        y.push_back(posenc_test::random_values<float>(static_cast<std::size_t>(n), 98 + i));
        s.emplace_back(static_cast<std::size_t>(keys), 0.0f);
      }
      y_want = y;
      std::vector<const float*> ap, pp;
      std::vector<float*> yp, sp;
      for (int i = 0; i < m; ++i) {
        ap.push_back(a[static_cast<std::size_t>(i)].data());
        pp.push_back(p[static_cast<std::size_t>(i)].data());
        yp.push_back(y[static_cast<std::size_t>(i)].data());
        sp.push_back(s[static_cast<std::size_t>(i)].data());
      }
      posenc::simd::dot_group_rows<B>(ap.data(), m, b.data(), ld, keys, n, sp.data());
      posenc::simd::axpy_group_rows<B>(b.data(), ld, keys, pp.data(), m, yp.data(), n);
      bool same = true;
      for (int c = 0; c < keys; ++c)
        for (std::size_t i = 0; i < static_cast<std::size_t>(m); ++i) {
          const float* ai = a[i].data();
          float want = 0.0f;
          float* wp = &want;
          posenc::simd::dot_block<B>(&ai, 1, b.data() + c * ld, ld, 1, n, &wp);
          same = same && bits32(s[i][static_cast<std::size_t>(c)]) == bits32(want);
          posenc::simd::axpy<B>(p[i][static_cast<std::size_t>(c)], b.data() + c * ld, n,
                                y_want[i].data());
        }
      for (std::size_t i = 0; i < static_cast<std::size_t>(m); ++i)
        for (std::size_t v = 0; v < static_cast<std::size_t>(n); ++v)
          same = same && bits32(y[i][v]) == bits32(y_want[i][v]);
      CHECK(same);
    }
}

// simd::dot / dot_block (and dot_block_many, dot_block_runs) / axpy / dot_axpy
// (decode's row kernels) on storage T: the float result of the widened values bit for
// bit, a double computation within the float bound,
// a key's dot the same alone as in any block, one fused multiply-add per value, and (each
// operand in a heap block of exactly the values it spans, so ASan sees any access past
// it) every length from 0 to 5 packets + 3.
template <class T, class B>
void check_widening_ops(const char* type) {
  using posenc::simd::axpy;
  using posenc::simd::dot_block;
  constexpr int W = posenc::simd::packet<float, B>::size;
  INFO(B::name() << " " << type);
  for (Index n = 0; n <= 5 * W + 3; ++n) {
    INFO("n = " << n);
    const auto size = static_cast<std::size_t>(n);
    const std::vector<float> x0 = posenc_test::random_values<float>(size, 4);
    const std::vector<T> x(x0.begin(), x0.end());
    const std::vector<float> xw(x.begin(), x.end());  // x widened

    // dot: one row against one row (MHA decode with one query)
    {
      const std::vector<float> a = posenc_test::random_values<float>(size, 3);
      const float got = posenc::simd::dot<B>(a.data(), x.data(), n);
      CHECK(bits32(got) == bits32(posenc::simd::dot<B>(a.data(), xw.data(), n)));
      double want = 0, mag = 0;
      for (std::size_t i = 0; i < size; ++i) {
        want += double(a[i]) * double(xw[i]);
        mag += std::abs(double(a[i]) * double(xw[i]));
      }
      CHECK(std::abs(double(got) - want) <= double(n + 1) * 0x1p-24 * mag);
    }

    // dot_block: m query rows against `keys` key rows ldb apart (ldb > n: gaps between
    // rows), the rows in one block of exactly (keys - 1) ldb + n values
    for (int keys : {1, 2, W - 1, W}) {
      if (keys < 1) continue;
      const Index ldb = n + 3;
      const auto span = static_cast<std::size_t>((keys - 1) * ldb + n);
      const std::vector<float> kf = posenc_test::random_values<float>(span, 20 + keys);
      const std::vector<T> kt(kf.begin(), kf.end());
      const std::vector<float> kw(kt.begin(), kt.end());  // widened
      // dot_block_many (several queries of a GQA group): the same bits as dot_block, for
      // whole tiles of four rows and the rows left over
      for (int m : {1, 2, 3, 4, 5, 8, 9, 13}) {
        INFO("keys " << keys << ", rows " << m);
        std::vector<std::vector<float>> qs, got(static_cast<std::size_t>(m)),
            got_w(static_cast<std::size_t>(m)), got_many(static_cast<std::size_t>(m));
        std::vector<const float*> qp;
        std::vector<float*> op, opw, opm;
        for (int r = 0; r < m; ++r) {
          qs.push_back(posenc_test::random_values<float>(size, 10 + r));
          qp.push_back(qs.back().data());
          const auto ur = static_cast<std::size_t>(r), uk = static_cast<std::size_t>(keys);
          got[ur].assign(uk, 0.0f);
          got_w[ur].assign(uk, 0.0f);
          got_many[ur].assign(uk, 0.0f);
          op.push_back(got[ur].data());
          opw.push_back(got_w[ur].data());
          opm.push_back(got_many[ur].data());
        }
        dot_block<B>(qp.data(), m, kt.data(), ldb, keys, n, op.data());
        dot_block<B>(qp.data(), m, kw.data(), ldb, keys, n, opw.data());
        posenc::simd::dot_block_many<B>(qp.data(), m, kt.data(), ldb, keys, n, opm.data());
        bool same = true, alone = true, close = true, many = true;
        for (int r = 0; r < m; ++r)
          for (int c = 0; c < keys; ++c) {
            const float v = got[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)];
            many = many &&
                   bits32(v) ==
                       bits32(got_many[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)]);
            same =
                same && bits32(v) ==
                            bits32(got_w[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)]);
            // the same key alone, read from a copy of its row
            const std::vector<T> row(kt.begin() + c * ldb, kt.begin() + c * ldb + n);
            float one = 0;
            float* o = &one;
            dot_block<B>(&qp[static_cast<std::size_t>(r)], 1, row.data(), 0, 1, n, &o);
            alone = alone && bits32(one) == bits32(v);
            double want = 0, mag = 0;
            for (std::size_t i = 0; i < size; ++i) {
              const double p = double(qs[static_cast<std::size_t>(r)][i]) *
                               double(kw[static_cast<std::size_t>(c * ldb) + i]);
              want += p;
              mag += std::abs(p);
            }
            close = close && std::abs(double(v) - want) <= double(n + W) * 0x1p-24 * mag;
          }
        CHECK(same);
        CHECK(alone);
        CHECK(close);
        CHECK(many);
        // dot_block_runs (AVX2: 2 runs, AVX-512: 4; rows a multiple of four): the block's
        // keys as R runs of W / R, first back to back (dot_block's keys, its bits), then
        // `gap` rows apart in a larger block (each run's keys the bits of dot_block over
        // that run), the scores at the same offsets, nothing written between the runs
        constexpr int R = posenc::simd::dot_runs_v<B>;
        if constexpr (R > 0)
          if (keys == W && m % 4 == 0) {
            constexpr int run = W / R;
            std::vector<std::vector<float>> back(static_cast<std::size_t>(m));
            std::vector<float*> pb;
            for (auto& row : back) {
              row.assign(static_cast<std::size_t>(W), 0.0f);
              pb.push_back(row.data());
            }
            posenc::simd::dot_block_runs<B>(qp.data(), m, kt.data(), ldb, run, n, pb.data());
            bool runs = true;
            for (std::size_t r = 0; r < static_cast<std::size_t>(m); ++r)
              for (std::size_t c = 0; c < static_cast<std::size_t>(W); ++c)
                runs = runs && bits32(back[r][c]) == bits32(got[r][c]);
            CHECK(runs);
            // with a step hook (decode's value prefetches beside the keys): once before
            // each of the kernel's steps over the packets (run keys x packets a row), in
            // order, during the first four rows' work only; the same bits
            std::vector<std::vector<float>> hooked = back;
            std::vector<float*> ph;
            for (auto& row : hooked) {
              std::fill(row.begin(), row.end(), 0.0f);
              ph.push_back(row.data());
            }
            std::vector<std::pair<int, int>> seen, want;
            posenc::simd::dot_block_runs<B>(
                qp.data(), m, kt.data(), ldb, run, n, ph.data(),
                [&](int step, int steps) noexcept { seen.emplace_back(step, steps); });
            const int steps = run * static_cast<int>((n + W - 1) / W);
            for (int st = 0; st < steps; ++st) want.emplace_back(st, steps);
            CHECK(seen == want);
            CHECK(hooked == back);
            const Index gap = run + 5;  // rows from one run's first key to the next's
            const auto rows_far = static_cast<std::size_t>((R - 1) * gap + run);
            const std::vector<float> ff = posenc_test::random_values<float>(
                (rows_far - 1) * static_cast<std::size_t>(ldb) + size, 40);
            const std::vector<T> far(ff.begin(), ff.end());
            const float unset = -1234.5f;
            std::vector<std::vector<float>> spread(static_cast<std::size_t>(m));
            std::vector<float*> ps;
            for (auto& row : spread) {
              row.assign(rows_far, unset);
              ps.push_back(row.data());
            }
            posenc::simd::dot_block_runs<B>(qp.data(), m, far.data(), ldb, gap, n, ps.data());
            bool spread_ok = true;
            for (int r = 0; r < R; ++r) {
              std::vector<std::vector<float>> one(
                  static_cast<std::size_t>(m), std::vector<float>(static_cast<std::size_t>(run)));
              std::vector<float*> po;
              for (auto& row : one) po.push_back(row.data());
              dot_block<B>(qp.data(), m, far.data() + r * gap * ldb, ldb, run, n, po.data());
              for (std::size_t i = 0; i < static_cast<std::size_t>(m); ++i)
                for (int c = 0; c < run; ++c)
                  spread_ok =
                      spread_ok && bits32(spread[i][static_cast<std::size_t>(r * gap + c)]) ==
                                       bits32(one[i][static_cast<std::size_t>(c)]);
            }
            for (std::size_t i = 0; i < static_cast<std::size_t>(m); ++i)
              for (std::size_t c = 0; c < rows_far; ++c)
                if (static_cast<Index>(c) % gap >= run)
                  spread_ok = spread_ok && spread[i][c] == unset;
            CHECK(spread_ok);
          }
      }
    }

    const std::vector<float> y0 = posenc_test::random_values<float>(size, 5);
    std::vector<float> y = y0, yw = y0;
    axpy<B>(0.75f, x.data(), n, y.data());
    axpy<B>(0.75f, xw.data(), n, yw.data());
    bool same = true, fused = true;
    for (std::size_t i = 0; i < size; ++i) {
      same = same && bits32(y[i]) == bits32(yw[i]);
      fused = fused && y[i] == std::fma(0.75f, xw[i], y0[i]);
    }
    CHECK(same);
    CHECK(fused);

    // dot_axpy (MHA decode: a key row's dot beside another key's value row): the bits of
    // dot and then axpy, each row in a block of exactly n values, with or without the rows
    // asked for ahead (1 KiB: token-major; 2 KiB: Zen 5's head-major tuning)
    for (const posenc::Index ahead : {0, 1024, 2048}) {
      INFO("ahead " << ahead);
      const std::vector<float> a = posenc_test::random_values<float>(size, 6);
      const std::vector<float> v0 = posenc_test::random_values<float>(size, 7);
      const std::vector<T> v(v0.begin(), v0.end());
      std::vector<float> y_fused = y0, y_apart = y0;
      const float s =
          posenc::simd::dot_axpy<B>(a.data(), x.data(), n, -1.25f, v.data(), y_fused.data(), ahead);
      CHECK(bits32(s) == bits32(posenc::simd::dot<B>(a.data(), x.data(), n)));
      axpy<B>(-1.25f, v.data(), n, y_apart.data());
      bool same_y = true;
      for (std::size_t i = 0; i < size; ++i)
        same_y = same_y && bits32(y_fused[i]) == bits32(y_apart[i]);
      CHECK(same_y);
    }
    check_dot_axpy_rows<T, B>(n);

    // axpy_rows and axpy_rows_many (a GQA group's rows against shared value rows): the
    // bits of the one-row calls, for every row count up to 13 (fours and the remainder)
    // and blocks of up to 5 value rows, or 16 (decode's whole block)
    for (int m = 1; m <= 13; ++m) {
      const int keys = m % 3 == 0 ? 16 : 1 + m % 5;
      std::vector<std::vector<T>> xs;
      std::vector<const T*> xp;
      for (int c = 0; c < keys; ++c) {
        const std::vector<float> f = posenc_test::random_values<float>(size, 30 + c);
        xs.emplace_back(f.begin(), f.end());
      }
      for (const auto& r : xs) xp.push_back(r.data());
      std::vector<std::vector<float>> probs, ys, want_y;
      std::vector<const float*> pp;
      std::vector<float*> yp;
      for (int r = 0; r < m; ++r) {
        probs.push_back(posenc_test::random_values<float>(static_cast<std::size_t>(keys), 50 + r));
        ys.push_back(posenc_test::random_values<float>(size, 70 + r));
      }
      want_y = ys;
      for (int r = 0; r < m; ++r) {
        pp.push_back(probs[static_cast<std::size_t>(r)].data());
        yp.push_back(ys[static_cast<std::size_t>(r)].data());
      }
      std::vector<std::vector<float>> ys_many = ys, ys_hook = ys;
      const std::vector<std::vector<float>> ys_start = ys;
      std::vector<float*> ypm, yph;
      for (auto& r : ys_many) ypm.push_back(r.data());
      for (auto& r : ys_hook) yph.push_back(r.data());
      posenc::simd::axpy_rows<B>(xp.data(), keys, pp.data(), m, yp.data(), n);
      posenc::simd::axpy_rows_many<B>(xp.data(), keys, pp.data(), m, ypm.data(), n);
      // with a step hook (decode's value prefetches): called once per pass of the first
      // four rows over the value rows, in order, each before its pass (row 0's values of
      // that pass not yet added to, some of the pass before's added); 1 call where no four
      // rows go together; the same bits
      constexpr Index pass = (posenc::simd::packet<float, B>::registers >= 32 ? 4 : 2) * W;
      const bool passes = m >= 4 && n >= pass;
      const int want_steps = passes ? static_cast<int>((n + pass - 1) / pass) : 1;
      std::vector<std::pair<int, int>> steps_seen;
      bool before_pass = true, after_pass = true;
      const auto row0_changed = [&](Index i) {
        return bits32(ys_hook[0][static_cast<std::size_t>(i)]) !=
               bits32(ys_start[0][static_cast<std::size_t>(i)]);
      };
      posenc::simd::axpy_rows_many<B>(
          xp.data(), keys, pp.data(), m, yph.data(), n, [&](int step, int steps) noexcept {
            steps_seen.emplace_back(step, steps);
            if (!passes) return;
            const Index lo = step * pass, hi = std::min<Index>(n, lo + pass);
            for (Index i = lo; i < hi; ++i) before_pass = before_pass && !row0_changed(i);
            bool any = step == 0;
            for (Index i = lo - pass; i < lo && step > 0; ++i) any = any || row0_changed(i);
            after_pass = after_pass && any;
          });
      std::vector<std::pair<int, int>> want_seen;
      for (int st = 0; st < want_steps; ++st) want_seen.emplace_back(st, want_steps);
      CHECK(steps_seen == want_seen);
      CHECK(before_pass);
      CHECK(after_pass);
      CHECK(ys_hook == ys_many);
      for (int c = 0; c < keys; ++c)  // key-major, as decode visited them one by one
        for (int r = 0; r < m; ++r)
          axpy<B>(probs[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)],
                  xs[static_cast<std::size_t>(c)].data(), n,
                  want_y[static_cast<std::size_t>(r)].data());
      bool block_same = true, many_same = true;
      for (int r = 0; r < m; ++r)
        for (std::size_t i = 0; i < size; ++i) {
          const auto want = bits32(want_y[static_cast<std::size_t>(r)][i]);
          block_same = block_same && bits32(ys[static_cast<std::size_t>(r)][i]) == want;
          many_same = many_same && bits32(ys_many[static_cast<std::size_t>(r)][i]) == want;
        }
      INFO("rows " << m << ", keys " << keys);
      CHECK(block_same);
      CHECK(many_same);
    }
  }
  // dot_axpy_rows' registers hold 4 or 8 packets (d 64 and 128 on AVX-512), past the lengths above
  check_dot_axpy_rows<T, B>(8 * W);
  check_dot_axpy_rows<T, B>(16 * W);
  // the group kernels' rows of 64 and 128 values, and a length they do not take
  for (const Index n : {Index(64), Index(128), Index(72)}) check_group_rows<T, B>(n);
}

TEST_CASE("SIMD widening dot and axpy: 16-bit rows give the float result of their values",
          "[backend][simd][lowp]") {
  using posenc::simd::has_widening_ops_v;
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    check_widening_ops<float, B>("float");
    if constexpr (has_widening_ops_v<B, Eigen::bfloat16>) {
      check_widening_ops<Eigen::bfloat16, B>("bfloat16");
      ++tested;
    }
    if constexpr (has_widening_ops_v<B, Eigen::half>) {
      check_widening_ops<Eigen::half, B>("half");
      ++tested;
    }
  });
  CHECK(tested == 2 * (POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON));
  // No packets, no widening ops: the scalar tag's decode keeps Eigen's float kernels.
  static_assert(!has_widening_ops_v<posenc::backend::scalar, float>);
}

TEST_CASE("SIMD RoPE rotation, 16-bit storage: fused float model rounded once, scalar within bound",
          "[backend][simd][rotary][lowp]") {
  const rope_case cases[] = {{128, 128, 4, false}, {128, 128, 3, true}, {128, 32, 2, false},
                             {128, 32, 2, true},   {72, 72, 3, false},  {72, 72, 3, true},
                             {10, 6, 3, false},    {10, 6, 3, true},    {34, 34, 1, false},
                             {34, 34, 1, true},    {2, 2, 5, true},     {1030, 1030, 2, true},
                             {64, 64, 2, true},    {16, 16, 3, true},   {40, 16, 3, true}};
  int tested = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (const auto& rc : cases)
      for (bool in_place : {true, false})
        for (bool inverse : {false, true}) {
          compare_token_lowp<Eigen::half, B>(rc, rc.head_dim, 1, in_place, inverse);
          compare_token_lowp<Eigen::bfloat16, B>(rc, rc.head_dim, 1, in_place, inverse);
          compare_token_lowp<Eigen::bfloat16, B>(rc, rc.head_dim + 3, 1, in_place, inverse);
          compare_token_lowp<Eigen::half, B>(rc, rc.head_dim, 2, in_place, inverse);
        }
    ++tested;
  });
  CHECK(tested == POSENC_ARCH_AVX2 + POSENC_ARCH_AVX512 + POSENC_ARCH_NEON);
}

TEST_CASE(
    "rotary_embedding with 16-bit storage: SIMD backend within the bound of the scalar backend",
    "[backend][simd][rotary][lowp]") {
  // the entry point dispatches 16-bit tokens to the packet kernel on every SIMD backend:
  // equal to T(float SIMD result), and within 3 eps + one spacing of T of the scalar backend
  const Index Bn = 2, L = 5, H = 3, D = 80;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    auto run = [&](auto type_tag) {
      using T = decltype(type_tag);
      for (auto pairing : {posenc::rope_pairing::half, posenc::rope_pairing::interleaved})
        for (Index r : {Index{80}, Index{40}}) {
          posenc::rotary_embedding<T, B> fast(D, r, 10000.0, pairing);
          posenc::rotary_embedding<T, be::scalar> ref(D, r, 10000.0, pairing);
          posenc::rotary_embedding<float, B> fast32(D, r, 10000.0, pairing);
          const std::vector<float> v =
              posenc_test::random_values<float>(static_cast<std::size_t>(Bn * L * H * D), 3);
          std::vector<T> a(v.size()), b(v.size());
          for (std::size_t k = 0; k < v.size(); ++k) a[k] = b[k] = T(v[k]);
          std::vector<float> c(v.size());
          for (std::size_t k = 0; k < v.size(); ++k) c[k] = static_cast<float>(a[k]);
          fast.apply(posenc::view_bshd(a.data(), Bn, L, H, D), Index{1000});
          ref.apply(posenc::view_bshd(b.data(), Bn, L, H, D), Index{1000});
          fast32.apply(posenc::view_bshd(c.data(), Bn, L, H, D), Index{1000});
          INFO(B::name() << (std::is_same_v<T, Eigen::half> ? " half" : " bfloat16") << " "
                         << posenc::to_string(pairing) << " r " << r);
          bool exact = true, within = true;
          int differ = 0;
          for (std::size_t k = 0; k < v.size(); ++k) {
            exact = exact && bits16(a[k]) == bits16(T(c[k]));
            const double d = std::abs(static_cast<double>(static_cast<float>(a[k])) -
                                      static_cast<double>(static_cast<float>(b[k])));
            within = within && d <= 3 * static_cast<double>(std::numeric_limits<float>::epsilon()) +
                                        std::max(ulp16(a[k]), ulp16(b[k]));
            differ += bits16(a[k]) != bits16(b[k]);
          }
          CHECK(exact);
          CHECK(within);
          INFO("elements differing from the scalar backend: " << differ << " of " << v.size());
          CHECK(differ * 20 <
                static_cast<int>(v.size()));  // rare: only near a rounding boundary of T
        }
    };
    run(Eigen::half{});
    run(Eigen::bfloat16{});
  });
}
