// Flash attention on the GPU (attention/cuda/flash.cuh) against the CPU reference kernel
// (multi_head_attention in double, on the same storage-rounded inputs) and, for the
// log-sum-exp, against the CPU flash kernel in double (itself checked against a direct
// double computation in tests/attention/test_merge.cpp).
//
// Bounds, max |device − reference| / max |reference| over the output (docs/backends.md):
//   float 2e-5, double 1e-12, half 2e-3 (one rounding of the output to 11 bits, plus
//   float arithmetic), bfloat16 1e-2 (8 bits); lse: the same bound times (1 + |lse|).
// Every output buffer starts as a sentinel (NaN) with padding around the view: a row not
// written, or a write outside the view, fails.
#include <algorithm>
#include <cmath>
#include <limits>
#include <posenc/attention.hpp>
#include <posenc/attention/flash.hpp>
#include <posenc/cuda.cuh>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_support.cuh"
#include "support/catch.hpp"

namespace pc = posenc::cuda;
using posenc::Index;

namespace {

using posenc_test::download;
using posenc_test::upload;

constexpr double inf = std::numeric_limits<double>::infinity();

struct shape {
  Index batch, heads, kv_heads, len_q, len_k, dim, dim_v;
};

template <class T>
double bound() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, float>) return 2e-5;
  if constexpr (std::is_same_v<T, Eigen::half>) return 2e-3;
  return 1e-2;
}

template <class T>
std::vector<T> random_values(Index n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<T>(u(gen));
  return v;
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  std::vector<double> d(x.size());
  for (std::size_t e = 0; e < x.size(); ++e) d[e] = static_cast<double>(static_cast<float>(x[e]));
  if constexpr (std::is_same_v<T, double>) d = x;
  return d;
}

/// One problem in [B, L, H, d] layout (or [B, H, L, d] with `bhsd`), on host and device.
template <class T>
struct problem {
  shape z;
  bool bhsd;
  std::vector<T> q, k, v;
  posenc::cuda::device_buffer<T> dq, dk, dv;
  problem(const shape& s, unsigned seed, bool bhsd_layout = false)
      : z(s),
        bhsd(bhsd_layout),
        q(random_values<T>(s.batch * s.len_q * s.heads * s.dim, seed)),
        k(random_values<T>(s.batch * s.len_k * s.kv_heads * s.dim, seed + 1)),
        v(random_values<T>(s.batch * s.len_k * s.kv_heads * s.dim_v, seed + 2)),
        dq(upload(q)),
        dk(upload(k)),
        dv(upload(v)) {}
  template <class U>
  posenc::heads_view<U> view(U* p, Index len, Index heads, Index dim) const {
    return bhsd ? posenc::view_bhsd(p, z.batch, heads, len, dim)
                : posenc::view_bshd(p, z.batch, len, heads, dim);
  }
};

struct result {
  std::vector<double> out, lse;  // out in the problem's layout, lse [B, H, Lq]
};

