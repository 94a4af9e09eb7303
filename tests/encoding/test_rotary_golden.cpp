// RoPE apply against the independent numpy reference (tests/reference/rotary.py), real model
// configurations, numerics at long positions, and every error path.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "test_rotary_support.hpp"

using posenc::Index;
using posenc::rope_pairing;
using posenc::rotary_embedding;
using namespace posenc_test;

namespace {

struct model_case {
  const char* name;
  Index head_dim, rotary_dim;
  double base;
  rope_pairing pairing;
};

const model_case models[] = {
    {"llama2_7b", 128, 128, 1e4, rope_pairing::half},   // Llama-2 7B
    {"gptj", 256, 64, 1e4, rope_pairing::interleaved},  // GPT-J 6B: rotary_dim 64
    {"neox", 128, 32, 1e4, rope_pairing::half},         // Pythia: rotary_pct 0.25
};

std::string file(const char* name, const char* part) {
  return std::string("rotary_") + name + "_" + part + ".npy";
}

// Both cache modes run each golden; positions past 8192 are computed on the fly even in
// cached mode (keeps the test fast).
constexpr posenc::rope_cache_mode cache_modes[] = {posenc::rope_cache_mode::cached,
                                                   posenc::rope_cache_mode::on_the_fly};
posenc::rope_options golden_options(posenc::rope_cache_mode mode) {
  posenc::rope_options opt;
  opt.cache = mode;
  opt.cache_limit = 8192;
  return opt;
}

}  // namespace

TEST_CASE("rotary: model goldens in double", "[rotary][golden]") {
  for (const auto& m : models) {
    INFO("model " << m.name);
    const auto x = golden_matrix<double>(file(m.name, "x"));
    const auto y = golden_matrix<double>(file(m.name, "y"));
    const auto pos = golden_positions(file(m.name, "pos"));
    for (auto mode : cache_modes) {
      const posenc::rope_options opt = golden_options(mode);
      rotary_embedding<double> rope(m.head_dim, m.rotary_dim, m.base, m.pairing, opt);
      const auto out = rope.rotated(x, pos);
      // angles up to 1e6 rad: an ulp of inv_freq moves them by ~1e-10
      CHECK(max_abs_diff(out, y) < 2e-9);
      // partial rotary: the tail is the input, bit for bit
      CHECK(same_bits(out.rightCols(m.head_dim - m.rotary_dim),
                      x.rightCols(m.head_dim - m.rotary_dim)));
    }
    // the same model through a rope_config
    posenc::rope_config cfg;
    cfg.head_dim = m.head_dim;
    cfg.rotary_dim = m.rotary_dim;
    cfg.base = m.base;
    cfg.pairing = m.pairing;
    posenc::rope_options fly;
    fly.cache = posenc::rope_cache_mode::on_the_fly;
    rotary_embedding<double> from_cfg(cfg, 0, fly);
    CHECK(max_abs_diff(from_cfg.rotated(x, pos), y) < 2e-9);
  }
}

TEST_CASE("rotary: float32 within 2e-6 of float64 up to position 1048576", "[rotary][numerics]") {
  for (const auto& m : models) {
    INFO("model " << m.name);
    const rmat<float> x = golden_matrix<double>(file(m.name, "x")).cast<float>();
    const auto y = golden_matrix<double>(file(m.name, "y"));
    const auto pos = golden_positions(file(m.name, "pos"));
    for (auto mode : cache_modes) {
      const posenc::rope_options opt = golden_options(mode);
      rotary_embedding<float> rope(m.head_dim, m.rotary_dim, m.base, m.pairing, opt);
      const auto out = rope.rotated(x, pos);
      const double err = max_row_rel_err(out, y);
      INFO("max row relative error " << err);
      CHECK(err < 2e-6);
    }
  }
}

