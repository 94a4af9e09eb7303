// RoPE on the GPU (encoding/cuda/rotary.cuh) against the CPU, on random inputs.
//
// Two references on the host:
// - `expected`: the CPU scalar backend's cos/sin rows (its cache) fed to
//   math::rotate_pair_fused, the device kernel's arithmetic. Device results in cached mode
//   must equal it bit for bit (same rows, same fused expression, one rounding to storage).
// - rotary_embedding<T, backend::scalar>::apply itself: on the fly the device computes
//   cos/sin with CUDA's double libm, so rows may differ from the host's by one float ulp;
//   those comparisons allow a few ulp of the arithmetic type.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <posenc/cuda.cuh>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_support.cuh"
#include "support/catch.hpp"
#include "support/rope_models.hpp"

namespace pc = posenc::cuda;
using posenc::Index;
using posenc::rope_pairing;
using posenc::rope_role;
using cuda_tag = posenc::backend::cuda;
using scalar_tag = posenc::backend::scalar;

namespace {

template <class T>
std::vector<T> random_values(Index n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<T>(u(gen));
  return v;
}

using posenc_test::download;
using posenc_test::upload;

/// Position of token (b, l).
Index position_of(const posenc::rope_positions& p, Index b, Index l, Index seq) {
  if (!p.has_ids()) return p.offset() + l;
  return p.count() == seq ? p.ids()[l] : p.ids()[b * seq + l];
}

/// The device kernel's arithmetic on the host: rows of `ref` (a scalar-backend object whose
/// cache is reserved past every position), math::rotate_pair_fused, rounded once.
template <class T>
void expected_rotation(posenc::rotary_embedding<T, scalar_tag>& ref, const posenc::heads_view<T>& x,
                       const posenc::rope_positions& p, rope_role role, bool inverse) {
  using C = posenc::real_t<T>;
  const Index B = x.extent(0), L = x.extent(1), H = x.extent(2);
  const Index pairs = ref.rotary_dim() / 2;
  const bool half = ref.pairing() == rope_pairing::half;
  for (Index b = 0; b < B; ++b)
    for (Index l = 0; l < L; ++l) {
      const Index n = position_of(p, b, l, L);
      const C* c = ref.cache().cos(n, role);
      const C* s = ref.cache().sin(n, role);
      for (Index h = 0; h < H; ++h)
        for (Index i = 0; i < pairs; ++i) {
          const Index da = half ? i : 2 * i, db = half ? i + pairs : 2 * i + 1;
          T& xa = x.data()[b * x.stride(0) + l * x.stride(1) + h * x.stride(2) + da * x.stride(3)];
          T& xb = x.data()[b * x.stride(0) + l * x.stride(1) + h * x.stride(2) + db * x.stride(3)];
          C ya, yb;
          posenc::math::rotate_pair_fused(static_cast<C>(xa), static_cast<C>(xb), c[i],
                                          inverse ? C(-s[i]) : s[i], ya, yb);
          xa = static_cast<T>(ya);
          xb = static_cast<T>(yb);
        }
    }
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// Largest |a - b| / (|b| + 1) over the elements, in double.
template <class T>
double max_rel_diff(const std::vector<T>& a, const std::vector<T>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    worst = std::max(worst, std::abs(x - y) / (std::abs(y) + 1.0));
  }
  return worst;
}

/// A few ulp of the arithmetic type, plus the storage rounding of 16-bit types.
template <class T>
double tolerance() {
  if (std::is_same_v<T, double>) return 1e-14;
  if (std::is_same_v<T, float>) return 4e-7;
  if (std::is_same_v<T, Eigen::half>) return 2e-3;
  return 1.6e-2;  // bfloat16: one ulp of its 8-bit mantissa
}

struct shape {
  Index batch, seq, hq, hk, dim;
};

/// Runs apply_qk on the device and on the host for one configuration; checks cached mode
/// bit for bit against `expected`, and both modes against the CPU object within tolerance.
template <class T>
void check_qk(const posenc::rope_frequencies& freqs, const shape& s, rope_pairing pairing,
              const posenc::rope_positions& positions, bool device_ids, bool bhsd, unsigned seed) {
  using posenc::heads_view;
  const Index nq = s.batch * s.seq * s.hq * s.dim, nk = s.batch * s.seq * s.hk * s.dim;
  const auto q0 = random_values<T>(nq, seed), k0 = random_values<T>(nk, seed + 1);
  auto view = [&](T* p, Index h) {
    return bhsd ? posenc::view_bhsd(p, s.batch, h, s.seq, s.dim)
                : posenc::view_bshd(p, s.batch, s.seq, h, s.dim);
  };
  // the host references
  Index max_pos = 0;
  for (Index b = 0; b < s.batch; ++b)
    for (Index l = 0; l < s.seq; ++l)
      max_pos = std::max(max_pos, position_of(positions, b, l, s.seq));
  posenc::rotary_embedding<T, scalar_tag> ref(s.dim, freqs, pairing);
  ref.reserve(max_pos + 1);
  auto q_exp = q0, k_exp = k0;
  expected_rotation(ref, view(q_exp.data(), s.hq), positions, rope_role::query, false);
  expected_rotation(ref, view(k_exp.data(), s.hk), positions, rope_role::key, false);
  auto q_cpu = q0, k_cpu = k0;
  ref.apply_qk(view(q_cpu.data(), s.hq), view(k_cpu.data(), s.hk), positions);

  pc::device_buffer<Index> ids;
  posenc::rope_positions dev_positions = positions;
  if (device_ids) {
    ids = upload(std::vector<Index>(positions.ids(), positions.ids() + positions.count()));
    dev_positions = posenc::rope_positions::on_device(ids.data(), positions.count());
  }
  for (auto mode : {posenc::rope_cache_mode::cached, posenc::rope_cache_mode::on_the_fly}) {
    posenc::rope_options options;
    options.cache = mode;
    posenc::rotary_embedding<T, cuda_tag> rope(s.dim, freqs, pairing, options);
    // device ids use the rows the cache already holds: reserve them
    if (device_ids) rope.reserve(max_pos + 1);
    auto q = upload(q0), k = upload(k0);
    rope.apply_qk(view(q.data(), s.hq), view(k.data(), s.hk), dev_positions);
    const auto q_dev = download(q), k_dev = download(k);
    const bool cached = mode == posenc::rope_cache_mode::cached;
    INFO((cached ? "cached" : "on the fly") << ", pairing " << static_cast<int>(pairing));
    if (cached) {
      CHECK(bitwise_equal(q_dev, q_exp));
      CHECK(bitwise_equal(k_dev, k_exp));
    }
    CHECK(max_rel_diff(q_dev, q_exp) <= tolerance<T>());
    CHECK(max_rel_diff(k_dev, k_exp) <= tolerance<T>());
    CHECK(max_rel_diff(q_dev, q_cpu) <= tolerance<T>());
    CHECK(max_rel_diff(k_dev, k_cpu) <= tolerance<T>());
  }
}

template <class T>
void check_every_layout() {
  const auto plain = posenc::plain_rope_frequencies(64, 10000.0);  // r = 64 of D = 96: partial
  const shape s{2, 19, 8, 2, 96};                                  // GQA: 8 q heads, 2 k heads
  std::vector<Index> shared(19), per_batch(2 * 19);
  for (Index l = 0; l < 19; ++l) shared[static_cast<std::size_t>(l)] = (l * 7919) % 3001;
  for (Index i = 0; i < 2 * 19; ++i) per_batch[static_cast<std::size_t>(i)] = (i * 104729) % 50000;
  for (auto pairing : {rope_pairing::half, rope_pairing::interleaved})
    for (bool bhsd : {false, true}) {
      INFO("bhsd " << bhsd);
      check_qk<T>(plain, s, pairing, Index(5), false, bhsd, 1);
      check_qk<T>(plain, s, pairing, shared, false, bhsd, 2);
      check_qk<T>(plain, s, pairing, per_batch, false, bhsd, 3);
      check_qk<T>(plain, s, pairing, per_batch, true, bhsd, 4);
      check_qk<T>(plain, s, pairing, shared, true, bhsd, 5);
    }
}

}  // namespace