/// The device call; outputs start as NaN with 7 elements of padding on each side.
template <class T, class Policy>
result run_device(const problem<T>& p, const posenc::attention_config& cfg, const Policy& pol,
                  Index splits = 0, bool with_lse = true) {
  const shape& z = p.z;
  const Index n_out = z.batch * z.len_q * z.heads * z.dim_v, n_lse = z.batch * z.heads * z.len_q;
  using R = posenc::real_t<T>;
  const std::vector<T> sentinel(static_cast<std::size_t>(n_out + 14),
                                static_cast<T>(std::numeric_limits<float>::quiet_NaN()));
  const std::vector<R> lse_sentinel(static_cast<std::size_t>(n_lse + 14),
                                    std::numeric_limits<R>::quiet_NaN());
  auto dout = upload(sentinel);
  auto dlse = upload(lse_sentinel);
  const auto ov = p.view(dout.data() + 7, z.len_q, z.heads, z.dim_v);
  const auto qv = p.view(static_cast<const T*>(p.dq.data()), z.len_q, z.heads, z.dim);
  const auto kv = p.view(static_cast<const T*>(p.dk.data()), z.len_k, z.kv_heads, z.dim);
  const auto vv = p.view(static_cast<const T*>(p.dv.data()), z.len_k, z.kv_heads, z.dim_v);
  pc::flash_options opt;
  opt.splits = splits;
  if (with_lse)
    pc::flash_multi_head_attention(qv, kv, vv, ov,
                                   posenc::view_bhs(dlse.data() + 7, z.batch, z.heads, z.len_q),
                                   cfg, pol, opt);
  else
    pc::flash_multi_head_attention(qv, kv, vv, ov, cfg, pol, opt);
  const std::vector<T> out = download(dout);
  const std::vector<R> lse = download(dlse);
  for (int e = 0; e < 7; ++e) {  // the padding is untouched
    CHECK(std::isnan(static_cast<float>(out[static_cast<std::size_t>(e)])));
    CHECK(std::isnan(static_cast<float>(out[static_cast<std::size_t>(n_out + 7 + e)])));
    CHECK(std::isnan(static_cast<double>(lse[static_cast<std::size_t>(e)])));
    CHECK(std::isnan(static_cast<double>(lse[static_cast<std::size_t>(n_lse + 7 + e)])));
  }
  result r;
  for (Index e = 0; e < n_out; ++e)
    r.out.push_back(static_cast<double>(static_cast<float>(out[static_cast<std::size_t>(e + 7)])));
  if constexpr (std::is_same_v<T, double>)
    for (Index e = 0; e < n_out; ++e) r.out[static_cast<std::size_t>(e)] = out[std::size_t(e + 7)];
  if (with_lse)
    for (Index e = 0; e < n_lse; ++e) r.lse.push_back(static_cast<double>(lse[std::size_t(e + 7)]));
  return r;
}

/// The CPU: out from the reference kernel, lse from the flash kernel, both in double on the
/// storage-rounded inputs.
template <class T, class Policy>
result run_host(const problem<T>& p, const posenc::attention_config& cfg, const Policy& pol) {
  const shape& z = p.z;
  std::vector<double> q = widen(p.q), k = widen(p.k), v = widen(p.v);
  result r;
  r.out.assign(static_cast<std::size_t>(z.batch * z.len_q * z.heads * z.dim_v), 0.0);
  r.lse.assign(static_cast<std::size_t>(z.batch * z.heads * z.len_q), 0.0);
  std::vector<double> flash_out(r.out.size());
  const auto qv = p.view(static_cast<const double*>(q.data()), z.len_q, z.heads, z.dim);
  const auto kv = p.view(static_cast<const double*>(k.data()), z.len_k, z.kv_heads, z.dim);
  const auto vv = p.view(static_cast<const double*>(v.data()), z.len_k, z.kv_heads, z.dim_v);
  posenc::multi_head_attention(qv, kv, vv, p.view(r.out.data(), z.len_q, z.heads, z.dim_v), cfg,
                               pol);
  posenc::flash_multi_head_attention(
      qv, kv, vv, p.view(flash_out.data(), z.len_q, z.heads, z.dim_v),
      posenc::view_bhs(r.lse.data(), z.batch, z.heads, z.len_q), cfg, pol);
  return r;
}

void compare(const result& got, const result& want, double tol, bool lse = true) {
  double scale = 0, err = 0;
  for (std::size_t e = 0; e < want.out.size(); ++e) {
    scale = std::max(scale, std::abs(want.out[e]));
    const double d = std::abs(got.out[e] - want.out[e]);
    err = std::isnan(got.out[e]) != std::isnan(want.out[e]) ? inf : std::max(err, d);
  }
  INFO("max |device - reference| = " << err << ", max |reference| = " << scale);
  CHECK(err <= tol * std::max(scale, 1e-30));
  if (!lse) return;
  // the lse bound is the output's, relative to 1 + |lse|: for 16-bit storage the tensor-core
  // kernel rounds RoPE'd q and k to the storage type, which moves the logits by that much
  const double lt = tol;
  double worst = 0;  // max |lse error| / (1 + |lse|); infinite where -inf or NaN disagree
  std::size_t at = 0;
  for (std::size_t e = 0; e < want.lse.size(); ++e) {
    const double w = want.lse[e], g = got.lse[e];
    const double r = std::isnan(w) && std::isnan(g) ? 0.0
                     : w == -inf                    ? (g == -inf ? 0.0 : inf)
                                                    : std::abs(g - w) / (1 + std::abs(w));
    if (!(r <= worst)) {
      worst = std::isnan(r) ? inf : r;
      at = e;
    }
  }
  INFO("worst lse[" << at << "] = " << (got.lse.empty() ? 0.0 : got.lse[at]) << ", want "
                    << (want.lse.empty() ? 0.0 : want.lse[at]));
  CHECK(worst <= lt);
}