TEST_CASE("rotary: float32_reference reproduces float32 angle arithmetic", "[rotary][numerics]") {
  const rmat<float> x = golden_matrix<double>("rotary_llama2_7b_x.npy").cast<float>();
  const auto y64 = golden_matrix<double>("rotary_llama2_7b_y.npy");
  const auto y32 = golden_matrix<double>("rotary_llama2_7b_y_f32ref.npy");
  const auto pos = golden_positions("rotary_llama2_7b_pos.npy");
  for (auto mode : cache_modes) {
    posenc::rope_options opt = golden_options(mode);
    opt.precision = posenc::rope_precision::float32_reference;
    rotary_embedding<float> rope(128, -1, 1e4, rope_pairing::half, opt);
    const auto out = rope.rotated(x, pos);
    // the same float32 operations as the reference: equal to rounding
    CHECK(max_abs_diff(out, y32) < 2e-6);
    // ...and genuinely the float32 model: far from float64 at the last positions
    const Index last = x.rows() - 1;
    CHECK(rel_norm_err(out.row(last), y64.row(last)) > 1e-3);
    CHECK(rel_norm_err(y32.row(last), y64.row(last)) > 1e-3);
  }
}

TEST_CASE("rotary: xPos goldens for queries and keys", "[rotary][golden][xpos]") {
  const auto x = golden_matrix<double>("rotary_xpos_x.npy");
  const auto yq = golden_matrix<double>("rotary_xpos_y.npy");
  const auto yk = golden_matrix<double>("rotary_xpos_yk.npy");
  const auto pos = golden_positions("rotary_xpos_pos.npy");
  posenc::rope_config cfg;
  cfg.head_dim = 64;
  cfg.pairing = rope_pairing::interleaved;
  cfg.scaling = posenc::rope_scaling_type::xpos;
  cfg.xpos_scale_base = 512;
  cfg.xpos_gamma = 0.4;
  for (auto mode : cache_modes) {
    rotary_embedding<double> rope(cfg, 0, golden_options(mode));
    CHECK(max_abs_diff(rope.rotated(x, pos, posenc::rope_role::query), yq) < 1e-12);
    CHECK(max_abs_diff(rope.rotated(x, pos, posenc::rope_role::key), yk) < 1e-12);
    // apply_qk gives q the query scale and k the key scale
    rmat<double> q = x, k = x;
    rope.apply_qk(posenc::view_shd(q.data(), q.rows(), 1, 64),
                  posenc::view_shd(k.data(), k.rows(), 1, 64), pos);
    CHECK(max_abs_diff(q, yq) < 1e-12);
    CHECK(max_abs_diff(k, yk) < 1e-12);
  }
}

TEST_CASE("rotary: end-to-end goldens of linear, NTK and dynamic NTK scaling", "[rotary][golden]") {
  struct scaled {
    const char* name;
    posenc::rope_scaling_type type;
    double factor;
    Index original, seq_len;
  };
  const scaled cases[] = {
      {"linear", posenc::rope_scaling_type::linear, 4.0, 0, 0},
      {"ntk", posenc::rope_scaling_type::ntk, 8.0, 0, 0},
      {"dynamic", posenc::rope_scaling_type::dynamic, 2.0, 2048, 8192},
  };
  for (const auto& c : cases) {
    INFO("scaling " << c.name);
    posenc::rope_config cfg;
    cfg.head_dim = 64;
    cfg.scaling = c.type;
    cfg.factor = c.factor;
    cfg.original_max_positions = c.original;
    rotary_embedding<double> rope(cfg, c.seq_len);
    const auto x = golden_matrix<double>(file(c.name, "x"));
    const auto y = golden_matrix<double>(file(c.name, "y"));
    CHECK(max_abs_diff(rope.rotated(x, golden_positions(file(c.name, "pos"))), y) < 1e-11);
  }
}

