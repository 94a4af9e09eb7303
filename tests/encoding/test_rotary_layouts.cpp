// RoPE apply on every layout: Eigen heads of any storage, [L, H, D], [B, L, H, D] and
// [B, H, L, D] views, in and out of place, GQA, position ids, the cache.

#include <cstring>
#include <vector>

#include "test_rotary_support.hpp"

using posenc::Index;
using posenc::rope_pairing;
using posenc::rope_role;
using posenc::rotary_embedding;
using namespace posenc_test;

namespace {

/// Reference: rotate head h of sequence b of a [B, L, H, D] buffer as a one-head matrix.
rmat<float> head_of(const std::vector<float>& buf, Index B, Index L, Index H, Index D, Index b,
                    Index h, bool bhsd) {
  (void)B;
  rmat<float> m(L, D);
  for (Index l = 0; l < L; ++l)
    for (Index d = 0; d < D; ++d)
      m(l, d) = buf[static_cast<std::size_t>(bhsd ? ((b * H + h) * L + l) * D + d
                                                  : ((b * L + l) * H + h) * D + d)];
  return m;
}

}  // namespace

TEST_CASE("rotary: multi-head and batched views equal per-head application", "[rotary][layout]") {
  const Index B = 2, L = 9, H = 3, D = 24, r = 16;
  for (auto pairing : {rope_pairing::half, rope_pairing::interleaved})
    for (bool bhsd : {false, true}) {
      INFO(posenc::to_string(pairing) << (bhsd ? " bhsd" : " bshd"));
      rotary_embedding<float> rope(D, r, 1e4, pairing);
      const auto src = random_buffer<float>(static_cast<std::size_t>(B * L * H * D), 41);
      // per-batch position ids: B*L
      std::vector<Index> ids(static_cast<std::size_t>(B * L));
      for (Index i = 0; i < B * L; ++i) ids[static_cast<std::size_t>(i)] = (i * 7) % 23;
      auto buf = src;
      const auto v = bhsd ? posenc::view_bhsd(buf.data(), B, H, L, D)
                          : posenc::view_bshd(buf.data(), B, L, H, D);
      rope.apply(v, ids);
      std::vector<float> out(src.size(), 0.0f);
      const auto vin = bhsd ? posenc::view_bhsd(src.data(), B, H, L, D)
                            : posenc::view_bshd(src.data(), B, L, H, D);
      const auto vout = bhsd ? posenc::view_bhsd(out.data(), B, H, L, D)
                             : posenc::view_bshd(out.data(), B, L, H, D);
      rope.apply(vin, vout, ids);
      CHECK(std::memcmp(out.data(), buf.data(), buf.size() * sizeof(float)) == 0);
      for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h) {
          std::vector<Index> row_ids(ids.begin() + b * L, ids.begin() + (b + 1) * L);
          const auto want = rope.rotated(head_of(src, B, L, H, D, b, h, bhsd), row_ids);
          CHECK(same_bits(head_of(buf, B, L, H, D, b, h, bhsd), want));
        }
      // shared ids (L of them) equal the same ids repeated for every sequence
      auto shared = src, repeated = src;
      std::vector<Index> lids(ids.begin(), ids.begin() + L), rep(lids);
      rep.insert(rep.end(), lids.begin(), lids.end());
      rope.apply(bhsd ? posenc::view_bhsd(shared.data(), B, H, L, D)
                      : posenc::view_bshd(shared.data(), B, L, H, D),
                 lids);
      rope.apply(bhsd ? posenc::view_bhsd(repeated.data(), B, H, L, D)
                      : posenc::view_bshd(repeated.data(), B, L, H, D),
                 rep);
      CHECK(shared == repeated);
    }
}

TEST_CASE("rotary: [L, H, D] views, fused QKV slices and GQA in one call", "[rotary][layout]") {
  const Index L = 6, Hq = 8, Hk = 2, D = 16;
  rotary_embedding<double> rope(D);
  // a fused [L, (Hq + 2 Hk) * D] projection output: q, k, v side by side in each row
  const Index row = (Hq + 2 * Hk) * D;
  auto fused = random_buffer<double>(static_cast<std::size_t>(L * row), 51);
  const auto orig = fused;
  const posenc::strided_view<double, 3> q(fused.data(), {L, Hq, D}, {row, D, 1});
  const posenc::strided_view<double, 3> k(fused.data() + Hq * D, {L, Hk, D}, {row, D, 1});
  rope.apply_qk(q, k, 10);
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < Hq + 2 * Hk; ++h) {
      Eigen::Map<const rmat<double>> before(orig.data() + l * row + h * D, 1, D);
      Eigen::Map<const rmat<double>> after(fused.data() + l * row + h * D, 1, D);
      if (h >= Hq + Hk) {
        CHECK(same_bits(after, before));  // v untouched
      } else {
        rmat<double> want = before;
        rope.apply(want, 10 + l);
        CHECK(same_bits(after, want));
      }
    }
  // out of place GQA into separate buffers leaves the input alone
  std::vector<double> qo(static_cast<std::size_t>(L * Hq * D)),
      ko(static_cast<std::size_t>(L * Hk * D));
  auto src = orig;
  const auto qin = posenc::heads_view<const double>(src.data(), {1, L, Hq, D}, {0, row, D, 1});
  const auto kin =
      posenc::heads_view<const double>(src.data() + Hq * D, {1, L, Hk, D}, {0, row, D, 1});
  rope.apply_qk(qin, posenc::view_shd(qo.data(), L, Hq, D), kin,
                posenc::view_shd(ko.data(), L, Hk, D), 10);
  CHECK(src == orig);
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < Hq; ++h)
      CHECK(std::memcmp(&qo[static_cast<std::size_t>((l * Hq + h) * D)],
                        &fused[static_cast<std::size_t>(l * row + h * D)],
                        D * sizeof(double)) == 0);
}