posenc::alibi_policy alibi(Index heads, posenc::alibi_form form = posenc::alibi_form::causal) {
  return posenc::alibi_policy(heads, form);
}

posenc::t5_bias_policy t5(Index heads, bool bidirectional = true) {
  posenc::t5_bucket_config c;
  c.num_buckets = 32;
  c.max_distance = 128;
  c.bidirectional = bidirectional;
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  posenc::dmatrix table(32, heads);
  for (Index e = 0; e < table.size(); ++e) table.data()[e] = u(gen);
  return posenc::t5_bias_policy(table, c);
}

/// A user policy with a distance table (not T5's type): the generic device table path.
struct wave_table : posenc::policy_base {
  static constexpr bool has_bias = true;
  static constexpr posenc::position_bias bias_form = posenc::position_bias::distance_table;
  struct head_type : posenc::distance_table_head {};
  head_type head(Index b, Index h, const posenc::attention_shape& s) const {
    head_type t;
    t.rel_min = -(s.q_offset + std::max<Index>(s.len_q, 1) - 1);
    const Index n = std::max<Index>(s.len_q, 1) + std::max<Index>(s.len_k, 1) - 1;
    for (Index r = 0; r < n; ++r)
      t.bias_by_rel.push_back(0.3 * std::sin(0.05 * double(t.rel_min + r) * double(h + 1)) -
                              0.1 * double(b));
    return t;
  }
};

/// A distance-table policy whose heads cover different distances (head h one more on the
/// left): the device kernel reads one frame for all heads and must refuse it.
struct uneven_table : posenc::policy_base {
  static constexpr bool has_bias = true;
  static constexpr posenc::position_bias bias_form = posenc::position_bias::distance_table;
  struct head_type : posenc::distance_table_head {};
  head_type head(Index /*b*/, Index h, const posenc::attention_shape& s) const {
    head_type t;
    t.rel_min = -(s.q_offset + s.len_q - 1) - h;
    t.bias_by_rel.assign(static_cast<std::size_t>(s.len_q + s.len_k - 1 + h), 0.0);
    return t;
  }
};

/// Every mask the kernel knows on a shape.
std::vector<std::pair<std::string, posenc::attention_config>> masks(const shape& z) {
  std::vector<std::pair<std::string, posenc::attention_config>> m;
  m.push_back({"none", {}});
  posenc::attention_config c;
  c.mask.causal = true;
  c.q_offset = std::max<Index>(0, z.len_k - z.len_q);
  m.push_back({"causal, offset", c});
  posenc::attention_config pad = c;
  for (Index b = 0; b < z.batch; ++b) pad.mask.key_lengths.push_back(b == 0 ? 0 : z.len_k - 3 * b);
  m.push_back({"causal, padding (one batch item without keys)", pad});
  return m;
}

template <class T>
void every_scheme(const shape& z, Index splits, bool bhsd) {
  const problem<T> p(z, 11 + unsigned(z.dim), bhsd);
  for (const auto& [name, cfg] : masks(z)) {
    INFO("mask " << name << ", splits " << splits << (bhsd ? ", [B, H, L, d]" : ""));
    {
      INFO("no positions");
      compare(run_device(p, cfg, posenc::no_position_policy{}, splits),
              run_host(p, cfg, posenc::no_position_policy{}), bound<T>());
    }
    {
      INFO("ALiBi");
      compare(run_device(p, cfg, alibi(z.heads), splits), run_host(p, cfg, alibi(z.heads)),
              bound<T>());
      const auto sym = alibi(z.heads, posenc::alibi_form::symmetric);
      compare(run_device(p, cfg, sym, splits), run_host(p, cfg, sym), bound<T>());
    }
    {
      INFO("T5");
      compare(run_device(p, cfg, t5(z.heads), splits), run_host(p, cfg, t5(z.heads)), bound<T>());
      compare(run_device(p, cfg, wave_table{}, splits), run_host(p, cfg, wave_table{}), bound<T>());
    }
    {
      INFO("RoPE");
      posenc::rotary_embedding<T, posenc::backend::cuda> rope(z.dim);
      compare(run_device(p, cfg, pc::rotary_policy<T>(rope), splits),
              run_host(p, cfg, posenc::rotary_policy(z.dim)), bound<T>());
    }
  }
}

}  // namespace

