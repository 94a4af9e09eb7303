// RoPE properties: norm preservation, the relative property for every scaling (xPos
// included), offsets and shards, inversion, pairing conversion, partial rotary tails.

#include <cmath>
#include <vector>

#include "test_rotary_support.hpp"

using posenc::Index;
using posenc::rope_config;
using posenc::rope_pairing;
using posenc::rope_role;
using posenc::rope_scaling_type;
using posenc::rotary_embedding;
using namespace posenc_test;

namespace {

/// A 64-dim config of every scaling, with parameters shaped like real models'.
std::vector<std::pair<rope_config, Index>> every_scaling(rope_pairing pairing) {
  std::vector<std::pair<rope_config, Index>> out;
  auto make = [&](rope_scaling_type t) {
    rope_config c;
    c.head_dim = 64;
    c.pairing = pairing;
    c.scaling = t;
    return c;
  };
  out.push_back({make(rope_scaling_type::none), 0});
  {
    auto c = make(rope_scaling_type::linear);
    c.factor = 4;
    out.push_back({c, 0});
  }
  {
    auto c = make(rope_scaling_type::ntk);
    c.factor = 8;
    out.push_back({c, 0});
  }
  {
    auto c = make(rope_scaling_type::dynamic);
    c.factor = 2;
    c.original_max_positions = 2048;
    out.push_back({c, 8192});
  }
  {
    auto c = make(rope_scaling_type::yarn);
    c.base = 1e6;
    c.factor = 4;
    c.original_max_positions = 32768;
    out.push_back({c, 0});
  }
  {
    auto c = make(rope_scaling_type::llama3);
    c.base = 500000;
    c.factor = 8;
    c.low_freq_factor = 1;
    c.high_freq_factor = 4;
    c.original_max_positions = 8192;
    out.push_back({c, 0});
  }
  {
    auto c = make(rope_scaling_type::longrope);
    c.factor = 32;
    c.original_max_positions = 4096;
    for (int i = 0; i < 32; ++i) {
      c.short_factor.push_back(1.0 + 0.01 * i);
      c.long_factor.push_back(1.0 + 1.5 * i);
    }
    out.push_back({c, 4096});
    out.push_back({c, 8192});
  }
  {
    auto c = make(rope_scaling_type::xpos);
    c.xpos_scale_base = 512;
    out.push_back({c, 0});
  }
  return out;
}

}  // namespace

TEST_CASE("rotary: rotation preserves norms", "[rotary][property]") {
  for (auto pairing : {rope_pairing::half, rope_pairing::interleaved})
    for (Index r : {8, 32, 64}) {
      rotary_embedding<double> rope(64, r, 1e4, pairing);
      const auto x = random_matrix<double>(40, 64, 3);
      const auto y = rope.rotated(x, 1000);
      for (Index i = 0; i < x.rows(); ++i)
        CHECK(std::abs(y.row(i).norm() - x.row(i).norm()) < 1e-12);
    }
}

TEST_CASE("rotary: <R(m)q, R(n)k> depends only on m - n, for every scaling", "[rotary][property]") {
  const auto q = random_matrix<double>(1, 64, 11);
  const auto k = random_matrix<double>(1, 64, 12);
  for (auto pairing : {rope_pairing::half, rope_pairing::interleaved})
    for (const auto& [cfg, seq_len] : every_scaling(pairing)) {
      INFO("scaling " << posenc::to_string(cfg.scaling) << ", seq_len " << seq_len << ", "
                      << posenc::to_string(pairing));
      rotary_embedding<double> rope(cfg, seq_len);
      auto dot = [&](Index m, Index n) {
        return rope.rotated(q, m, rope_role::query)
            .row(0)
            .dot(rope.rotated(k, n, rope_role::key).row(0));
      };
      for (Index delta : {0, 1, 5, 37, 300}) {
        const double ref = dot(delta, 0);
        double worst = 0;
        for (Index start : {1, 17, 1000, 5000})
          worst = std::max(worst, std::abs(dot(start + delta, start) - ref));
        INFO("delta " << delta << ": reference " << ref << ", worst deviation " << worst);
        CHECK(worst < 1e-9 * (1 + std::abs(ref)));
      }
      // and the dot product really does change with the offset
      CHECK(std::abs(dot(5, 0) - dot(0, 0)) > 1e-6);
    }
}