TEST_CASE("rotary: Eigen heads of any storage order and expression inputs", "[rotary][layout]") {
  rotary_embedding<double> rope(8, 6, 1e4, rope_pairing::interleaved);
  const auto x = random_matrix<double>(5, 8, 61);
  const auto want = rope.rotated(x, 3);
  Eigen::MatrixXd col = x;  // column-major: dims strided, so the portable kernel runs; with
  rope.apply(col, 3);       // FMA contraction (-march with FMA) it may round differently
  CHECK(max_abs_diff(col, want) <= 1e-15 * (1 + want.cwiseAbs().maxCoeff()));
  rmat<double> big = random_matrix<double>(9, 12, 62);
  const rmat<double> big0 = big;
  rope.apply(big.block(2, 3, 5, 8), 3);  // a block with an outer stride
  big0.block(2, 3, 5, 8);
  rmat<double> blk_want = rope.rotated(big0.block(2, 3, 5, 8), 3);
  CHECK(same_bits(big.block(2, 3, 5, 8), blk_want));
  CHECK(same_bits(big.leftCols(3), big0.leftCols(3)));
  // an expression input is evaluated first
  CHECK(same_bits(rope.rotated(x * 2.0, 3), rope.rotated(rmat<double>(x * 2.0), 3)));
  Eigen::Map<rmat<double>> mapped(big.data(), 3, 8);
  rmat<double> copy = mapped;
  rope.apply(mapped, 0);
  rope.apply(copy, 0);
  CHECK(same_bits(mapped, copy));
  // empty inputs are fine
  rmat<double> none(0, 8);
  CHECK_NOTHROW(rope.apply(none, 5));
}

TEST_CASE("rotary: column-major and strided heads give the contiguous heads' bits",
          "[rotary][layout]") {
  // Dims with a stride (a column-major matrix, a strided view) are rotated by the same
  // kernel as contiguous ones (gathered a few heads at a time), so the bits are the same
  // on every backend, in both pairings, in place and out of place, with a partial tail.
  for (const auto pairing : {rope_pairing::half, rope_pairing::interleaved}) {
    rotary_embedding<float> rope(16, 12, 1e4, pairing);
    const rmat<float> x = random_matrix<float>(9, 16, 63);
    const rmat<float> want = rope.rotated(x, 4);
    Eigen::MatrixXf col = x;
    rope.apply(col, 4);
    CHECK(same_bits(rmat<float>(col), want));
    Eigen::MatrixXf col_out(9, 16);
    rope.apply(x, col_out, 4);
    CHECK(same_bits(rmat<float>(col_out), want));
    rmat<float> back = want;
    rope.invert(back, 4);
    Eigen::MatrixXf col_back = want;
    rope.invert(col_back, 4);
    CHECK(same_bits(rmat<float>(col_back), back));
    // [L, H, D] heads with the dims two apart
    const Index L = 5, H = 3, D = 16;
    std::vector<float> strided(static_cast<std::size_t>(L * H * D * 2)),
        dense(static_cast<std::size_t>(L * H * D));
    for (std::size_t e = 0; e < dense.size(); ++e)
      dense[e] = strided[2 * e] = static_cast<float>(std::sin(0.37 * double(e)));
    rope.apply(posenc::view_shd(dense.data(), L, H, D), 7);
    rope.apply(posenc::heads_view<float>(strided.data(), {1, L, H, D}, {0, 2 * H * D, 2 * D, 2}),
               7);
    for (std::size_t e = 0; e < dense.size(); ++e) CHECK(strided[2 * e] == dense[e]);
  }
}