TEST_CASE("cuda flash: every scheme and mask, float, head dims 64, 80, 96, 128") {
  for (Index d : {64, 80, 96, 128}) {
    INFO("d = " << d);
    every_scheme<float>({2, 4, 2, 70, 90, d, d}, 0, false);
  }
}

TEST_CASE("cuda flash: odd sizes, GQA ratios, layouts and dims up to 256, float") {
  every_scheme<float>({1, 3, 3, 33, 65, 40, 24}, 0, true);    // MHA, dv != d, [B, H, L, d]
  every_scheme<float>({2, 8, 1, 5, 47, 256, 256}, 0, false);  // MQA, d = 256
  every_scheme<float>({1, 6, 2, 1, 1, 2, 3}, 0, false);       // one key, d = 2
}

TEST_CASE("cuda flash: double, half and bfloat16") {
  every_scheme<double>({2, 4, 2, 40, 75, 64, 64}, 0, false);
  every_scheme<Eigen::half>({2, 4, 2, 40, 75, 128, 128}, 0, false);
  every_scheme<Eigen::bfloat16>({2, 4, 1, 40, 75, 64, 64}, 0, true);
  every_scheme<Eigen::half>({1, 4, 2, 20, 40, 96, 96}, 0, false);  // tensor cores, d = 96
  every_scheme<Eigen::bfloat16>({1, 2, 1, 20, 40, 80, 80}, 0, false);
  // 16-bit storage off the tensor-core path (d = 40: the general kernel)
  every_scheme<Eigen::half>({1, 4, 2, 33, 70, 40, 40}, 0, false);
  every_scheme<Eigen::bfloat16>({1, 4, 2, 33, 70, 40, 40}, 2, false);
}

TEST_CASE("cuda flash: split-key decode (1-8 queries against long caches), any split count") {
  for (Index lq : {1, 3, 8})
    for (Index splits : {0, 1, 2, 7})
      every_scheme<float>({2, 8, 2, lq, 1500, 64, 64}, splits, false);
  every_scheme<Eigen::bfloat16>({1, 32, 8, 1, 3000, 128, 128}, 0, false);
}

TEST_CASE("cuda flash: boolean and additive masks, fully masked rows, NaN rows") {
  const shape z{2, 2, 1, 9, 200, 16, 8};  // 200 keys: splits = 3 gives 2 splits of 128
  const problem<float> p(z, 3);
  posenc::attention_config cfg;
  cfg.mask.allowed = posenc::bool_mask::Constant(z.len_q, z.len_k, true);
  for (Index i = 0; i < z.len_q; ++i)
    for (Index j = 0; j < z.len_k; ++j) cfg.mask.allowed(i, j) = (i + 2 * j) % 3 != 0;
  cfg.mask.allowed.row(4).setConstant(false);  // a row that sees nothing: zeros, lse -inf
  cfg.mask.additive = posenc::dmatrix::Zero(z.len_q, z.len_k);
  for (Index j = 0; j < z.len_k; ++j) cfg.mask.additive(2, j) = -0.25 * double(j);
  cfg.mask.additive(3, 5) = -inf;
  for (Index splits : {1, 3}) {
    const result got = run_device(p, cfg, alibi(z.heads), splits);
    compare(got, run_host(p, cfg, alibi(z.heads)), 2e-5);
    for (Index c = 0; c < z.dim_v; ++c)
      CHECK(got.out[std::size_t((4 * z.heads) * z.dim_v + c)] == 0);
    CHECK(got.lse[4] == -inf);
  }
  // a NaN query element: that row (all of its head's outputs) NaN, lse NaN; the rest finite
  problem<float> pn(z, 3);
  pn.q[std::size_t(2 * z.heads * z.dim + 1)] =
      std::numeric_limits<float>::quiet_NaN();  // (0, 2, 0)
  pn.dq = upload(pn.q);
  for (Index splits : {1, 3}) {
    const result got = run_device(pn, {}, posenc::no_position_policy{}, splits);
    for (Index c = 0; c < z.dim_v; ++c) {
      CHECK(std::isnan(got.out[std::size_t(2 * z.heads * z.dim_v + c)]));
      CHECK(std::isfinite(got.out[std::size_t((2 * z.heads + 1) * z.dim_v + c)]));
    }
    CHECK(std::isnan(got.lse[2]));
    CHECK(std::isfinite(got.lse[3]));
  }
}