TEST_CASE("rotary: the attention factor multiplies cos and sin exactly once", "[rotary][golden]") {
  auto f = posenc::plain_rope_frequencies(64, 1e4);
  f.attention_factor = 1.25;
  rotary_embedding<double> rope(64, f, rope_pairing::half);
  const auto x = golden_matrix<double>("rotary_attn_factor_x.npy");
  const auto y = golden_matrix<double>("rotary_attn_factor_y.npy");
  const auto pos = golden_positions("rotary_attn_factor_pos.npy");
  const auto out = rope.rotated(x, pos);
  CHECK(max_abs_diff(out, y) < 1e-12);
  // norms grow by A, not A^2 or 1
  for (Index i = 0; i < x.rows(); ++i)
    CHECK(std::abs(out.row(i).norm() / x.row(i).norm() - 1.25) < 1e-12);
}

TEST_CASE("rotary: multi-axis goldens (Qwen2-VL M-RoPE, 2D axial)",
          "[rotary][golden][multi_axis]") {
  {
    const auto x = golden_matrix<double>("rotary_mrope_x.npy");
    const auto y = golden_matrix<double>("rotary_mrope_y.npy");
    const auto p = golden<std::int64_t>("rotary_mrope_pos.npy");
    REQUIRE(p.shape.size() == 2);
    posenc::rope_axis_positions pos(p.shape[0], p.shape[1]);
    for (Index i = 0; i < pos.size(); ++i) pos.data()[i] = p.data[static_cast<std::size_t>(i)];
    auto rope = posenc::mrope<double>(128, {16, 24, 24}, 1e6);
    rmat<double> out = x;
    rope.apply(out, pos);
    CHECK(max_abs_diff(out, y) < 1e-12);
  }
  {
    const auto x = golden_matrix<double>("rotary_axial_x.npy");
    const auto y = golden_matrix<double>("rotary_axial_y.npy");
    const auto p = golden<std::int64_t>("rotary_axial_pos.npy");
    posenc::rope_axis_positions pos(p.shape[0], p.shape[1]);
    for (Index i = 0; i < pos.size(); ++i) pos.data()[i] = p.data[static_cast<std::size_t>(i)];
    auto rope = posenc::axial_rope_2d<double>(64, 100.0);
    rmat<double> out = x;
    rope.apply(out, pos);
    CHECK(max_abs_diff(out, y) < 1e-12);
  }
}