TEST_CASE("rotary: xPos scales combine to zeta^((m - n)/scale_base)", "[rotary][property][xpos]") {
  rope_config cfg;
  cfg.head_dim = 16;
  cfg.scaling = rope_scaling_type::xpos;
  cfg.xpos_scale_base = 64;
  rotary_embedding<double> rope(cfg, 0);
  const auto& f = rope.frequencies();
  // q = e_a (pair i's first dim) and k = e_a: q.k = zeta_i^((m-n)/s) cos((m-n) w_i)
  for (Index i = 0; i < 8; ++i) {
    rmat<double> e = rmat<double>::Zero(1, 16);
    e(0, i) = 1;
    const Index m = 40, n = 9;
    const double got =
        rope.rotated(e, m, rope_role::query).row(0).dot(rope.rotated(e, n, rope_role::key).row(0));
    const double zeta = (2.0 * static_cast<double>(i) / 16 + 0.4) / 1.4;
    const double want =
        std::pow(zeta, static_cast<double>(m - n) / 64) *
        std::cos(static_cast<double>(m - n) * f.inv_freq[static_cast<std::size_t>(i)]);
    CHECK(std::abs(got - want) < 1e-12);
  }
}

TEST_CASE("rotary: offsets and shards equal slices of the full application", "[rotary][property]") {
  for (auto pairing : {rope_pairing::half, rope_pairing::interleaved})
    for (auto mode : {posenc::rope_cache_mode::cached, posenc::rope_cache_mode::on_the_fly}) {
      posenc::rope_options opt;
      opt.cache = mode;
      rotary_embedding<float> rope(32, 24, 1e4, pairing, opt);
      const auto x = random_matrix<float>(100, 32, 5);
      const auto full = rope.rotated(x, 0);
      // shards of 30, 30, 40 rows at their offsets
      for (Index start : {0, 30, 60}) {
        const Index len = start == 60 ? 40 : 30;
        rmat<float> shard = x.middleRows(start, len);
        rope.apply(shard, start);
        CHECK(same_bits(shard, full.middleRows(start, len)));
      }
      // decoding one token at a time (KV cache) grows the cache and matches too
      rotary_embedding<float> step(32, 24, 1e4, pairing, opt);
      for (Index t = 0; t < x.rows(); ++t) {
        rmat<float> row = x.row(t);
        step.apply(row, t);
        CHECK(same_bits(row, full.row(t)));
      }
      // position ids listing the same positions
      std::vector<Index> ids(100);
      for (Index i = 0; i < 100; ++i) ids[static_cast<std::size_t>(i)] = 99 - i;
      const auto rev = rope.rotated(x.colwise().reverse(), ids);
      CHECK(same_bits(rev.colwise().reverse(), full));
    }
}

TEST_CASE("rotary: rotating by -theta inverts", "[rotary][property]") {
  for (auto pairing : {rope_pairing::half, rope_pairing::interleaved}) {
    rotary_embedding<double> rope(64, 48, 1e4, pairing);
    const auto x = random_matrix<double>(20, 64, 8);
    rmat<double> y = x;
    rope.apply(y, 12345);
    CHECK(max_abs_diff(y, x) > 0.1);
    rope.invert(y, 12345);
    CHECK(max_abs_diff(y, x) < 1e-12);

    rotary_embedding<float> ropef(64, 48, 1e4, pairing);
    rmat<float> yf = x.cast<float>();
    ropef.apply(yf, 777);
    ropef.invert(yf, 777);
    CHECK(max_abs_diff(yf, x) < 2e-6);
    // batched inverse too
    std::vector<float> buf = random_buffer<float>(2 * 5 * 3 * 64, 4);
    const std::vector<float> orig = buf;
    auto v = posenc::view_bshd(buf.data(), 2, 5, 3, 64);
    ropef.apply(v, 50);
    ropef.invert(v, 50);
    double worst = 0;
    for (std::size_t i = 0; i < buf.size(); ++i)
      worst = std::max(worst, std::abs(double(buf[i]) - orig[i]));
    CHECK(worst < 2e-6);
  }
}