TEST_CASE("cuda flash: RoPE scalings, pairings and partial rotary inside the tiles") {
  const shape z{1, 4, 2, 24, 300, 64, 64};
  const problem<float> p(z, 21);
  posenc::attention_config cfg;
  cfg.mask.causal = true;
  cfg.q_offset = 276;
  for (auto pairing : {posenc::rope_pairing::half, posenc::rope_pairing::interleaved})
    for (Index rdim : {64, 32}) {
      INFO("pairing " << int(pairing) << ", rotary dim " << rdim);
      posenc::rotary_embedding<float, posenc::backend::cuda> rope(64, rdim, 500000.0, pairing);
      const posenc::rotary_policy host(
          posenc::rotary_embedding<double>(64, rdim, 500000.0, pairing));
      compare(run_device(p, cfg, pc::rotary_policy<float>(rope)), run_host(p, cfg, host), 2e-5);
    }
  // YaRN (scaled frequencies and an attention factor), and a cache shorter than the
  // positions (the rows past it computed on the fly)
  posenc::rope_config yarn;
  yarn.head_dim = 64;
  yarn.scaling = posenc::rope_scaling_type::yarn;
  yarn.factor = 4.0;
  yarn.original_max_positions = 64;
  posenc::rope_options small;
  small.cache_limit = 100;
  posenc::rotary_embedding<float, posenc::backend::cuda> rope(yarn, 300, small);
  const posenc::rotary_policy host(posenc::rotary_embedding<double>(yarn, 300));
  compare(run_device(p, cfg, pc::rotary_policy<float>(rope)), run_host(p, cfg, host), 2e-5);
}

TEST_CASE("cuda flash: the output without lse equals the output with it") {
  const shape z{2, 4, 2, 30, 500, 64, 64};
  const problem<float> p(z, 31);
  posenc::attention_config cfg;
  cfg.mask.causal = true;
  cfg.q_offset = 470;
  for (Index splits : {1, 4}) {
    const result a = run_device(p, cfg, alibi(z.heads), splits, true);
    const result b = run_device(p, cfg, alibi(z.heads), splits, false);
    CHECK(a.out == b.out);
  }
}