TEST_CASE("cuda rope: every pairing, layout and position source, float") {
  check_every_layout<float>();
}
TEST_CASE("cuda rope: every pairing, layout and position source, double") {
  check_every_layout<double>();
}
TEST_CASE("cuda rope: every pairing, layout and position source, half and bfloat16") {
  check_every_layout<Eigen::half>();
  check_every_layout<Eigen::bfloat16>();
}

TEST_CASE("cuda rope: every scaling matches the CPU (frequencies from the same config)") {
  posenc::rope_config llama3;
  llama3.head_dim = 128;
  llama3.base = 500000.0;
  llama3.scaling = posenc::rope_scaling_type::llama3;
  llama3.factor = 8.0;
  llama3.original_max_positions = 8192;
  posenc::rope_config linear;
  linear.head_dim = 64;
  linear.scaling = posenc::rope_scaling_type::linear;
  linear.factor = 4.0;
  posenc::rope_config ntk = linear;
  ntk.scaling = posenc::rope_scaling_type::ntk;
  posenc::rope_config dynamic = linear;
  dynamic.scaling = posenc::rope_scaling_type::dynamic;
  dynamic.original_max_positions = 2048;
  const std::pair<const char*, posenc::rope_config> configs[] = {
      {"llama3", llama3},
      {"linear", linear},
      {"ntk", ntk},
      {"dynamic", dynamic},
      {"yarn", posenc_test::qwen2_yarn()},
      {"longrope", posenc_test::phi3()}};
  for (const auto& [name, config] : configs) {
    INFO(name);
    // a long sequence: dynamic NTK and LongRoPE switch frequencies past the original context
    const auto freqs = config.frequencies(40000);
    const shape s{1, 33, 4, 2, config.head_dim};
    check_qk<float>(freqs, s, config.pairing, Index(39000), false, false, 11);
    check_qk<Eigen::bfloat16>(freqs, s, config.pairing, Index(17), false, false, 12);
  }
  // xPos: keys use their own rows (zeta^(-n/s))
  auto xpos = posenc::plain_rope_frequencies(64, 10000.0);
  xpos.xpos_scale_base = 512.0;
  check_qk<float>(xpos, shape{2, 21, 4, 4, 64}, rope_pairing::half, Index(100), false, false, 13);
  check_qk<double>(xpos, shape{1, 9, 2, 1, 64}, rope_pairing::interleaved, Index(0), false, false,
                   14);
}

