// RoPE with 16-bit storage (Eigen::half, Eigen::bfloat16; float maths). On every entry point
// and layout, cached and on the fly, the result is T(the float rotation of the widened
// input) bit for bit, on the scalar backend and on the default (SIMD) backend, each against
// rotary_embedding<float> of the same backend; the float64 goldens within T's precision;
// conversions at the edges (half overflow, NaN, inf, subnormals, round-to-nearest-even
// ties); the error messages.

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "test_rotary_support.hpp"

using posenc::Index;
using posenc::rope_pairing;
using posenc::rotary_embedding;
using namespace posenc_test;
namespace be = posenc::backend;

namespace {

template <class T>
const char* type_name() {
  return std::is_same_v<T, Eigen::half> ? "half" : "bfloat16";
}

/// Calls f(tag) for the scalar backend and, when it differs, the default backend.
template <class F>
void for_scalar_and_default(F&& f) {
  f(be::scalar{});
  if constexpr (!std::is_same_v<posenc::default_backend, be::scalar>) f(posenc::default_backend{});
}

template <class T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

/// Each value rounded by Eigen's own conversion T(float).
template <class T>
std::vector<T> narrow(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// A RoPE configuration of the property test.
struct lowp_case {
  Index head_dim, rotary_dim;
  bool xpos;
};

posenc::rope_config make_config(const lowp_case& c, rope_pairing pairing) {
  posenc::rope_config cfg;
  cfg.head_dim = c.head_dim;
  cfg.rotary_dim = c.rotary_dim;
  cfg.pairing = pairing;
  if (c.xpos) {
    cfg.scaling = posenc::rope_scaling_type::xpos;
    cfg.xpos_scale_base = 512;
  }
  return cfg;
}

/// Runs op(rope, x, y) with rotary_embedding<T, B> on an n-value T buffer x (and an output
/// buffer y), and with rotary_embedding<float, B> on the widened copies: every T value must
/// be the float value rounded by Eigen's T(float), bit for bit (in place: x; out of place:
/// y, whose untouched values must stay as they were).
template <class T, class B, class Op>
void check_against_float(const posenc::rope_config& cfg, posenc::rope_options opt, std::size_t n,
                         unsigned seed, Op op) {
  rotary_embedding<T, B> lowp(cfg, 0, opt);
  rotary_embedding<float, B> ref(cfg, 0, opt);
  const std::vector<T> x0 = narrow<T>(random_buffer<float>(n, seed));
  const std::vector<T> y0(n, T(0.25f));
  std::vector<T> xt = x0, yt = y0;
  std::vector<float> xf = widen(x0), yf = widen(y0);
  op(lowp, xt.data(), yt.data());
  op(ref, xf.data(), yf.data());
  CHECK(same_bits(xt, narrow<T>(xf)));
  CHECK(same_bits(yt, narrow<T>(yf)));
  // the call did rotate something
  CHECK((!same_bits(xt, x0) || !same_bits(yt, y0)));
}

/// The largest ||a_i - b_i|| / ||b_i|| over rows, a plain loop in double (no Eigen
/// reductions: GCC 12 warns inside its AVX-512 ones, see scripts/ci_matrix.sh).
template <class T>
double worst_row_error(const rmat<T>& a, const rmat<double>& b) {
  double worst = 0;
  for (Index i = 0; i < a.rows(); ++i) {
    double num = 0, den = 0;
    for (Index j = 0; j < a.cols(); ++j) {
      const double d = static_cast<double>(static_cast<float>(a(i, j))) - b(i, j);
      num += d * d;
      den += b(i, j) * b(i, j);
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

}  // namespace

TEST_CASE("rotary 16-bit storage: T(float rotation of the widened input) on every entry point",
          "[rotary][lowp]") {
  static_assert(std::is_same_v<rotary_embedding<Eigen::half>::real_type, float>);
  static_assert(std::is_same_v<rotary_embedding<Eigen::bfloat16>::real_type, float>);
  static_assert(std::is_same_v<rotary_embedding<float>::real_type, float>);
  static_assert(std::is_same_v<rotary_embedding<double>::real_type, double>);

  constexpr Index Bn = 2, L = 5, H = 3, Hk = 2;
  // full rotary; partial rotary with packet tails (36: 18 pairs, 4 + 4 + 2 interleaved
  // chunks of 8); xPos (queries and keys scaled differently)
  const lowp_case cases[] = {{64, 64, false}, {72, 36, false}, {48, 48, true}};
  auto run_type = [&](auto type_tag) {
    using T = decltype(type_tag);
    for_scalar_and_default([&](auto backend_tag) {
      using B = decltype(backend_tag);
      for (const auto& c : cases)
        for (auto pairing : {rope_pairing::half, rope_pairing::interleaved})
          for (auto mode : {posenc::rope_cache_mode::cached, posenc::rope_cache_mode::on_the_fly}) {
            INFO(type_name<T>() << " " << B::name() << " D " << c.head_dim << " r " << c.rotary_dim
                                << (c.xpos ? " xpos " : " ") << posenc::to_string(pairing)
                                << (mode == posenc::rope_cache_mode::cached ? " cached"
                                                                            : " on the fly"));
            const posenc::rope_config cfg = make_config(c, pairing);
            posenc::rope_options opt;
            opt.cache = mode;
            const Index D = c.head_dim;
            const auto one = static_cast<std::size_t>(L * D);
            const auto all = static_cast<std::size_t>(Bn * L * H * D);
            std::vector<Index> ids(static_cast<std::size_t>(Bn * L));
            for (Index i = 0; i < Bn * L; ++i) ids[static_cast<std::size_t>(i)] = (i * 37) % 101;
            const std::vector<Index> seq_ids(ids.begin(), ids.begin() + L);

            {  // one head [L, D]: Eigen in place, out of place, rotated, invert, column-major,
               // expressions
              check_against_float<T, B>(cfg, opt, one, 1, [&](auto& rope, auto* x, auto*) {
                using S = std::remove_pointer_t<decltype(x)>;
                rope.apply(Eigen::Map<rmat<S>>(x, L, D), Index{5});
              });
              check_against_float<T, B>(cfg, opt, one, 2, [&](auto& rope, auto* x, auto* y) {
                using S = std::remove_pointer_t<decltype(x)>;
                rope.apply(Eigen::Map<const rmat<S>>(x, L, D), Eigen::Map<rmat<S>>(y, L, D),
                           seq_ids, posenc::rope_role::key);
              });
              check_against_float<T, B>(cfg, opt, one, 3, [&](auto& rope, auto* x, auto* y) {
                using S = std::remove_pointer_t<decltype(x)>;
                Eigen::Map<rmat<S>>(y, L, D) =
                    rope.rotated(Eigen::Map<const rmat<S>>(x, L, D), Index{1000});
              });
              check_against_float<T, B>(cfg, opt, one, 4, [&](auto& rope, auto* x, auto*) {
                using S = std::remove_pointer_t<decltype(x)>;
                rope.invert(Eigen::Map<rmat<S>>(x, L, D), seq_ids);
              });
              check_against_float<T, B>(cfg, opt, one, 5, [&](auto& rope, auto* x, auto*) {
                using S = std::remove_pointer_t<decltype(x)>;
                // column-major storage: dims strided by L (the scalar fallback of SIMD backends)
                rope.apply(Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>>(x, L, D),
                           Index{3});
              });
              check_against_float<T, B>(cfg, opt, one, 6, [&](auto& rope, auto* x, auto* y) {
                using S = std::remove_pointer_t<decltype(x)>;
                // an expression without direct access is evaluated into a temporary
                rope.apply(Eigen::Map<const rmat<S>>(x, L, D).colwise().reverse(),
                           Eigen::Map<rmat<S>>(y, L, D), Index{2});
              });
            }
            {  // multi-head [L, H, D]: strided views, strided dims, apply_qk
              check_against_float<T, B>(cfg, opt, one * H, 7, [&](auto& rope, auto* x, auto*) {
                using S = std::remove_pointer_t<decltype(x)>;
                rope.apply(posenc::strided_view<S, 3>::contiguous(x, {L, H, D}), Index{9});
              });
              check_against_float<T, B>(cfg, opt, one * H, 8, [&](auto& rope, auto* x, auto* y) {
                using S = std::remove_pointer_t<decltype(x)>;
                rope.apply(posenc::strided_view<const S, 3>::contiguous(x, {L, H, D}),
                           posenc::strided_view<S, 3>::contiguous(y, {L, H, D}), seq_ids);
              });
              check_against_float<T, B>(cfg, opt, 2 * one * H, 9, [&](auto& rope, auto* x, auto*) {
                using S = std::remove_pointer_t<decltype(x)>;
                // every other element: dim stride 2
                rope.apply(posenc::strided_view<S, 3>(x, {L, H, D}, {2 * H * D, 2 * D, 2}),
                           Index{4});
              });
              check_against_float<T, B>(
                  cfg, opt, one * (H + Hk), 10, [&](auto& rope, auto* x, auto*) {
                    using S = std::remove_pointer_t<decltype(x)>;
                    rope.apply_qk(posenc::strided_view<S, 3>::contiguous(x, {L, H, D}),
                                  posenc::strided_view<S, 3>::contiguous(x + L * H * D, {L, Hk, D}),
                                  Index{11});
                  });
            }
            {  // batched [B, L, H, D] and [B, H, L, D]: apply, invert, apply_qk, position ids
              check_against_float<T, B>(cfg, opt, all, 11, [&](auto& rope, auto* x, auto*) {
                rope.apply(posenc::view_bshd(x, Bn, L, H, D), ids);
              });
              check_against_float<T, B>(cfg, opt, all, 12, [&](auto& rope, auto* x, auto* y) {
                using S = std::remove_pointer_t<decltype(x)>;
                rope.apply(posenc::view_bhsd(static_cast<const S*>(x), Bn, H, L, D),
                           posenc::view_bhsd(y, Bn, H, L, D), Index{6});
              });
              check_against_float<T, B>(cfg, opt, all, 13, [&](auto& rope, auto* x, auto*) {
                rope.invert(posenc::view_bhsd(x, Bn, H, L, D), seq_ids, posenc::rope_role::key);
              });
              const auto kv = static_cast<std::size_t>(Bn * L * Hk * D);
              check_against_float<T, B>(cfg, opt, all + kv, 14, [&](auto& rope, auto* x, auto*) {
                rope.apply_qk(posenc::view_bshd(x, Bn, L, H, D),
                              posenc::view_bshd(x + all, Bn, L, Hk, D), ids);
              });
              check_against_float<T, B>(cfg, opt, all + kv, 15, [&](auto& rope, auto* x, auto* y) {
                using S = std::remove_pointer_t<decltype(x)>;
                const S* cx = x;
                rope.apply_qk(posenc::view_bshd(cx, Bn, L, H, D), posenc::view_bshd(y, Bn, L, H, D),
                              posenc::view_bhsd(cx + all, Bn, Hk, L, D),
                              posenc::view_bhsd(y + all, Bn, Hk, L, D), Index{700});
              });
            }
          }
    });
  };
  run_type(Eigen::half{});
  run_type(Eigen::bfloat16{});
}

TEST_CASE("rotary 16-bit storage: the cos/sin cache is float, the float embedding's bit for bit",
          "[rotary][lowp]") {
  posenc::rope_options opt;
  opt.max_len = 16;
  rotary_embedding<Eigen::half> h(64, 48, 1e4, rope_pairing::interleaved, opt);
  rotary_embedding<Eigen::bfloat16> b(64, 48, 1e4, rope_pairing::interleaved, opt);
  rotary_embedding<float> f(64, 48, 1e4, rope_pairing::interleaved, opt);
  static_assert(std::is_same_v<decltype(h.cache().cos(0)), const float*>);
  REQUIRE(h.cache().size() == 16);
  REQUIRE(b.cache().size() == 16);
  CHECK(std::memcmp(h.cache().cos(0), f.cache().cos(0), 16 * 24 * sizeof(float)) == 0);
  CHECK(std::memcmp(b.cache().sin(0), f.cache().sin(0), 16 * 24 * sizeof(float)) == 0);
  CHECK(h.cache().cos(15)[0] != 1.0f);
}

TEST_CASE("rotary 16-bit storage: float64 goldens within T's precision", "[rotary][lowp][golden]") {
  struct model_case {
    const char* name;
    Index head_dim, rotary_dim;
    rope_pairing pairing;
  };
  const model_case models[] = {{"llama2_7b", 128, 128, rope_pairing::half},
                               {"gptj", 256, 64, rope_pairing::interleaved},
                               {"neox", 128, 32, rope_pairing::half}};
  auto run_type = [&](auto type_tag, double eps_t) {
    using T = decltype(type_tag);
    for_scalar_and_default([&](auto backend_tag) {
      using B = decltype(backend_tag);
      for (const auto& m : models) {
        INFO(type_name<T>() << " " << B::name() << " model " << m.name);
        const std::string stem = std::string("rotary_") + m.name;
        const auto x = golden_matrix<double>(stem + "_x.npy");
        const auto y = golden_matrix<double>(stem + "_y.npy");
        const auto pos = golden_positions(stem + "_pos.npy");
        const rmat<T> xt = x.cast<float>().cast<T>();
        for (auto mode : {posenc::rope_cache_mode::cached, posenc::rope_cache_mode::on_the_fly}) {
          posenc::rope_options opt;
          opt.cache = mode;
          opt.cache_limit = 8192;
          rotary_embedding<T, B> rope(m.head_dim, m.rotary_dim, 1e4, m.pairing, opt);
          const rmat<T> out = rope.rotated(xt, pos);
          // rows: rounding x to T moves it by <= u ||x|| (u = eps_T / 2), the rotation keeps
          // norms, rounding the result adds <= u ||y||; float maths adds < 2e-6 (the float
          // golden bound)
          const double err = worst_row_error(out, y);
          INFO("max row relative error " << err);
          CHECK(err <= eps_t + 2e-6);
          // ...and it is T's error, not float's: rounding to 8 or 11 bits is visible
          CHECK(err > eps_t / 64);
          // the partial-rotary tail is the input, bit for bit
          CHECK(posenc_test::same_bits(out.rightCols(m.head_dim - m.rotary_dim),
                                       xt.rightCols(m.head_dim - m.rotary_dim)));
        }
      }
    });
  };
  run_type(Eigen::half{}, std::ldexp(1.0, -10));
  run_type(Eigen::bfloat16{}, std::ldexp(1.0, -7));
}

namespace {

/// One token of D = 20 dims (r = 16, a partial-packet half chunk and an interleaved tail) at
/// position 0 with attention factor A: cos = A, sin = 0, so y_a = T(float(x_a) A) where
/// x_b is finite. Returns the output of rotary_embedding<T, B>, after checking it equals
/// Eigen's rounding of the float embedding's output bit for bit (NaN payloads included).
template <class T, class B>
std::vector<T> scaled_at_zero(const std::vector<float>& values, double factor,
                              rope_pairing pairing) {
  constexpr Index D = 20, r = 16;
  posenc::rope_frequencies f = posenc::plain_rope_frequencies(r);
  f.attention_factor = factor;
  std::vector<T> x(static_cast<std::size_t>(D), T(0.0f));
  for (std::size_t i = 0; i < values.size(); ++i) x[i] = T(values[i]);
  rotary_embedding<T, B> lowp(D, f, pairing);
  rotary_embedding<float, B> ref(D, f, pairing);
  std::vector<T> y(x.size());
  std::vector<float> xf = widen(x), yf(x.size());
  lowp.apply(posenc::strided_view<const T, 3>::contiguous(x.data(), {1, 1, D}),
             posenc::strided_view<T, 3>::contiguous(y.data(), {1, 1, D}), Index{0});
  ref.apply(posenc::strided_view<const float, 3>::contiguous(xf.data(), {1, 1, D}),
            posenc::strided_view<float, 3>::contiguous(yf.data(), {1, 1, D}), Index{0});
  CHECK(same_bits(y, narrow<T>(yf)));
  return y;
}

float f32(const Eigen::half& h) { return static_cast<float>(h); }
float f32(const Eigen::bfloat16& h) { return static_cast<float>(h); }

}  // namespace

TEST_CASE("rotary 16-bit storage: rounding at the edges (overflow, NaN, inf, subnormals, ties)",
          "[rotary][lowp]") {
  for_scalar_and_default([&](auto backend_tag) {
    using B = decltype(backend_tag);
    for (auto pairing : {rope_pairing::half, rope_pairing::interleaved}) {
      INFO(B::name() << " " << posenc::to_string(pairing));
      // the first element of each pair: dim i (half pairs i and i + 8), dim 2i (interleaved)
      const bool half_pairing = pairing == rope_pairing::half;
      auto first = [&](std::size_t i) { return half_pairing ? i : 2 * i; };
      auto layout = [&](const std::vector<float>& a) {
        std::vector<float> v(20, 0.0f);
        for (std::size_t i = 0; i < a.size(); ++i) v[first(i)] = a[i];
        return v;
      };
      const float inf = std::numeric_limits<float>::infinity();
      const float nan = std::numeric_limits<float>::quiet_NaN();
      {
        // half: times 2, past 65504 is inf (65504 * 2 too, 32768 * 2 = 65536 too); 32752 * 2
        // = 65504 exactly; a subnormal doubles exactly
        const auto y = scaled_at_zero<Eigen::half, B>(
            layout({40000.0f, -40000.0f, 32768.0f, 32752.0f, 1e-7f, 65504.0f, 0.5f, -0.0f}), 2.0,
            pairing);
        CHECK(f32(y[first(0)]) == inf);
        CHECK(f32(y[first(1)]) == -inf);
        CHECK(f32(y[first(2)]) == inf);
        CHECK(f32(y[first(3)]) == 65504.0f);
        CHECK(f32(y[first(4)]) == 2.0f * f32(Eigen::half(1e-7f)));
        CHECK(f32(y[first(4)]) < 6.1e-5f);  // below half's smallest normal
        CHECK(f32(y[first(5)]) == inf);
        CHECK(f32(y[first(6)]) == 1.0f);
      }
      {
        // ties to even: 1 * (1 + 2^-11) is halfway between 1 and 1 + 2^-10 (rounds down to the
        // even 1); 1 * (1 + 3 * 2^-11) halfway between 1 + 2^-10 and 1 + 2^-9 (up, to even)
        const auto down = scaled_at_zero<Eigen::half, B>(layout({1.0f, -1.0f}),
                                                         1.0 + std::ldexp(1.0, -11), pairing);
        CHECK(f32(down[first(0)]) == 1.0f);
        CHECK(f32(down[first(1)]) == -1.0f);
        const auto up = scaled_at_zero<Eigen::half, B>(layout({1.0f, -1.0f}),
                                                       1.0 + 3 * std::ldexp(1.0, -11), pairing);
        CHECK(f32(up[first(0)]) == 1.0f + std::ldexp(1.0f, -9));
        CHECK(f32(up[first(1)]) == -1.0f - std::ldexp(1.0f, -9));
        const auto bdown = scaled_at_zero<Eigen::bfloat16, B>(layout({1.0f, -1.0f}),
                                                              1.0 + std::ldexp(1.0, -8), pairing);
        CHECK(f32(bdown[first(0)]) == 1.0f);
        CHECK(f32(bdown[first(1)]) == -1.0f);
        const auto bup = scaled_at_zero<Eigen::bfloat16, B>(layout({1.0f, -1.0f}),
                                                            1.0 + 3 * std::ldexp(1.0, -8), pairing);
        CHECK(f32(bup[first(0)]) == 1.0f + std::ldexp(1.0f, -6));
        CHECK(f32(bup[first(1)]) == -1.0f - std::ldexp(1.0f, -6));
      }
      {
        // bfloat16 keeps float's range: 3e38 * 2 overflows to inf; subnormals survive
        const auto y =
            scaled_at_zero<Eigen::bfloat16, B>(layout({3e38f, -3e38f, 1e-39f, 1.0f}), 2.0, pairing);
        CHECK(f32(y[first(0)]) == inf);
        CHECK(f32(y[first(1)]) == -inf);
        CHECK(f32(y[first(2)]) == f32(Eigen::bfloat16(2.0f * f32(Eigen::bfloat16(1e-39f)))));
        CHECK(f32(y[first(2)]) > 0.0f);
        CHECK(f32(y[first(2)]) < std::numeric_limits<float>::min());
        CHECK(f32(y[first(3)]) == 2.0f);
      }
      // NaN stays NaN (both members of its pair); an infinite x_a stays infinite (its
      // partner becomes inf * 0 = NaN, as in float)
      auto check_specials = [&](auto type_tag) {
        using T = decltype(type_tag);
        const auto y = scaled_at_zero<T, B>(layout({nan, -nan, inf, 1.0f}), 1.0, pairing);
        const std::size_t partner = half_pairing ? 8 : 1;
        CHECK(std::isnan(f32(y[first(0)])));
        CHECK(std::isnan(f32(y[first(0) + partner])));
        CHECK(std::isnan(f32(y[first(1)])));
        CHECK(f32(y[first(2)]) == inf);
        CHECK(std::isnan(f32(y[first(2) + partner])));
        CHECK(f32(y[first(3)]) == 1.0f);
      };
      check_specials(Eigen::half{});
      check_specials(Eigen::bfloat16{});
    }
  });
}

TEST_CASE("rotary 16-bit storage: errors name the parameter", "[rotary][lowp][errors]") {
  rotary_embedding<Eigen::bfloat16> rope(64);
  rmat<Eigen::bfloat16> x(3, 32);
  x.setZero();
  POSENC_REQUIRE_ERROR(rope.apply(x), "dim = 32");
  std::vector<Eigen::half> q(static_cast<std::size_t>(2 * 4 * 64)),
      k(static_cast<std::size_t>(3 * 4 * 64));
  rotary_embedding<Eigen::half> hrope(64);
  POSENC_REQUIRE_ERROR(
      hrope.apply_qk(posenc::view_shd(q.data(), 2, 4, 64), posenc::view_shd(k.data(), 3, 4, 64)),
      "k.seq = 3");
  POSENC_REQUIRE_ERROR(hrope.apply(posenc::view_shd(q.data(), 2, 4, 64), Index{-1}), "offset = -1");
}