TEST_CASE("rotary: half and interleaved agree after the dim permutation", "[rotary][property]") {
  for (Index r : {64, 40}) {
    const auto x = random_matrix<double>(30, 64, 9);
    const auto to_int =
        posenc::rope_dim_permutation(64, rope_pairing::half, rope_pairing::interleaved, r);
    const auto to_half =
        posenc::rope_dim_permutation(64, rope_pairing::interleaved, rope_pairing::half, r);
    rmat<double> px(30, 64);
    for (Index j = 0; j < 64; ++j) px.col(j) = x.col(to_int[static_cast<std::size_t>(j)]);
    rotary_embedding<double> half(64, r, 1e4, rope_pairing::half);
    rotary_embedding<double> inter(64, r, 1e4, rope_pairing::interleaved);
    const auto yh = half.rotated(x, 3);
    const auto yi = inter.rotated(px, 3);
    rmat<double> pyh(30, 64), back(30, 64);
    for (Index j = 0; j < 64; ++j) pyh.col(j) = yh.col(to_int[static_cast<std::size_t>(j)]);
    for (Index j = 0; j < 64; ++j) back.col(j) = yi.col(to_half[static_cast<std::size_t>(j)]);
    CHECK(same_bits(yi, pyh));
    CHECK(same_bits(back, yh));
  }
}

TEST_CASE("rotary: converted Q/K weights give identical attention scores",
          "[rotary][property][convert]") {
  // GQA: 4 query heads, 2 KV heads, head dim 16, partial rotary 12, model dim 24
  const Index hq = 4, hk = 2, d = 16, r = 12, dm = 24, L = 7;
  const auto wq = random_matrix<double>(hq * d, dm, 21);
  const auto wk = random_matrix<double>(hk * d, dm, 22);
  const auto tokens = random_matrix<double>(L, dm, 23);
  auto scores = [&](const rmat<double>& wq_, const rmat<double>& wk_, rope_pairing p) {
    rmat<double> q = tokens * wq_.transpose(), k = tokens * wk_.transpose();  // [L, H*D]
    rotary_embedding<double> rope(d, r, 1e4, p);
    rope.apply_qk(posenc::view_shd(q.data(), L, hq, d), posenc::view_shd(k.data(), L, hk, d), 5);
    rmat<double> s(hq * L, L);
    for (Index h = 0; h < hq; ++h)
      s.middleRows(h * L, L) = q.middleCols(h * d, d) * k.middleCols((h / 2) * d, d).transpose();
    return s;
  };
  const auto wq_i =
      posenc::rope_convert_weight(wq, hq, rope_pairing::half, rope_pairing::interleaved, r);
  const auto wk_i =
      posenc::rope_convert_weight(wk, hk, rope_pairing::half, rope_pairing::interleaved, r);
  const auto s_half = scores(wq, wk, rope_pairing::half);
  const auto s_int = scores(wq_i, wk_i, rope_pairing::interleaved);
  CHECK(max_abs_diff(s_half, s_int) < 1e-12 * (1 + s_half.cwiseAbs().maxCoeff()));
  // the wrong pairing on unconverted weights is not the same model
  CHECK(max_abs_diff(s_half, scores(wq, wk, rope_pairing::interleaved)) > 1e-3);
  // and back: the round trip is the identity, bit for bit
  CHECK(same_bits(
      posenc::rope_convert_weight(wq_i, hq, rope_pairing::interleaved, rope_pairing::half, r), wq));
  // tail rows (dims r..d-1 of each head) never move
  CHECK(same_bits(wq_i.middleRows(r, d - r), wq.middleRows(r, d - r)));
}

TEST_CASE("rotary: partial rotary leaves the tail bit-identical", "[rotary][property]") {
  rmat<float> x = random_matrix<float>(16, 80, 31);
  x(0, 70) = std::nanf("");  // even NaN payloads pass through untouched
  x(1, 79) = -0.0f;
  for (auto pairing : {rope_pairing::half, rope_pairing::interleaved}) {
    rotary_embedding<float> rope(80, 32, 1e4, pairing);
    rmat<float> in_place = x;
    rope.apply(in_place, 100);
    rmat<float> out = rmat<float>::Constant(16, 80, 7.0f);
    rope.apply(x, out, 100);
    CHECK(same_bits(in_place.rightCols(48), x.rightCols(48)));
    CHECK(same_bits(out.rightCols(48), x.rightCols(48)));
    CHECK(same_bits(out, in_place));
  }
}