TEST_CASE("cuda rope: float32 stays within 2e-6 of float64 angles up to position 2^20") {
  // on the fly, exact angles: never p * w in float32
  posenc::rope_options fly;
  fly.cache = posenc::rope_cache_mode::on_the_fly;
  posenc::rotary_embedding<float, cuda_tag> rope(128, -1, 500000.0, rope_pairing::half, fly);
  const Index L = 64;
  std::vector<Index> ids(L);
  for (Index l = 0; l < L; ++l) ids[static_cast<std::size_t>(l)] = (Index(1) << 20) - 1 - 997 * l;
  const auto x0 = random_values<float>(L * 128, 21);
  auto d = upload(x0);
  rope.apply(posenc::view_shd(d.data(), L, 1, 128), ids);
  const auto got = download(d);
  const auto freqs = posenc::plain_rope_frequencies(128, 500000.0);
  double worst = 0;
  for (Index l = 0; l < L; ++l)
    for (Index i = 0; i < 64; ++i) {
      const double a = static_cast<double>(ids[static_cast<std::size_t>(l)]) *
                       freqs.inv_freq[static_cast<std::size_t>(i)];
      const double xa = x0[static_cast<std::size_t>(l * 128 + i)];
      const double xb = x0[static_cast<std::size_t>(l * 128 + i + 64)];
      const double ya = xa * std::cos(a) - xb * std::sin(a);
      const double yb = xb * std::cos(a) + xa * std::sin(a);
      worst = std::max({worst, std::abs(got[static_cast<std::size_t>(l * 128 + i)] - ya),
                        std::abs(got[static_cast<std::size_t>(l * 128 + i + 64)] - yb)});
    }
  CHECK(worst < 2e-6 * 4);  // |x| <= 2 per element: 2e-6 relative to the pair's magnitude
}

TEST_CASE("cuda rope: float32_reference reproduces the host's float32 angles") {
  posenc::rope_options ref_options;
  ref_options.precision = posenc::rope_precision::float32_reference;
  const auto freqs = posenc::plain_rope_frequencies(64, 10000.0);
  for (auto mode : {posenc::rope_cache_mode::cached, posenc::rope_cache_mode::on_the_fly}) {
    auto options = ref_options;
    options.cache = mode;
    posenc::rotary_embedding<float, cuda_tag> rope(64, freqs, rope_pairing::half, options);
    posenc::rotary_embedding<float, scalar_tag> cpu(64, freqs, rope_pairing::half, ref_options);
    const auto x0 = random_values<float>(40 * 3 * 64, 31);
    auto d = upload(x0);
    rope.apply(posenc::view_shd(d.data(), 40, 3, 64), Index(123456));
    auto host = x0;
    cpu.apply(posenc::view_shd(host.data(), 40, 3, 64), Index(123456));
    CHECK(max_rel_diff(download(d), host) <= 4e-7);
  }
}