TEST_CASE("rotary: errors name the parameter and its value", "[rotary][errors]") {
  using posenc::heads_view;
  POSENC_REQUIRE_ERROR(rotary_embedding<float>(64, 7), "rotary_dim = 7");
  POSENC_REQUIRE_ERROR(rotary_embedding<float>(64, 128), "rotary_dim = 128");
  POSENC_REQUIRE_ERROR(rotary_embedding<float>(0), "head_dim = 0");
  POSENC_REQUIRE_ERROR(rotary_embedding<float>(64, -1, 1.0), "base = 1");
  POSENC_REQUIRE_ERROR(
      rotary_embedding<float>(32, posenc::plain_rope_frequencies(64), rope_pairing::half),
      "rotary_dim = 64");
  POSENC_REQUIRE_ERROR(rotary_embedding<float>(32, posenc::rope_frequencies{}, rope_pairing::half),
                       "inv_freq.size() = 0");
  {
    posenc::rope_config cfg;
    cfg.head_dim = 64;
    cfg.rotary_dim = 33;
    POSENC_REQUIRE_ERROR(rotary_embedding<float>(cfg, 0), "rotary_dim = 33");
  }

  rotary_embedding<float> rope(8);
  rmat<float> x = rmat<float>::Zero(3, 8);
  rmat<float> wrong_dim = rmat<float>::Zero(3, 6);
  rmat<float> wrong_rows = rmat<float>::Zero(2, 8);
  POSENC_REQUIRE_ERROR(rope.apply(wrong_dim), "dim = 6");
  POSENC_REQUIRE_ERROR(rope.apply(x, wrong_rows), "out.seq = 2");
  POSENC_REQUIRE_ERROR(rope.apply(x, -1), "offset = -1");
  POSENC_REQUIRE_ERROR(rope.apply(x, std::vector<Index>{0, 1}), "position_ids.size() = 2");
  POSENC_REQUIRE_ERROR(rope.apply(x, std::vector<Index>{0, -2, 1}), "position_ids[1] = -2");
  POSENC_REQUIRE_ERROR(rope.invert(x, -5), "offset = -5");

  std::vector<float> qb(2 * 3 * 4 * 8), kb(2 * 3 * 2 * 8), kb2(2 * 4 * 2 * 8), kb3(2 * 3 * 2 * 6);
  auto q = posenc::view_bshd(qb.data(), 2, 3, 4, 8);
  POSENC_REQUIRE_ERROR(rope.apply_qk(q, posenc::view_bshd(kb2.data(), 2, 4, 2, 8)), "k.seq = 4");
  POSENC_REQUIRE_ERROR(rope.apply_qk(q, posenc::view_bshd(kb2.data(), 1, 3, 2, 8)), "k.batch = 1");
  POSENC_REQUIRE_ERROR(rope.apply_qk(q, posenc::view_bshd(kb3.data(), 2, 3, 2, 6)), "k.dim = 6");
  // B*L ids are fine, other counts are not
  CHECK_NOTHROW(
      rope.apply_qk(q, posenc::view_bshd(kb.data(), 2, 3, 2, 8), std::vector<Index>(6, 1)));
  POSENC_REQUIRE_ERROR(
      rope.apply_qk(q, posenc::view_bshd(kb.data(), 2, 3, 2, 8), std::vector<Index>(5, 1)),
      "position_ids.size() = 5");
  // an output at the input's address with other strides
  const heads_view<float> swapped(qb.data(), {2, 3, 4, 8}, {96, 8, 24, 1});
  POSENC_REQUIRE_ERROR(rope.apply(heads_view<const float>(q), swapped), "out.stride[1] = 8");
  // an output that shares memory with an input without being it (shifted by one token,
  // or by half a head), and q and k that overlap: never a silent partial overwrite
  std::vector<float> big(3 * 3 * 4 * 8 + 8);
  const auto base = posenc::view_bshd(big.data(), 2, 3, 4, 8);
  const heads_view<const float> base_in(base);
  POSENC_REQUIRE_ERROR(rope.apply(base_in, posenc::view_bshd(big.data() + 32, 2, 3, 4, 8)),
                       "out = shares memory with input");
  POSENC_REQUIRE_ERROR(rope.apply(base_in, posenc::view_bshd(big.data() + 4, 2, 3, 4, 8)),
                       "out = shares memory with input");
  POSENC_REQUIRE_ERROR(
      rope.apply_qk(base, heads_view<float>(big.data() + 8, {2, 3, 2, 8}, {96, 32, 8, 1})),
      "q.out = shares memory with k");
  // the same buffer, elements apart (the q and k heads of one fused row): accepted
  CHECK_NOTHROW(rope.apply_qk(heads_view<float>(big.data(), {2, 3, 2, 8}, {96, 32, 8, 1}),
                              heads_view<float>(big.data() + 16, {2, 3, 2, 8}, {96, 32, 8, 1})));
  // a heads mismatch between in and out
  std::vector<float> ob(2 * 3 * 3 * 8);
  POSENC_REQUIRE_ERROR(
      rope.apply(heads_view<const float>(q), posenc::view_bshd(ob.data(), 2, 3, 3, 8)),
      "out.heads = 3");
  // the cache
  {
    posenc::rope_options bad;
    bad.cache_limit = -1;
    POSENC_REQUIRE_ERROR(rotary_embedding<float>(8, -1, 1e4, rope_pairing::half, bad),
                         "cache_limit = -1");
    bad.cache_limit = 0;
    bad.max_len = -2;
    POSENC_REQUIRE_ERROR(rotary_embedding<float>(8, -1, 1e4, rope_pairing::half, bad),
                         "max_len = -2");
    posenc::rope_cache<float> c(posenc::plain_rope_frequencies(8));
    POSENC_REQUIRE_ERROR(c.reserve(std::numeric_limits<Index>::max() / 2),
                         "max_len = 4611686018427387903");
    POSENC_REQUIRE_ERROR(c.reserve(std::numeric_limits<Index>::max() / 2),
                         "posenc::limits::max_elements");
    POSENC_REQUIRE_ERROR(c.ensure(-1), "max_position = -1");
    POSENC_REQUIRE_ERROR(c.ensure(std::numeric_limits<Index>::max()),
                         "max_position = 9223372036854775807");
  }
  POSENC_REQUIRE_ERROR(posenc::rope_cache<float>(posenc::plain_rope_frequencies(8),
                                                 posenc::rope_precision::exact, -3),
                       "max_len = -3");
  // multi-axis
  POSENC_REQUIRE_ERROR(posenc::mrope<float>(64, {16, 24}), "sum(sections) = 40");
  POSENC_REQUIRE_ERROR(posenc::mrope<float>(64, {8, -1}), "sections[1] = -1");
  POSENC_REQUIRE_ERROR(posenc::axial_rope_2d<float>(64, 100.0, 30), "rotary_dim = 30");
  POSENC_REQUIRE_ERROR(posenc::multi_axis_rotary<float>(8, {1.0, 0.5}, {0, 2}, 2),
                       "axis_of_pair[1] = 2");
  {
    auto m = posenc::mrope<float>(8, {1, 1, 2});
    rmat<float> y = rmat<float>::Zero(2, 8);
    posenc::rope_axis_positions p2(2, 2), p3(3, 3), pneg = posenc::rope_axis_positions::Zero(3, 2);
    p2.setZero();
    p3.setZero();
    pneg(2, 1) = -4;
    POSENC_REQUIRE_ERROR(m.apply(y, p2), "positions.rows() = 2");
    POSENC_REQUIRE_ERROR(m.apply(y, p3), "positions.cols() = 3");
    POSENC_REQUIRE_ERROR(m.apply(y, pneg), "positions(2, 1) = -4");
    rmat<float> bad = rmat<float>::Zero(2, 6);
    POSENC_REQUIRE_ERROR(m.apply(bad, posenc::rope_axis_positions::Zero(3, 2)), "dim = 6");
  }
  // weight conversion
  rmat<float> w = rmat<float>::Zero(10, 3);
  POSENC_REQUIRE_ERROR(
      posenc::rope_convert_weight(w, 4, rope_pairing::half, rope_pairing::interleaved),
      "weight.rows() = 10");
  POSENC_REQUIRE_ERROR(
      posenc::rope_convert_weight(w, 0, rope_pairing::half, rope_pairing::interleaved),
      "heads = 0");
  POSENC_REQUIRE_ERROR(
      posenc::rope_convert_weight(w, 2, rope_pairing::half, rope_pairing::interleaved, 3),
      "rotary_dim = 3");
  POSENC_REQUIRE_ERROR(
      posenc::rope_dim_permutation(4, rope_pairing::half, rope_pairing::interleaved, 6),
      "rotary_dim = 6");
}