TEST_CASE("cuda merge_attention_states: equals the CPU's; shards merge into the whole") {
  // device merge against the host merge on the same inputs
  const Index B = 2, L = 5, H = 3, dv = 40;
  auto oa = random_values<float>(B * L * H * dv, 1), ob = random_values<float>(B * L * H * dv, 2);
  auto la = random_values<float>(B * H * L, 3), lb = random_values<float>(B * H * L, 4);
  la[1] = -INFINITY;
  lb[2] = -INFINITY;
  la[3] = lb[3] = -INFINITY;
  lb[4] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> ho(oa.size()), hl(la.size());
  posenc::merge_attention_states(
      posenc::view_bshd(static_cast<const float*>(oa.data()), B, L, H, dv),
      posenc::view_bhs(static_cast<const float*>(la.data()), B, H, L),
      posenc::view_bshd(static_cast<const float*>(ob.data()), B, L, H, dv),
      posenc::view_bhs(static_cast<const float*>(lb.data()), B, H, L),
      posenc::view_bshd(ho.data(), B, L, H, dv), posenc::view_bhs(hl.data(), B, H, L));
  auto doa = upload(oa), dob = upload(ob);
  auto dla = upload(la), dlb = upload(lb);
  // in place into o_a / lse_a
  pc::merge_attention_states(
      posenc::view_bshd(doa.data(), B, L, H, dv), posenc::view_bhs(dla.data(), B, H, L),
      posenc::view_bshd(static_cast<const float*>(dob.data()), B, L, H, dv),
      posenc::view_bhs(static_cast<const float*>(dlb.data()), B, H, L),
      posenc::view_bshd(doa.data(), B, L, H, dv), posenc::view_bhs(dla.data(), B, H, L));
  const auto go = download(doa);
  const auto gl = download(dla);
  for (std::size_t e = 0; e < go.size(); ++e) {
    if (std::isnan(ho[e])) {
      CHECK(std::isnan(go[e]));
      continue;
    }
    CHECK(std::abs(go[e] - ho[e]) <= 1e-6f * (1 + std::abs(ho[e])));
  }
  for (std::size_t e = 0; e < gl.size(); ++e) {
    if (std::isnan(hl[e]) || hl[e] == -INFINITY) {
      CHECK((std::isnan(gl[e]) == std::isnan(hl[e]) && (std::isnan(hl[e]) || gl[e] == hl[e])));
      continue;
    }
    CHECK(std::abs(gl[e] - hl[e]) <= 1e-6f * (1 + std::abs(hl[e])));
  }

  // two key shards on the device, merged: the unsharded call (RoPE, causal decode rows)
  const shape z{1, 8, 2, 4, 1000, 64, 64};
  const problem<float> p(z, 41);
  posenc::attention_config cfg;
  cfg.mask.causal = true;
  cfg.q_offset = 996;
  posenc::rotary_embedding<float, posenc::backend::cuda> rope(64);
  const pc::rotary_policy<float> pol(rope);
  const result whole = run_device(p, cfg, pol);
  const Index s = 600;  // shard 1: keys [0, 600), shard 2: [600, 1000)
  posenc::cuda::device_buffer<float> o1(z.len_q * z.heads * 64), o2(z.len_q * z.heads * 64);
  posenc::cuda::device_buffer<float> l1(z.heads * z.len_q), l2(z.heads * z.len_q);
  const auto qv = posenc::view_bshd(static_cast<const float*>(p.dq.data()), 1, 4, 8, 64);
  auto keys = [&](const float* base, Index j0, Index n) {
    return posenc::view_bshd(base + j0 * 2 * 64, 1, n, 2, 64);
  };
  posenc::attention_config c1 = cfg, c2 = cfg;
  c2.q_offset = cfg.q_offset - s;
  pc::flash_multi_head_attention(qv, keys(p.dk.data(), 0, s), keys(p.dv.data(), 0, s),
                                 posenc::view_bshd(o1.data(), 1, 4, 8, 64),
                                 posenc::view_bhs(l1.data(), 1, 8, 4), c1, pol);
  pc::flash_multi_head_attention(qv, keys(p.dk.data(), s, 1000 - s), keys(p.dv.data(), s, 1000 - s),
                                 posenc::view_bshd(o2.data(), 1, 4, 8, 64),
                                 posenc::view_bhs(l2.data(), 1, 8, 4), c2, pol);
  pc::merge_attention_states(
      posenc::view_bshd(o1.data(), 1, 4, 8, 64), posenc::view_bhs(l1.data(), 1, 8, 4),
      posenc::view_bshd(o2.data(), 1, 4, 8, 64), posenc::view_bhs(l2.data(), 1, 8, 4),
      posenc::view_bshd(o1.data(), 1, 4, 8, 64), posenc::view_bhs(l1.data(), 1, 8, 4));
  const auto mo = download(o1);
  const auto ml = download(l1);
  double err = 0, scale = 0;
  for (std::size_t e = 0; e < mo.size(); ++e) {
    err = std::max(err, std::abs(mo[e] - whole.out[e]));
    scale = std::max(scale, std::abs(whole.out[e]));
  }
  CHECK(err <= 4e-6 * scale);
  for (std::size_t e = 0; e < ml.size(); ++e)
    CHECK(std::abs(ml[e] - whole.lse[e]) <= 4e-6 * (1 + std::abs(whole.lse[e])));
}