TEST_CASE("cuda rope: out of place, invert, single tensors, strided dims and streams") {
  const Index L = 23, H = 3, D = 64;
  posenc::rotary_embedding<float, cuda_tag> rope(D, 48);  // partial: dims 48..63 pass through
  const auto x0 = random_values<float>(L * H * D, 41);
  auto in = upload(x0);
  pc::device_buffer<float> out(L * H * D);
  out.zero();
  cudaStream_t stream = nullptr;
  pc::check(cudaStreamCreate(&stream), "cudaStreamCreate");
  rope.apply(posenc::heads_view<const float>(posenc::view_shd(in.data(), L, H, D)),
             posenc::view_shd(out.data(), L, H, D), Index(7), rope_role::query, stream);
  const auto y = download(out);
  CHECK(bitwise_equal(download(in), x0));  // the input is untouched
  // the tail dims are copied bit for bit
  for (Index t = 0; t < L * H; ++t)
    for (Index d = 48; d < D; ++d)
      CHECK(y[static_cast<std::size_t>(t * D + d)] == x0[static_cast<std::size_t>(t * D + d)]);
  // in place gives the same bits as out of place
  rope.apply(posenc::view_shd(in.data(), L, H, D), Index(7), rope_role::query, stream);
  CHECK(bitwise_equal(download(in), y));
  // invert undoes it (no attention factor, no xPos) to rounding
  rope.invert(posenc::view_shd(in.data(), L, H, D), Index(7), rope_role::query, stream);
  CHECK(max_rel_diff(download(in), x0) <= 4e-7);
  pc::check(cudaStreamDestroy(stream), "cudaStreamDestroy");

  // a dim stride of 2 (every other float of a wider buffer) matches the contiguous result
  std::vector<float> wide(static_cast<std::size_t>(2 * L * H * D), 9.0f);
  for (std::size_t i = 0; i < x0.size(); ++i) wide[2 * i] = x0[i];
  auto dw = upload(wide);
  const posenc::heads_view<float> strided(dw.data(), {1, L, H, D}, {0, 2 * H * D, 2 * D, 2});
  posenc::rotary_embedding<float, cuda_tag> rope2(D, 48);
  rope2.apply(strided, Index(7));
  const auto w = download(dw);
  for (std::size_t i = 0; i < x0.size(); ++i) {
    CHECK(w[2 * i] == y[i]);
    CHECK(w[2 * i + 1] == 9.0f);  // the elements between are not touched
  }
}

TEST_CASE("cuda rope: M-RoPE and 2D axial RoPE match the CPU") {
  const Index L = 29, H = 4, D = 128;
  auto cpu = posenc::mrope<float, scalar_tag>(D, {16, 24, 24});
  posenc::multi_axis_rotary<float, cuda_tag> gpu(cpu);
  posenc::rope_axis_positions pos(3, L);
  for (Index l = 0; l < L; ++l) {
    pos(0, l) = l / 7;
    pos(1, l) = 3 + l % 5;
    pos(2, l) = 1000 + 2 * l;
  }
  const auto q0 = random_values<float>(L * H * D, 51), k0 = random_values<float>(L * 2 * D, 52);
  auto q = upload(q0), k = upload(k0);
  gpu.apply_qk(posenc::view_shd(q.data(), L, H, D), posenc::view_shd(k.data(), L, 2, D), pos);
  auto qh = q0, kh = k0;
  cpu.apply_qk(posenc::view_shd(qh.data(), L, H, D), posenc::view_shd(kh.data(), L, 2, D), pos);
  CHECK(max_rel_diff(download(q), qh) <= 4e-7);
  CHECK(max_rel_diff(download(k), kh) <= 4e-7);
  // device positions give the same bits as host positions
  auto q2 = upload(q0);
  const posenc::rope_axis_positions dense = pos;
  auto dpos = upload(std::vector<Index>(dense.data(), dense.data() + dense.size()));
  gpu.apply_device(posenc::view_shd(q2.data(), L, H, D), posenc::heads_view<float>(), dpos.data(),
                   L);
  auto q1 = upload(q0);
  gpu.apply(posenc::view_shd(q1.data(), L, H, D), pos);
  CHECK(bitwise_equal(download(q2), download(q1)));
  // a negative device position is reported by its (axis, column), never used
  std::vector<Index> bad(dense.data(), dense.data() + dense.size());
  bad[static_cast<std::size_t>(2 * L + 11)] = -4;
  auto dbad = upload(bad);
  const auto before = download(q2);
  CHECK_THROWS_WITH(gpu.apply_device(posenc::view_shd(q2.data(), L, H, D),
                                     posenc::heads_view<float>(), dbad.data(), L),
                    "posenc::multi_axis_rotary::apply_device: positions(2, 11) = -4: must be >= 0 "
                    "(device positions: that token was left unrotated)");
  // token 11 is left exactly as it was; the other tokens are rotated (again)
  const auto after = download(q2);
  for (Index l = 0; l < L; ++l) {
    const auto first = static_cast<std::ptrdiff_t>(l * H * D);
    const bool same =
        std::equal(after.begin() + first, after.begin() + first + H * D, before.begin() + first);
    CHECK(same == (l == 11));
  }

  auto axial_cpu = posenc::axial_rope_2d<float, scalar_tag>(64);
  posenc::multi_axis_rotary<float, cuda_tag> axial(axial_cpu);
  posenc::rope_axis_positions patches(2, 16);
  for (Index l = 0; l < 16; ++l) {
    patches(0, l) = l / 4;
    patches(1, l) = l % 4;
  }
  const auto p0 = random_values<float>(16 * 2 * 64, 53);
  auto dp = upload(p0);
  axial.apply(posenc::view_shd(dp.data(), 16, 2, 64), patches);
  auto hp = p0;
  axial_cpu.apply(posenc::view_shd(hp.data(), 16, 2, 64), patches);
  CHECK(max_rel_diff(download(dp), hp) <= 4e-7);
}