TEST_CASE("rotary: far positions, reserve and rotary_dim limits", "[rotary][errors][far]") {
  constexpr Index kmax = std::numeric_limits<Index>::max();
  // only -1 means "= head_dim"
  POSENC_REQUIRE_ERROR(rotary_embedding<float>(8, -2), "rotary_dim = -2");
  POSENC_REQUIRE_ERROR(rotary_embedding<float>(8, kmax), "rotary_dim = 9223372036854775807");
  CHECK(rotary_embedding<float>(8, -1).rotary_dim() == 8);
  POSENC_REQUIRE_ERROR(
      posenc::rope_dim_permutation(8, rope_pairing::half, rope_pairing::interleaved, -2),
      "rotary_dim = -2");
  CHECK(posenc::rope_dim_permutation(8, rope_pairing::half, rope_pairing::interleaved, -1).size() ==
        8u);
  POSENC_REQUIRE_ERROR(posenc::axial_rope_2d<float>(8, 100.0, -4), "rotary_dim = -4");
  CHECK_NOTHROW(posenc::axial_rope_2d<float>(8, 100.0, -1));

  for (const auto mode : cache_modes) {
    posenc::rope_options opt;
    opt.cache = mode;
    opt.cache_limit = 64;
    rotary_embedding<double> rope(8, -1, 1e4, rope_pairing::half, opt);
    posenc::rope_options fly = opt;
    fly.cache = posenc::rope_cache_mode::on_the_fly;
    rotary_embedding<double> ref(8, -1, 1e4, rope_pairing::half, fly);
    const rmat<double> x = rmat<double>::Constant(3, 8, 0.5);

    // a position id of INT64_MAX grows the cache to its limit, not past it
    const std::vector<Index> ids{0, kmax, 5};
    rmat<double> y = rope.rotated(x, ids);
    CHECK(y == ref.rotated(x, ids));
    CHECK(rope.cache().size() <= opt.cache_limit);
    if (mode == posenc::rope_cache_mode::cached) CHECK(rope.cache().size() == opt.cache_limit);

    // the last offset whose last token fits in an Index (offset + seq - 1 == INT64_MAX)
    const Index last = kmax - 2;
    y = rope.rotated(x, last);
    REQUIRE(y.allFinite());
    CHECK(y == ref.rotated(x, last));
    POSENC_REQUIRE_ERROR(rope.apply(y, kmax - 1), "offset = 9223372036854775806");
    POSENC_REQUIRE_ERROR(rope.apply(y, kmax), "offset = 9223372036854775807");
    CHECK_NOTHROW(rope.apply(y.topRows(1), kmax));  // one token at INT64_MAX is fine

    // reserve never stores more than cache_limit rows (2^40 rows would be terabytes)
    rope.reserve(Index(1) << 40);
    CHECK(rope.cache().size() == (mode == posenc::rope_cache_mode::cached ? opt.cache_limit : 0));
    POSENC_REQUIRE_ERROR(rope.reserve(-3), "max_len = -3");
  }
  // max_len up front is capped by cache_limit too
  posenc::rope_options big;
  big.max_len = Index(1) << 40;
  big.cache_limit = 16;
  CHECK(rotary_embedding<float>(8, -1, 1e4, rope_pairing::half, big).cache().size() == 16);
  // (2^62 + 2) * 4 wraps to 8: an ids count must not match a wrapped batch * seq
  std::vector<float> buf(8);
  const posenc::heads_view<float> huge(buf.data(), {(Index(1) << 62) + 2, 4, 1, 2}, {0, 0, 0, 1});
  rotary_embedding<float> small(2);
  POSENC_REQUIRE_ERROR(small.apply(huge, std::vector<Index>(8, 0)), "position_ids.size() = 8");
}

TEST_CASE("rotary: a CPU backend refuses position ids in device memory", "[rotary][errors]") {
  // rope_positions::on_device() is for rotary_embedding<Scalar, backend::cuda>; a CPU object
  // must not read the pointer (it is not host memory)
  rotary_embedding<float> rope(8);
  posenc::row_matrix<float> x = posenc::row_matrix<float>::Ones(3, 8);
  const Index* not_host = reinterpret_cast<const Index*>(std::uintptr_t{0x10});
  POSENC_REQUIRE_ERROR(rope.apply(x, posenc::rope_positions::on_device(not_host, 3)),
                       "rotary_embedding::apply: position_ids = device memory");
  CHECK(posenc::rope_positions::on_device(not_host, 3).on_device());
  CHECK_FALSE(posenc::rope_positions(std::vector<Index>{1, 2}).on_device());
}