TEST_CASE("rotary: the cache grows on demand and equals on-the-fly bit for bit",
          "[rotary][cache]") {
  for (auto precision :
       {posenc::rope_precision::exact, posenc::rope_precision::float32_reference}) {
    posenc::rope_options cached, fly;
    cached.precision = fly.precision = precision;
    cached.max_len = 16;
    fly.cache = posenc::rope_cache_mode::on_the_fly;
    rotary_embedding<float> a(64, 64, 5e5, rope_pairing::half, cached);
    rotary_embedding<float> b(64, 64, 5e5, rope_pairing::half, fly);
    CHECK(a.cache().size() == 16);
    CHECK(b.cache().size() == 0);
    const auto x = random_matrix<float>(8, 64, 71);
    CHECK(same_bits(a.rotated(x, 4), b.rotated(x, 4)));
    CHECK(a.cache().size() == 16);
    CHECK(same_bits(a.rotated(x, 100), b.rotated(x, 100)));
    CHECK(a.cache().size() >= 108);
    const std::vector<Index> far{0, 20001, 5, 20002};
    CHECK(same_bits(a.rotated(x.topRows(4), far), b.rotated(x.topRows(4), far)));
    CHECK(a.cache().size() >= 20003);
    CHECK(b.cache().size() == 0);
  }
  // a far position id beyond the cache limit is computed on the fly, not cached
  {
    posenc::rope_options small, fly;
    small.cache_limit = 64;
    fly.cache = posenc::rope_cache_mode::on_the_fly;
    rotary_embedding<float> a(32, -1, 1e4, rope_pairing::interleaved, small);
    rotary_embedding<float> b(32, -1, 1e4, rope_pairing::interleaved, fly);
    const auto x = random_matrix<float>(4, 32, 72);
    const std::vector<Index> ids{0, 1000000000, 63, 64};
    CHECK(same_bits(a.rotated(x, ids), b.rotated(x, ids)));
    CHECK(a.cache().size() == 64);
    CHECK(same_bits(a.rotated(x, 1LL << 40), b.rotated(x, 1LL << 40)));
    CHECK(a.cache().size() == 64);
  }
  // the cache's rows are what rope_row computes
  posenc::rope_cache<double> cache(posenc::plain_rope_frequencies(8), posenc::rope_precision::exact,
                                   4);
  cache.ensure(10);
  CHECK(cache.size() >= 11);
  std::vector<double> c(4), s(4);
  posenc::detail::rope_row(cache.frequencies(), posenc::rope_precision::exact, 9, rope_role::query,
                           c.data(), s.data());
  CHECK(std::memcmp(c.data(), cache.cos(9), 4 * sizeof(double)) == 0);
  CHECK(std::memcmp(s.data(), cache.sin(9), 4 * sizeof(double)) == 0);
  CHECK(cache.cos(9)[1] == std::cos(9.0 * cache.frequencies().inv_freq[1]));
}

TEST_CASE("rotary: M-RoPE with equal ids on every axis is 1D RoPE", "[rotary][multi_axis]") {
  auto m = posenc::mrope<float>(128, {16, 24, 24}, 1e6);
  rotary_embedding<float> one(128, -1, 1e6);
  const auto x = random_matrix<float>(5, 128, 81);
  posenc::rope_axis_positions p(3, 5);
  for (Index l = 0; l < 5; ++l) p.col(l).setConstant(3 * l + 2);
  rmat<float> y = x;
  m.apply(y, p);
  std::vector<Index> ids{2, 5, 8, 11, 14};
  CHECK(same_bits(y, one.rotated(x, ids)));
  // batched q/k with GQA: each head equals the one-head result
  std::vector<float> qb(static_cast<std::size_t>(5 * 4 * 128)),
      kb(static_cast<std::size_t>(5 * 2 * 128));
  for (Index l = 0; l < 5; ++l) {
    for (Index h = 0; h < 4; ++h)
      Eigen::Map<rmat<float>>(&qb[static_cast<std::size_t>((l * 4 + h) * 128)], 1, 128) = x.row(l);
    for (Index h = 0; h < 2; ++h)
      Eigen::Map<rmat<float>>(&kb[static_cast<std::size_t>((l * 2 + h) * 128)], 1, 128) = x.row(l);
  }
  m.apply_qk(posenc::view_shd(qb.data(), 5, 4, 128), posenc::view_shd(kb.data(), 5, 2, 128), p);
  for (Index l = 0; l < 5; ++l) {
    CHECK(
        same_bits(Eigen::Map<rmat<float>>(&qb[static_cast<std::size_t>((l * 4 + 3) * 128)], 1, 128),
                  y.row(l)));
    CHECK(
        same_bits(Eigen::Map<rmat<float>>(&kb[static_cast<std::size_t>((l * 2 + 1) * 128)], 1, 128),
                  y.row(l)));
  }
  // 2D axial: the relative property holds per axis
  auto ax = posenc::axial_rope_2d<double>(32, 100.0);
  const auto q = random_matrix<double>(1, 32, 82), k = random_matrix<double>(1, 32, 83);
  auto dot = [&](Index r1, Index c1, Index r2, Index c2) {
    rmat<double> a = q, b = k;
    posenc::rope_axis_positions pa(2, 1), pb(2, 1);
    pa << r1, c1;
    pb << r2, c2;
    ax.apply(a, pa);
    ax.apply(b, pb);
    return a.row(0).dot(b.row(0));
  };
  CHECK(std::abs(dot(3, 5, 1, 2) - dot(12, 9, 10, 6)) < 1e-12);
  CHECK(std::abs(dot(3, 5, 1, 2) - dot(3, 5, 2, 1)) > 1e-6);
}