TEST_CASE("cuda rope: bad input gets the CPU's error messages") {
  posenc::rotary_embedding<float, cuda_tag> gpu(64);
  posenc::rotary_embedding<float, scalar_tag> cpu(64);
  pc::device_buffer<float> d(4 * 2 * 64);
  std::vector<float> h(4 * 2 * 64);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const posenc::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // the wrong head dim
  const auto e1 = message([&] { gpu.apply(posenc::view_shd(d.data(), 4, 2, 63)); });
  CHECK(e1 == message([&] { cpu.apply(posenc::view_shd(h.data(), 4, 2, 63)); }));
  CHECK(e1.find("dim = 63: must equal head_dim = 64") != std::string::npos);
  // a negative offset, the wrong number of ids
  CHECK(message([&] { gpu.apply(posenc::view_shd(d.data(), 4, 2, 64), Index(-1)); }) ==
        message([&] { cpu.apply(posenc::view_shd(h.data(), 4, 2, 64), Index(-1)); }));
  const std::vector<Index> three = {0, 1, 2};
  CHECK(message([&] { gpu.apply(posenc::view_shd(d.data(), 4, 2, 64), three); }) ==
        message([&] { cpu.apply(posenc::view_shd(h.data(), 4, 2, 64), three); }));
  // a negative host id is caught on the host, with the CPU's message
  const std::vector<Index> negative = {0, 1, -7, 3};
  CHECK(message([&] { gpu.apply(posenc::view_shd(d.data(), 4, 2, 64), negative); }) ==
        "posenc::rotary_embedding::apply: position_ids[2] = -7: must be >= 0");
  // a negative device id: the kernel reports it, the call throws, nothing is read past it
  auto dneg = upload(negative);
  CHECK(message([&] {
          gpu.apply(posenc::view_shd(d.data(), 4, 2, 64),
                    posenc::rope_positions::on_device(dneg.data(), 4));
        }) ==
        "posenc::rotary_embedding::apply: position_ids[2] = -7: must be >= 0 (device ids: "
        "that token was left unrotated)");
  // an output overlapping its input
  const auto e_overlap = message([&] {
    gpu.apply(posenc::heads_view<const float>(posenc::view_shd(d.data(), 2, 2, 64)),
              posenc::view_shd(d.data() + 64, 2, 2, 64));
  });
  CHECK(e_overlap.find("shares memory with") != std::string::npos);
  // a CPU object refuses device ids
  CHECK(message([&] {
          cpu.apply(posenc::view_shd(h.data(), 4, 2, 64),
                    posenc::rope_positions::on_device(dneg.data(), 4));
        }).find("position_ids = device memory") != std::string::npos);
  // a rotary dim whose rows do not fit the kernel's shared memory
  CHECK_THROWS_AS((posenc::rotary_embedding<double, cuda_tag>(4096)), posenc::error);
}