TEST_CASE("cuda flash: bad input gets the CPU's error messages") {
  const shape z{1, 4, 2, 5, 6, 8, 8};
  const problem<float> p(z, 81);
  posenc::cuda::device_buffer<float> out(5 * 4 * 8), lse(4 * 5);
  const auto qv = posenc::view_bshd(static_cast<const float*>(p.dq.data()), 1, 5, 4, 8);
  const auto kv = posenc::view_bshd(static_cast<const float*>(p.dk.data()), 1, 6, 2, 8);
  const auto vv = posenc::view_bshd(static_cast<const float*>(p.dv.data()), 1, 6, 2, 8);
  const auto ov = posenc::view_bshd(out.data(), 1, 5, 4, 8);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const posenc::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto has = [](const std::string& m, const char* needle) {
    INFO(m);
    CHECK(m.find(needle) != std::string::npos);
  };
  has(message([&] {
        pc::flash_multi_head_attention(
            qv, posenc::view_bshd(static_cast<const float*>(p.dk.data()), 1, 4, 3, 8),
            posenc::view_bshd(static_cast<const float*>(p.dv.data()), 1, 4, 3, 8), ov);
      }),
      "cuda::flash_multi_head_attention: kv_heads = 3");
  posenc::attention_config bad;
  bad.q_offset = -2;
  has(message([&] { pc::flash_multi_head_attention(qv, kv, vv, ov, bad); }), "q_offset = -2");
  bad = {};
  bad.mask.key_lengths = {7};
  has(message([&] { pc::flash_multi_head_attention(qv, kv, vv, ov, bad); }),
      "mask.key_lengths[b] = 7");
  has(message([&] {
        pc::flash_multi_head_attention(qv, kv, vv, ov, posenc::view_bhs(lse.data(), 1, 4, 4));
      }),
      "lse = extents mismatch");
  has(message([&] {
        pc::flash_options o;
        o.splits = -1;
        pc::flash_multi_head_attention(qv, kv, vv, ov, {}, posenc::no_position_policy{}, o);
      }),
      "options.splits = -1");
  has(message([&] { pc::flash_multi_head_attention(qv, kv, vv, ov, {}, alibi(3)); }), "heads");
  posenc::rotary_embedding<float, posenc::backend::cuda> rope(16);
  has(message([&] {
        pc::flash_multi_head_attention(qv, kv, vv, ov, {}, pc::rotary_policy<float>(rope));
      }),
      "rotary_policy: dim = 8");
  // out sharing memory with q
  has(message([&] {
        pc::flash_multi_head_attention(
            qv, kv, vv, posenc::view_bshd(const_cast<float*>(qv.data()), 1, 5, 4, 8));
      }),
      "shares memory with q");
  // d above 256
  posenc::cuda::device_buffer<float> big(300 * 2);
  const auto bq = posenc::view_bshd(static_cast<const float*>(big.data()), 1, 1, 1, 300);
  const auto bk = posenc::view_bshd(static_cast<const float*>(big.data()) + 300, 1, 1, 1, 300);
  posenc::cuda::device_buffer<float> bo(8);
  has(message([&] {
        pc::flash_multi_head_attention(
            bq, bk, posenc::view_bshd(static_cast<const float*>(big.data()), 1, 1, 1, 8),
            posenc::view_bshd(bo.data(), 1, 1, 1, 8));
      }),
      "dim = 300");
  // dv above 256
  posenc::cuda::device_buffer<float> wide(300 + 8);
  has(message([&] {
        pc::flash_multi_head_attention(
            posenc::view_bshd(static_cast<const float*>(big.data()), 1, 1, 1, 8),
            posenc::view_bshd(static_cast<const float*>(big.data()) + 8, 1, 1, 1, 8),
            posenc::view_bshd(static_cast<const float*>(big.data()) + 16, 1, 1, 1, 300),
            posenc::view_bshd(wide.data(), 1, 1, 1, 300));
      }),
      "dim_v = 300");
  // a distance-table policy whose heads cover different distances
  has(message([&] { pc::flash_multi_head_attention(qv, kv, vv, ov, {}, uneven_table{}); }),
      "policy rel_min = -5");
}
