// The tiled (flash-style) kernel against the reference attention (itself checked against
// the numpy goldens) on every scheme and mask, odd sizes, GQA, decode, threads,
// storage types, every compiled backend, and its error paths.

// Which tile kernel a call ran (POSENC_KERNEL_TRACE, config.hpp): defined before every
// posenc include of this program (its only translation unit).
#include <algorithm>
#include <atomic>

namespace posenc_test {
inline std::atomic<const char*> tile_kernel{""};
inline void trace_tiles(const char* op, const char* arch) noexcept {
  if (op[0] == 'f') tile_kernel = arch;  // "flash_tiles"
}
}  // namespace posenc_test
#define POSENC_KERNEL_TRACE(op, arch) ::posenc_test::trace_tiles(op, arch)

// clang-format off: the hook above comes first
#include <cmath>
#include <cstdint>
#include <limits>
#include <posenc/attention/absolute_policy.hpp>
#include <posenc/attention/flash.hpp>
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/encoding/alibi.hpp>
#include <posenc/encoding/shaw.hpp>
#include <posenc/encoding/t5_bias.hpp>
#include <string>
#include <utility>
#include <vector>

// clang-format on

#include "attention_support.hpp"
#include "backend/backends.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc_test::golden_matrix;

// Under an emulator (CMake defines it for the aarch64 build run by qemu) the largest
// sweeps keep their smaller cases.
#ifdef POSENC_TEST_EMULATED
constexpr bool emulated = true;
#else
constexpr bool emulated = false;
#endif
using posenc_test::max_abs_diff;
using posenc_test::random_matrix;
using posenc_test::rmat;

namespace {

/// max |a - b| / max |b|: the parity measure (2e-6 for float32).
template <class A, class B>
double rel_err(const A& a, const B& b) {
  const double den = b.template cast<double>().cwiseAbs().maxCoeff();
  return max_abs_diff(a, b) / (den > 0 ? den : 1.0);
}

struct sizes {
  Index batch, heads, kv_heads, len_q, len_k, dim, dim_v;
};

/// Packed [B·L, H·d] inputs (batch-major rows) and strided views over them.
template <class T>
struct problem {
  sizes z;
  rmat<T> q, k, v;
  problem(const sizes& s, std::uint64_t seed) : z(s) {
    q = random_matrix(s.batch * s.len_q, s.heads * s.dim, seed).cast<T>();
    k = random_matrix(s.batch * s.len_k, s.kv_heads * s.dim, seed + 1).cast<T>();
    v = random_matrix(s.batch * s.len_k, s.kv_heads * s.dim_v, seed + 2).cast<T>();
  }
  auto qv() const { return posenc::view_bshd(q.data(), z.batch, z.len_q, z.heads, z.dim); }
  auto kv() const { return posenc::view_bshd(k.data(), z.batch, z.len_k, z.kv_heads, z.dim); }
  auto vv() const { return posenc::view_bshd(v.data(), z.batch, z.len_k, z.kv_heads, z.dim_v); }
  rmat<T> empty_out() const {
    return rmat<T>::Constant(z.batch * z.len_q, z.heads * z.dim_v, T(7));
  }
  auto ov(rmat<T>& o) const {
    return posenc::view_bshd(o.data(), z.batch, z.len_q, z.heads, z.dim_v);
  }
};

template <class Backend = posenc::default_backend, class T, class Policy>
rmat<T> run_flash(const problem<T>& p, const posenc::attention_config& opt, const Policy& pol,
                  Index threads = 1) {
  rmat<T> out = p.empty_out();
  posenc::flash_multi_head_attention<Backend>(p.qv(), p.kv(), p.vv(), p.ov(out), opt, pol,
                                              posenc::flash_options{threads});
  return out;
}

/// Packed [B·L, H·d] keys or values as [B, H, L, d] (PyTorch's past_key_values): the
/// same values, row (b, g, j) = token j of head g.
template <class M>
M head_major_copy(const M& m, const sizes& z, Index heads, Index dim) {
  M h(m.rows(), m.cols());
  for (Index b = 0; b < z.batch; ++b)
    for (Index g = 0; g < heads; ++g)
      for (Index j = 0; j < z.len_k; ++j)
        for (Index c = 0; c < dim; ++c)
          h.data()[((b * heads + g) * z.len_k + j) * dim + c] = m(b * z.len_k + j, g * dim + c);
  return h;
}

template <class T, class Policy>
rmat<T> run_reference(const problem<T>& p, const posenc::attention_config& opt, const Policy& pol) {
  rmat<T> out = p.empty_out();
  posenc::multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), opt, pol);
  return out;
}

/// A user policy with only a bias hook: exercises the generic per-key bias path.
struct ramp_bias : posenc::policy_base {
  static constexpr bool has_bias = true;
  struct head_type : posenc::head_base {
    double slope = 0;
    double bias(Index pos, Index j) const noexcept {
      return slope * std::sin(0.1 * double(pos - 2 * j));
    }
  };
  head_type head(Index b, Index h, const posenc::attention_shape&) const {
    head_type t;
    t.slope = 0.5 + 0.25 * double(h) - 0.1 * double(b);
    return t;
  }
};

/// Keys scaled per (batch, query head) and position: a key transform that differs between
/// the query heads of a GQA group (keys_per_query_head stays true), unlike RoPE's.
struct head_scaled_keys : posenc::policy_base {
  static constexpr bool transforms_keys = true;
  struct head_type : posenc::head_base {
    double gain = 1;
    void transform_keys(Eigen::Ref<posenc::dmatrix> k) const {
      for (Index j = 0; j < k.rows(); ++j) k.row(j) *= gain * (1.0 + 0.01 * double(j % 7));
    }
  };
  head_type head(Index b, Index h, const posenc::attention_shape&) const {
    head_type t;
    t.gain = 0.6 + 0.3 * double(h) + 0.1 * double(b);
    return t;
  }
};

/// Every mask the kernel knows, on a given shape.
std::vector<std::pair<std::string, posenc::attention_config>> masks(const sizes& z) {
  std::vector<std::pair<std::string, posenc::attention_config>> m;
  m.push_back({"none", {}});
  posenc::attention_config c;
  c.mask.causal = true;
  m.push_back({"causal", c});
  c.q_offset = z.len_k - z.len_q > 0 ? z.len_k - z.len_q : 3;
  m.push_back({"causal+offset", c});
  posenc::attention_config pad;
  for (Index b = 0; b < z.batch; ++b)
    pad.mask.key_lengths.push_back(b == 0 ? z.len_k : z.len_k / 3 + b);
  pad.mask.causal = true;
  pad.q_offset = 5;
  m.push_back({"padding+causal+offset", pad});
  posenc::attention_config bm;
  bm.mask.allowed = posenc::bool_mask::Constant(z.len_q, z.len_k, true);
  for (Index i = 0; i < z.len_q; ++i)
    for (Index j = 0; j < z.len_k; ++j) bm.mask.allowed(i, j) = (i * 7 + j * 3) % 5 != 0;
  bm.mask.allowed.row(z.len_q / 2).setConstant(false);  // a fully masked row
  bm.mask.additive = posenc::dmatrix::Zero(z.len_q, z.len_k);
  for (Index i = 0; i < z.len_q; ++i)
    for (Index j = 0; j < z.len_k; ++j)
      bm.mask.additive(i, j) = (i + j) % 11 == 0 ? -std::numeric_limits<double>::infinity()
                                                 : 0.01 * double((i * j) % 13);
  m.push_back({"bool+additive", bm});
  return m;
}

template <class Policy>
void check_parity(const sizes& z, const Policy& pol, const std::string& scheme,
                  double scale = 0.0) {
  problem<float> p(z, 11 + static_cast<std::uint64_t>(z.dim));
  // T5 (scale 1) folds 1/sqrt(d) into its query projection's initialisation; unscaled
  // logits of this random data (std ~3 at d = 80) put float32 GEMM rounding at ~2e-6.
  if (scale == 1.0) p.q *= static_cast<float>(1.0 / std::sqrt(static_cast<double>(z.dim)));
  for (auto [name, opt] : masks(z)) {
    opt.scale = scale;
    INFO(scheme << " / " << name << ": Lq " << z.len_q << " Lk " << z.len_k << " d " << z.dim
                << " H " << z.heads << "/" << z.kv_heads);
    const rmat<float> want = run_reference(p, opt, pol);
    const rmat<float> got = run_flash(p, opt, pol);
    CHECK(rel_err(got, want) < 2e-6);
    CHECK(got.allFinite());
  }
}

}  // namespace

TEST_CASE("flash matches the numpy goldens of the reference attention", "[flash][golden]") {
  const auto q = golden_matrix<double>("attention_q.npy");
  const auto k = golden_matrix<double>("attention_k.npy");
  const auto v = golden_matrix<double>("attention_v.npy");
  const rmat<float> qf = q.cast<float>(), kf = k.cast<float>(), vf = v.cast<float>();
  auto check = [&](const std::string& name, const posenc::attention_config& opt, const auto& pol) {
    INFO("case " << name);
    const auto want = golden_matrix<double>("attention_out_" + name + ".npy");
    CHECK(max_abs_diff(posenc::flash_attention(q, k, v, opt, pol), want) < 1e-13);
    CHECK(rel_err(posenc::flash_attention(qf, kf, vf, opt, pol), want) < 2e-6);
  };
  posenc::attention_config opt;
  check("none", opt, posenc::no_position_policy{});
  opt.q_offset = 2;
  opt.mask.causal = true;
  check("causal", opt, posenc::no_position_policy{});
  check("alibi_causal", opt, posenc::alibi_policy(4).only_head(1));
  posenc::attention_config sym;
  sym.q_offset = 2;
  check("alibi_symmetric", sym,
        posenc::alibi_policy(6, posenc::alibi_form::symmetric).only_head(5));
  const auto table = golden_matrix<double>("attention_t5_table.npy");
  posenc::attention_config t5;
  t5.scale = 1.0;
  t5.q_offset = 2;
  check("t5_bidir", t5, posenc::t5_bias_policy(table, {32, 128, true}));
  t5.mask.causal = true;
  check("t5_unidir", t5, posenc::t5_bias_policy(table, {32, 128, false}));
  posenc::attention_config m;
  m.mask.key_lengths = {6};
  m.mask.allowed = golden_matrix<std::uint8_t>("attention_masked_allowed.npy").cast<bool>();
  m.mask.additive = golden_matrix<double>("attention_masked_additive.npy");
  check("masked", m, posenc::no_position_policy{});

  // Grouped-query ALiBi, packed heads.
  posenc::attention_config mh;
  mh.mask.causal = true;
  mh.q_offset = 1;
  const auto mq = golden_matrix<double>("attention_mh_q.npy");
  const auto mk = golden_matrix<double>("attention_mh_k.npy");
  const auto mv = golden_matrix<double>("attention_mh_v.npy");
  CHECK(max_abs_diff(
            posenc::flash_multi_head_attention(mq, mk, mv, 4, 2, mh, posenc::alibi_policy(4)),
            golden_matrix<double>("attention_mh_out.npy")) < 1e-13);
}

TEST_CASE("flash matches the reference on every scheme and mask (float32, 2e-6)", "[flash]") {
  // Odd sizes: Lq and Lk not multiples of the 64 x 256 tiles, head dims off the vector width.
  std::vector<sizes> all{sizes{2, 4, 2, 131, 300, 72, 40}, sizes{1, 2, 1, 70, 70, 80, 80},
                         sizes{1, 3, 3, 65, 257, 96, 96}, sizes{2, 2, 2, 64, 512, 64, 64}};
  if (emulated) all.resize(2);  // odd tiles, GQA and partial packets are in the first two
  for (const sizes& z : all) {
    check_parity(z, posenc::no_position_policy{}, "none");
    check_parity(z, posenc::alibi_policy(z.heads), "alibi causal");
    check_parity(z, posenc::alibi_policy(z.heads, posenc::alibi_form::symmetric),
                 "alibi symmetric");
    const rmat<double> table = random_matrix(32, z.heads, 77);
    check_parity(z, posenc::t5_bias_policy(table, {32, 128, true}), "t5 bidirectional", 1.0);
    const rmat<double> table16 = random_matrix(16, z.heads, 78);
    check_parity(z, posenc::t5_bias_policy(table16, {16, 40, false}), "t5 unidirectional", 1.0);
    check_parity(z, posenc::rotary_policy(z.dim), "rope");
    check_parity(z, ramp_bias{}, "generic bias");
  }
  for (const sizes& z : {sizes{2, 4, 2, 131, 300, 72, 40}, sizes{1, 2, 1, 70, 290, 80, 80}}) {
    posenc::shaw_policy<float> shaw(posenc::shaw_clip::symmetric(16), z.dim, z.dim_v);
    shaw.key_tables() = random_matrix(shaw.rows(), z.dim, 5).cast<float>();
    shaw.value_tables() = random_matrix(shaw.rows(), z.dim_v, 6).cast<float>();
    check_parity(z, shaw, "shaw symmetric");
    posenc::shaw_policy<float> asym(posenc::shaw_clip::asymmetric(3, 40), z.dim, z.dim_v, z.heads);
    asym.key_tables() = random_matrix(asym.rows() * z.heads, z.dim, 7).cast<float>();
    asym.value_tables() = random_matrix(asym.rows() * z.heads, z.dim_v, 8).cast<float>();
    check_parity(z, asym, "shaw asymmetric per head");
    const rmat<double> abs_table = random_matrix(400, z.dim, 9);
    check_parity(z, posenc::absolute_policy(abs_table), "absolute");
  }
}

TEST_CASE("key transforms: one copy per key head for RoPE, per query head where they differ",
          "[flash]") {
  // GQA groups of 3 query heads, prefill and decode: a per-query-head transform must
  // reach each head (a copy shared by the group would give heads 1 and 2 head 0's keys),
  // and RoPE, whose transform is the same for the group, shares one copy per key head.
  for (const sizes& z : {sizes{2, 6, 2, 70, 300, 40, 24}, sizes{2, 6, 2, 1, 2000, 40, 24}}) {
    const problem<float> p(z, 71);
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = z.len_k - z.len_q;
    INFO("Lq = " << z.len_q);
    CHECK(rel_err(run_flash(p, opt, head_scaled_keys{}),
                  run_reference(p, opt, head_scaled_keys{})) < 2e-6);
    CHECK(run_flash(p, opt, head_scaled_keys{}, 3) == run_flash(p, opt, head_scaled_keys{}, 1));
    const posenc::rotary_policy rope(z.dim);
    CHECK(rel_err(run_flash(p, opt, rope), run_reference(p, opt, rope)) < 2e-6);
  }
  static_assert(head_scaled_keys::keys_per_query_head &&
                !posenc::rotary_policy::keys_per_query_head &&
                !posenc::absolute_policy::keys_per_query_head);
}

TEST_CASE("flash handles multi-query, single keys and empty calls", "[flash]") {
  check_parity(sizes{1, 8, 1, 33, 1, 16, 8}, posenc::no_position_policy{}, "one key, MQA");
  check_parity(sizes{3, 2, 1, 1, 5, 8, 8}, posenc::alibi_policy(2), "one query");
  const problem<float> p(sizes{1, 2, 2, 0, 5, 8, 8}, 3);
  rmat<float> out(0, 16);
  posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out));
  CHECK(out.size() == 0);
  // No keys at all: every row sees nothing, so zeros.
  const problem<float> nk(sizes{1, 2, 2, 4, 0, 8, 8}, 3);
  const rmat<float> z = run_flash(nk, {}, posenc::no_position_policy{});
  CHECK(z.isZero(0));
}

TEST_CASE("fully masked rows give zeros, never NaN", "[flash]") {
  const sizes z{2, 2, 2, 70, 300, 32, 32};
  const problem<float> p(z, 4);
  posenc::attention_config opt;
  opt.mask.key_lengths = {0, 300};
  const rmat<float> out = run_flash(p, opt, posenc::no_position_policy{});
  CHECK(out.topRows(70).isZero(0));
  CHECK(out.bottomRows(70).cwiseAbs().maxCoeff() > 0.0f);
  CHECK(rel_err(out, run_reference(p, opt, posenc::no_position_policy{})) < 2e-6);
}

TEST_CASE("a NaN logit gives a NaN row, as in the reference", "[flash]") {
  for (Index lq : {Index(1), Index(70)}) {  // decode path and tiled path
    const sizes z{1, 2, 1, lq, 3000, 16, 8};
    problem<float> p(z, 91);
    const Index bad = lq / 2;
    p.q(bad, 3) = std::numeric_limits<float>::quiet_NaN();  // head 0 of query row `bad`
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = 3000 - lq;
    const rmat<float> got = run_flash(p, opt, posenc::no_position_policy{});
    const rmat<float> want = run_reference(p, opt, posenc::no_position_policy{});
    INFO("Lq = " << lq);
    CHECK(got.row(bad).head(8).array().isNaN().all());  // head 0: NaN
    CHECK(got.row(bad).tail(8).allFinite());            // head 1: untouched
    CHECK(want.row(bad).head(8).array().isNaN().all());
    rmat<float> g = got, w = want;
    g.row(bad).head(8).setZero();
    w.row(bad).head(8).setZero();
    CHECK(rel_err(g, w) < 2e-6);
  }
}

TEST_CASE("decode: one query over a long cache splits the keys and merges exactly",
          "[flash][decode]") {
  for (Index lq : emulated ? std::vector<Index>{3} : std::vector<Index>{1, 3, 8}) {
    const sizes z{2, 4, 2, lq, 5000, 80, 64};
    const problem<float> p(z, 21);
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = 4990 - lq;
    opt.mask.key_lengths = {5000, 2100};
    INFO("Lq = " << lq);
    CHECK(rel_err(run_flash(p, opt, posenc::no_position_policy{}),
                  run_reference(p, opt, posenc::no_position_policy{})) < 2e-6);
    CHECK(rel_err(run_flash(p, opt, posenc::alibi_policy(4)),
                  run_reference(p, opt, posenc::alibi_policy(4))) < 2e-6);
    posenc::shaw_policy<float> shaw(posenc::shaw_clip::symmetric(8), z.dim, z.dim_v);
    shaw.key_tables() = random_matrix(shaw.rows(), z.dim, 5).cast<float>();
    shaw.value_tables() = random_matrix(shaw.rows(), z.dim_v, 6).cast<float>();
    CHECK(rel_err(run_flash(p, opt, shaw), run_reference(p, opt, shaw)) < 2e-6);
    const posenc::rotary_policy rope(z.dim);
    CHECK(rel_err(run_flash(p, opt, rope), run_reference(p, opt, rope)) < 2e-6);
    const posenc::t5_bias_policy t5(random_matrix(32, z.heads, 79), {32, 128, true});
    CHECK(rel_err(run_flash(p, opt, t5), run_reference(p, opt, t5)) < 2e-6);
    // Threads change nothing, bit for bit.
    CHECK(run_flash(p, opt, shaw, 3) == run_flash(p, opt, shaw, 1));
  }
}

TEST_CASE("decode: GQA groups, several queries and head sizes off the vector width",
          "[flash][decode]") {
  // the decode kernel takes a group's query rows together against each key row and its
  // output rows together against blocks of value rows: groups of 3 and 4 query heads and
  // MHA, 1 to 8 queries (row counts that leave remainders of the kernels' pairs and fours),
  // head sizes that leave partial packets, key counts that end inside a block; and MHA
  // with one query (one query row per key row) over several tiles and a last one cut short,
  // in batches of different lengths; 8 and more rows per key row take the many-row
  // kernels (value rows of 136 = 2 x 64 + 8 values: their wide blocks and a remainder);
  // MHA with one query reads a tile's key rows beside the tile before it's value rows
  // (dot_axpy where d = dv, here 36: a partial packet), and 1025 keys leave a chunk of
  // one key (its dots alone, then its values alone)
  const sizes cases[] = {sizes{1, 6, 2, 3, 2500, 37, 19},   sizes{2, 8, 2, 5, 1500, 72, 40},
                         sizes{1, 3, 3, 8, 1100, 16, 9},    sizes{1, 4, 1, 1, 1030, 128, 128},
                         sizes{2, 3, 3, 1, 2600, 72, 40},   sizes{1, 2, 2, 1, 1300, 128, 128},
                         sizes{1, 8, 2, 2, 1200, 128, 136}, sizes{1, 4, 4, 1, 1025, 36, 36}};
  for (const sizes& z : cases) {
    const problem<float> p(z, 41);
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = z.len_k - z.len_q;
    if (z.batch == 2) opt.mask.key_lengths = {z.len_k, z.len_k - 211};
    INFO("heads " << z.heads << "/" << z.kv_heads << ", Lq " << z.len_q << ", d " << z.dim);
    CHECK(rel_err(run_flash(p, opt, posenc::no_position_policy{}),
                  run_reference(p, opt, posenc::no_position_policy{})) < 2e-6);
    CHECK(rel_err(run_flash(p, opt, posenc::alibi_policy(z.heads)),
                  run_reference(p, opt, posenc::alibi_policy(z.heads))) < 2e-6);
    if (z.dim % 2 == 0) {
      const posenc::rotary_policy rope(z.dim);
      CHECK(rel_err(run_flash(p, opt, rope), run_reference(p, opt, rope)) < 2e-6);
    }
    CHECK(run_flash(p, opt, posenc::no_position_policy{}, 2) ==
          run_flash(p, opt, posenc::no_position_policy{}, 1));
  }
}

TEST_CASE("decode: short caches whose key rows several query rows share", "[flash][decode]") {
  // Up to 1024 keys a float call takes decode on the x86 SIMD backends where a GQA group or
  // several queries share each key row (from 128 keys), and prefill otherwise (one query of
  // MHA; fewer keys; the portable backend, NEON, double): a rule on the backend and the
  // shape alone, so that the thread count never picks the path.
  const auto shape = [](Index heads, Index kv_heads, Index len_q, Index len_k) {
    posenc::attention_shape s;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.len_q = len_q;
    s.len_k = len_k;
    s.dim = s.dim_v = 64;
    return s;
  };
  using posenc::detail::flash::takes_decode;
  namespace be = posenc::backend;
  CHECK(takes_decode<be::avx2, float>(shape(32, 8, 1, 128)));
  CHECK(takes_decode<be::avx512, float>(shape(8, 8, 2, 1024)));
  CHECK(takes_decode<be::avx512, float>(shape(8, 8, 8, 300)));
  CHECK(takes_decode<be::scalar, float>(shape(8, 8, 1, 1025)));  // a long cache: any rows
  CHECK(takes_decode<be::neon, double>(shape(32, 8, 8, 1025)));
  CHECK_FALSE(takes_decode<be::avx512, float>(shape(32, 8, 1, 127)));
  CHECK_FALSE(takes_decode<be::avx512, float>(shape(8, 8, 1, 1024)));  // MHA, one query
  CHECK_FALSE(takes_decode<be::avx512, float>(shape(32, 8, 9, 5000)));
  CHECK_FALSE(takes_decode<be::scalar, float>(shape(32, 8, 1, 1024)));
  CHECK_FALSE(takes_decode<be::neon, float>(shape(32, 8, 4, 1024)));
  CHECK_FALSE(takes_decode<be::avx512, double>(shape(32, 8, 4, 1024)));
  // Where (batch, chunk) units leave threads idle (one chunk, or two), a unit is a run of
  // KV groups (token-major too). The reference's result, the same bits at any thread count
  // and in either layout; a batch item with fewer keys, a group of 3, partial packets, 2-8
  // queries, and two chunks (on every backend).
  for (const sizes& z : {sizes{1, 32, 8, 1, 128, 128, 128}, sizes{2, 6, 2, 3, 300, 37, 19},
                         sizes{1, 4, 4, 8, 1024, 64, 64}, sizes{2, 8, 2, 2, 700, 72, 40},
                         sizes{1, 12, 6, 2, 1100, 64, 48}}) {
    INFO("heads " << z.heads << "/" << z.kv_heads << ", Lq " << z.len_q << ", Lk " << z.len_k);
    const problem<float> p(z, 81);
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = z.len_k - z.len_q;
    if (z.batch == 2) opt.mask.key_lengths = {z.len_k, z.len_k - 90};
    const rmat<float> one = run_flash(p, opt, posenc::alibi_policy(z.heads));
    CHECK(rel_err(one, run_reference(p, opt, posenc::alibi_policy(z.heads))) < 2e-6);
    CHECK(rel_err(run_flash(p, opt, posenc::no_position_policy{}),
                  run_reference(p, opt, posenc::no_position_policy{})) < 2e-6);
    if (z.dim % 2 == 0) {
      const posenc::rotary_policy rope(z.dim);
      CHECK(rel_err(run_flash(p, opt, rope, 3), run_reference(p, opt, rope)) < 2e-6);
    }
    for (const Index threads : {2, 3, 8})
      CHECK(run_flash(p, opt, posenc::alibi_policy(z.heads), threads) == one);
    const auto kh = head_major_copy(p.k, z, z.kv_heads, z.dim);
    const auto vh = head_major_copy(p.v, z, z.kv_heads, z.dim_v);
    for (const Index threads : {1, 8}) {
      auto out = p.empty_out();
      posenc::flash_multi_head_attention(
          p.qv(), posenc::view_bhsd(kh.data(), z.batch, z.kv_heads, z.len_k, z.dim),
          posenc::view_bhsd(vh.data(), z.batch, z.kv_heads, z.len_k, z.dim_v), p.ov(out), opt,
          posenc::alibi_policy(z.heads), posenc::flash_options{threads});
      CHECK(out == one);
    }
  }
}

TEST_CASE("decoding token by token equals one causal pass", "[flash][decode]") {
  const sizes z{1, 2, 1, 1, 3000, 64, 64};
  const problem<float> full(sizes{1, 2, 1, 6, 3000, 64, 64}, 31);
  posenc::attention_config opt;
  opt.mask.causal = true;
  opt.q_offset = 3000 - 6;
  const rmat<float> all = run_flash(full, opt, posenc::alibi_policy(2));
  for (Index t = 0; t < 6; ++t) {
    problem<float> one(z, 31);
    one.q = full.q.row(t);
    one.k = full.k;
    one.v = full.v;
    posenc::attention_config o1 = opt;
    o1.q_offset = 3000 - 6 + t;
    const rmat<float> got = run_flash(one, o1, posenc::alibi_policy(2));
    CHECK(rel_err(got, all.row(t)) < 2e-6);
  }
}

TEST_CASE("threads give results identical to one thread", "[flash][threads]") {
  const sizes z{2, 4, 2, 200, 333, 72, 48};
  const problem<float> p(z, 41);
  for (auto [name, opt] : masks(z)) {
    INFO(name);
    const rmat<float> one = run_flash(p, opt, posenc::alibi_policy(4), 1);
    CHECK(run_flash(p, opt, posenc::alibi_policy(4), 2) == one);
    CHECK(run_flash(p, opt, posenc::alibi_policy(4), 5) == one);
    CHECK(run_flash(p, opt, posenc::alibi_policy(4), 0) == one);
    CHECK(run_flash(p, opt, posenc::rotary_policy(z.dim), 3) ==
          run_flash(p, opt, posenc::rotary_policy(z.dim), 1));
  }
}

TEST_CASE("views whose last axis is strided give the contiguous views' result", "[flash]") {
  // The loads and stores have a unit-stride fast path; every value must be the same
  // through either path, on the portable kernel (a generic bias) and the lane kernel
  // (ALiBi, where a SIMD backend is compiled).
  // A decode shape too: there the strided keys and values are converted one key tile at a
  // time, value by value.
  for (const sizes& z : {sizes{2, 3, 3, 40, 70, 24, 16}, sizes{2, 4, 2, 2, 1500, 24, 16}}) {
    const problem<float> p(z, 61);
    using view4 = posenc::strided_view<float, 4>;
    const auto spread = [](const rmat<float>& m) {  // every element followed by a gap
      rmat<float> w = rmat<float>::Constant(m.rows(), 2 * m.cols(), 5.0f);
      for (Index c = 0; c < m.cols(); ++c) w.col(2 * c) = m.col(c);
      return w;
    };
    const auto view = [&](float* data, Index len, Index heads, Index dim) {
      return view4(data, {z.batch, len, heads, dim},
                   {2 * len * heads * dim, 2 * heads * dim, 2 * dim, 2});
    };
    rmat<float> qs = spread(p.q), ks = spread(p.k), vs = spread(p.v);
    posenc::attention_config opt;
    opt.mask.causal = true;
    const auto both = [&](const auto& pol) {
      rmat<float> out = rmat<float>::Constant(z.batch * z.len_q, 2 * z.heads * z.dim_v, 9.0f);
      posenc::flash_multi_head_attention(view(qs.data(), z.len_q, z.heads, z.dim),
                                         view(ks.data(), z.len_k, z.kv_heads, z.dim),
                                         view(vs.data(), z.len_k, z.kv_heads, z.dim_v),
                                         view(out.data(), z.len_q, z.heads, z.dim_v), opt, pol);
      const rmat<float> want = run_flash(p, opt, pol);
      for (Index c = 0; c < want.cols(); ++c) {
        CHECK(out.col(2 * c) == want.col(c));
        CHECK((out.col(2 * c + 1).array() == 9.0f).all());  // the gaps are not written
      }
    };
    both(posenc::alibi_policy(z.heads));
    both(ramp_bias{});
  }
}

TEST_CASE("decode over head-major K and V gives the token-major result, bit for bit",
          "[flash][decode]") {
  // [B, H, L, d] caches (PyTorch's past_key_values) are read one KV group at a time, each
  // head's keys a stream of their own, [B, L, H, d] ones key by key across the heads: the
  // same arithmetic per head in either order. MHA and GQA, 1 and 3 queries, float and
  // half storage (rows widened in registers), a policy that transforms keys (read from
  // its per-head copy: the values' layout decides), and a batch with shorter keys. One
  // query of a GQA group of four with rows of 8 packets or more (d 128, and 136 with a
  // partial packet) takes the many-row kernels on AVX-512 head-major (AVX2: the register
  // tiles over two runs of keys half a tile apart, as do 3 queries of a group of four and
  // 2 of a group of two), the row-at-a-time ones token-major: the same bits. MHA reads
  // each key row beside a value row (dot_axpy: dot's and axpy's bits) and, head-major, a
  // chunk's first tile with the query row held in registers over a run of keys where its
  // packets fit (d 64 and 128 on AVX-512, 64 on AVX2; d 72 takes dot per key): dot's
  // bits, key by key; one head at a time (decode_one_query_heads 1) a run of key rows
  // beside a run of value rows, the query and output rows held in registers where they
  // fit (dot_axpy_rows: d 64 and 128 on AVX-512, d 72 key by key): dot_axpy's bits, key by
  // key. Token-major value rows a multiple of 4 KiB apart (8 float heads of
  // 128, 16 of 128; 16 half heads of 128) take blocks of 8 value rows on AVX2
  // (kv_row_source::value_block), head-major ones 16: the same bits. With the CPU tuning's
  // decode_key_runs (cpu.hpp; on by default on Intel), AVX-512 takes a GQA group's dots in
  // four runs of keys a quarter of a tile apart and asks for the value rows beside them,
  // and with its decode_stream_prefetch (on by default on Zen 5 and Intel) one query's MHA
  // asks for its head-major rows 2 KiB ahead, with decode_key_run_prefetch (Zen 5) the
  // runs' key rows 2 KiB ahead, with decode_value_pass_key_prefetch (Zen 4) the next
  // tile's key rows during each value pass, and with decode_one_query_heads (1 on Zen 4 and Zen 5,
  // else 2) one query's MHA reads that many heads at a time (here 1, and 3, which leaves 2
  // at the end of 8), and with decode_group_rows (Zen 4) one query's GQA group of 2
  // to 4 heads of 64 or 128 values, head-major, reads each row whole, one at a time, and
  // token-major rows 4 KiB apart (32/8 heads of 128 floats) the same 8 keys at a time, the
  // groups in turn (on where the others are off), whatever CPU runs the test: both
  // settings, the same bits.
  const auto check = [&](const auto& p, const auto& pol) {
    const sizes& z = p.z;
    const auto kh = head_major_copy(p.k, z, z.kv_heads, z.dim);
    const auto vh = head_major_copy(p.v, z, z.kv_heads, z.dim_v);
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = z.len_k - z.len_q;
    if (z.batch == 2) opt.mask.key_lengths = {z.len_k, z.len_k - 300};
    auto out = p.empty_out();
    posenc::flash_multi_head_attention(
        p.qv(), posenc::view_bhsd(kh.data(), z.batch, z.kv_heads, z.len_k, z.dim),
        posenc::view_bhsd(vh.data(), z.batch, z.kv_heads, z.len_k, z.dim_v), p.ov(out), opt, pol,
        posenc::flash_options{2});
    CHECK(out == run_flash(p, opt, pol));
    // half / bfloat16 storage: both outputs rounded to it (2^-11 / 2^-8 relative)
    using scalar = typename std::decay_t<decltype(out)>::Scalar;
    const double bound = std::is_same_v<scalar, float>         ? 2e-6
                         : std::is_same_v<scalar, Eigen::half> ? 1e-3
                                                               : 8e-3;
    CHECK(rel_err(out.template cast<double>(), run_reference(p, opt, pol).template cast<double>()) <
          bound);
  };
  for (const sizes& z : {sizes{1, 8, 8, 1, 2100, 128, 128}, sizes{2, 8, 2, 3, 1500, 72, 40},
                         sizes{1, 4, 1, 1, 1030, 64, 64}, sizes{1, 8, 2, 1, 1100, 128, 128},
                         sizes{2, 8, 2, 1, 1100, 136, 136}, sizes{1, 4, 4, 1, 1030, 64, 64},
                         sizes{2, 4, 4, 1, 700, 72, 72}, sizes{1, 32, 8, 1, 1030, 128, 128},
                         sizes{1, 32, 16, 2, 700, 128, 128}}) {
    INFO("heads " << z.heads << "/" << z.kv_heads << ", Lq " << z.len_q << ", d " << z.dim);
    const problem<float> p(z, 71);
    const problem<Eigen::half> h(z, 72);
    const problem<Eigen::bfloat16> bf(z, 73);
    std::atomic<bool>& key_runs = posenc::cpu::tuning().decode_key_runs;
    std::atomic<int>& stream_prefetch = posenc::cpu::tuning().decode_stream_prefetch;
    std::atomic<int>& runs_min = posenc::cpu::tuning().decode_key_runs_min_values;
    std::atomic<int>& run_prefetch = posenc::cpu::tuning().decode_key_run_prefetch;
    std::atomic<bool>& value_pass_keys = posenc::cpu::tuning().decode_value_pass_key_prefetch;
    std::atomic<int>& one_query_heads = posenc::cpu::tuning().decode_one_query_heads;
    std::atomic<bool>& group_rows = posenc::cpu::tuning().decode_group_rows;
    const bool group_rows_was = group_rows;
    const bool was = key_runs, value_pass_keys_was = value_pass_keys;
    const int prefetch_was = stream_prefetch, min_was = runs_min, run_prefetch_was = run_prefetch;
    const int heads_was = one_query_heads;
    runs_min = 0;  // every d takes the runs where they are on (Zen 5: from 128 values)
    for (const bool runs : {false, true}) {
      INFO("decode_key_runs and decode_value_pass_key_prefetch "
           << runs << ", decode_stream_prefetch and decode_key_run_prefetch " << (runs ? 2048 : 0)
           << ", decode_one_query_heads " << (runs ? 1 : 3) << ", decode_group_rows " << !runs);
      key_runs = runs;
      stream_prefetch = runs ? 2048 : 0;
      run_prefetch = runs ? 2048 : 0;
      value_pass_keys = runs;
      one_query_heads = runs ? 1 : 3;
      group_rows = !runs;
      check(p, posenc::no_position_policy{});
      check(p, posenc::alibi_policy(z.heads));
      if (z.dim == z.dim_v) check(p, posenc::rotary_policy(z.dim));
      check(h, posenc::no_position_policy{});
      check(bf, posenc::no_position_policy{});
    }
    // decode_one_query_heads out of range: under 1 reads as 1, over the head count as all
    if (z.heads == z.kv_heads && z.len_q == 1)
      for (const int heads : {0, -2, 100}) {
        INFO("decode_one_query_heads " << heads);
        one_query_heads = heads;
        check(p, posenc::no_position_policy{});
      }
    key_runs = was;
    stream_prefetch = prefetch_was;
    runs_min = min_was;
    run_prefetch = run_prefetch_was;
    value_pass_keys = value_pass_keys_was;
    one_query_heads = heads_was;
    group_rows = group_rows_was;
  }
}

TEST_CASE("run_order_key gives the keys of a tile in the order decode's dot runs read them",
          "[flash][decode]") {
  // The order a GQA value pass asks for the next tile's key rows in: the dot pass takes
  // blocks of dot_keys keys, block b keys [r · span + b · run, r · span + (b + 1) · run) of
  // each run r (run = dot_keys / runs, span = nk / dot_keys · run), then the rest of the
  // tile in order. Built here the way accumulate_heads issues its calls: every key of the
  // tile once, in that order, for whole and partial tiles (a unit's last one).
  using posenc::kernels::flash::run_order_key;
  for (const Index dot_keys : {8, 16})
    for (const Index runs : {1, 2, 4})
      for (const Index nk : {1, 7, 16, 17, 63, 64, 100, 128, 255, 256}) {
        INFO("dot_keys " << dot_keys << ", runs " << runs << ", nk " << nk);
        const Index run = dot_keys / runs, span = nk / dot_keys * run;
        std::vector<Index> order;
        for (Index c0 = 0; c0 < span; c0 += run)  // the calls of dot_block_runs
          for (Index r = 0; r < runs; ++r)
            for (Index c = 0; c < run; ++c) order.push_back(r * span + c0 + c);
        for (Index c = runs * span; c < nk; ++c) order.push_back(c);  // dot_block's blocks
        REQUIRE(order.size() == static_cast<std::size_t>(nk));
        std::vector<bool> seen(static_cast<std::size_t>(nk), false);
        for (Index y = 0; y < nk; ++y) {
          const Index key = run_order_key(y, nk, dot_keys, runs);
          REQUIRE(key >= 0);
          REQUIRE(key < nk);
          CHECK(key == order[static_cast<std::size_t>(y)]);
          CHECK_FALSE(seen[static_cast<std::size_t>(key)]);
          seen[static_cast<std::size_t>(key)] = true;
        }
      }
}

TEST_CASE("paced_rows asks for every line of a block's value rows once, key by key, in step",
          "[flash][decode]") {
  // The hook AVX-512's four-run GQA dots call before each of their steps (decode's value
  // rows asked for beside the keys): key c's rows, one per run, over steps [c · per_key,
  // (c + 1) · per_key), each line of each row exactly once and in order, evenly (no step
  // asks for more than one line per run more than another of its key), and nothing once
  // the rows are asked for; with fewer steps than keys, every row at the first step.
  struct asked {
    std::vector<std::pair<int, std::ptrdiff_t>>* log;  // (step, byte offset)
    const int* step;
    const char* base;
    void operator()(const char* p) const { log->emplace_back(*step, p - base); }
  };
  const std::vector<char> rows(1 << 16);
  const char* base = rows.data();
  for (const int runs : {1, 2, 4, 8})  // 8: four runs' value rows and their key rows ahead
    for (const int keys : {1, 3, 4})
      for (const long lines : {1L, 4L, 5L, 8L, 9L})
        for (const int steps : {1, 2, 8, 32, 33, 36}) {
          INFO("runs " << runs << ", keys " << keys << ", lines " << lines << ", steps " << steps);
          const long stride = 64 * lines + 192, span = keys * stride + 1024;
          const char* first[8];
          for (int r = 0; r < runs; ++r) first[r] = base + r * span;
          std::vector<std::pair<int, std::ptrdiff_t>> log;
          int step = 0;
          posenc::kernels::flash::paced_rows<8, asked> pace(first, runs, stride, keys, lines,
                                                            asked{&log, &step, base});
          for (; step < steps + 3; ++step) pace(step, steps);  // 3 calls past the end: none
          // every (run, key, line) once, and in order within each run
          REQUIRE(log.size() == static_cast<std::size_t>(runs * keys * lines));
          std::vector<long> per_step(static_cast<std::size_t>(steps + 3), 0);
          std::vector<std::ptrdiff_t> next(static_cast<std::size_t>(runs), 0);
          for (const auto& [st, off] : log) {
            const long r = off / span, at = off % span, key = at / stride,
                       line = (at % stride) / 64;
            REQUIRE(r < runs);
            CHECK(at % stride % 64 == 0);
            CHECK(off == r * span + next[static_cast<std::size_t>(r)]);
            const std::ptrdiff_t here = key * stride + 64 * line;
            next[static_cast<std::size_t>(r)] = line + 1 == lines ? (key + 1) * stride : here + 64;
            ++per_step[static_cast<std::size_t>(st)];
            if (steps < keys) {
              CHECK(st == 0);
            } else {
              const long per_key = steps / keys;
              CHECK(st >= key * per_key);
              CHECK(st < (key + 1) * per_key);
            }
          }
          for (long st = steps; st < steps + 3; ++st)
            CHECK(per_step[static_cast<std::size_t>(st)] == 0);
          if (steps >= keys) {  // evenly: within a key's steps, lines per run differ by one at most
            const long per_key = steps / keys;
            for (int key = 0; key < keys; ++key) {
              const auto lo = per_step.begin() + key * per_key;
              const auto [mn, mx] = std::minmax_element(lo, lo + per_key);
              CHECK(*mx - *mn <= runs);
              CHECK(*mx <= runs * ((lines + per_key - 1) / per_key));
            }
          }
        }
}

TEST_CASE("decode: MHA with one query reads all of a thread's chunks in one pipeline",
          "[flash][decode]") {
  // One thread reads every chunk of a batch item (and, head-major, every head) as one
  // pipeline of key segments: a segment's first dots beside the last values of the one
  // before it, in the other of two workspace sets; several threads take a chunk each. Key
  // counts that leave a last chunk of 4 keys and a tile cut short, a batch item whose
  // later chunks see no key and one that sees none at all, d = dv (dot_axpy; token-major
  // with its prefetch 1 KiB on) and d != dv, float and half storage, both layouts: the
  // reference's result, and the same bits at any thread count and in either layout.
  const auto check = [](const auto& p, double tol) {
    const sizes& z = p.z;
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = z.len_k - 1;
    opt.mask.key_lengths = {z.len_k, 1500, 0};
    const posenc::alibi_policy alibi(z.heads);
    const auto one = run_flash(p, opt, alibi, 1);
    CHECK(rel_err(one.template cast<double>(),
                  run_reference(p, opt, alibi).template cast<double>()) < tol);
    CHECK((one.bottomRows(1).template cast<float>().array() == 0.0f).all());  // sees no key
    for (Index threads : {2, 3, 4, 7}) {
      INFO("threads " << threads);
      CHECK(run_flash(p, opt, alibi, threads) == one);
    }
    const auto kh = head_major_copy(p.k, z, z.kv_heads, z.dim);
    const auto vh = head_major_copy(p.v, z, z.kv_heads, z.dim_v);
    for (Index threads : {1, 2, 3}) {
      INFO("head-major, threads " << threads);
      auto out = p.empty_out();
      posenc::flash_multi_head_attention(
          p.qv(), posenc::view_bhsd(kh.data(), z.batch, z.kv_heads, z.len_k, z.dim),
          posenc::view_bhsd(vh.data(), z.batch, z.kv_heads, z.len_k, z.dim_v), p.ov(out), opt,
          alibi, posenc::flash_options{threads});
      CHECK(out == one);
    }
  };
  for (const sizes& z : {sizes{3, 4, 4, 1, 4100, 64, 64}, sizes{3, 3, 3, 1, 3000, 40, 24}}) {
    INFO("d " << z.dim << ", dv " << z.dim_v);
    check(problem<float>(z, 91), 2e-6);
    check(problem<Eigen::half>(z, 92), 1e-3);
  }
}

TEST_CASE("every compiled backend gives the scalar backend's result", "[flash][backend]") {
  const sizes z{1, 4, 2, 100, 260, 72, 72};
  const problem<float> p(z, 51);
  posenc::attention_config opt;
  opt.mask.causal = true;
  // A generic bias policy: every backend runs the portable tile kernel on it (the SIMD
  // lane kernel, which sums in another order, is checked against the reference below).
  const rmat<float> ref = run_flash<posenc::backend::scalar>(p, opt, ramp_bias{});
  CHECK(rel_err(ref, run_reference(p, opt, ramp_bias{})) < 2e-6);
  int ran = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    INFO(B::name());
    CHECK(run_flash<B>(p, opt, ramp_bias{}) == ref);
    ++ran;
  });
  SUCCEED("SIMD backends compared: " << ran);
}

TEST_CASE("the SIMD tile kernels match the reference on odd blocks and infinities",
          "[flash][backend]") {
  // The SIMD tags' lane kernel (avx2, avx512, neon: one query row per lane) takes plain,
  // rotary, absolute, ALiBi and T5 calls with causal / key_lengths masks: blocks that are
  // not whole vectors of rows, key tiles that are not whole register tiles, tiny and wide
  // heads.
  int ran = 0;
  posenc_test::for_each_simd_backend([&](auto tag) {
    using B = decltype(tag);
    for (const sizes& z : {sizes{1, 2, 1, 9, 7, 1, 1}, sizes{2, 3, 3, 17, 263, 3, 13},
                           sizes{1, 2, 2, 129, 517, 130, 7}, sizes{1, 1, 1, 200, 200, 64, 96}}) {
      const problem<float> p(z, 57 + static_cast<std::uint64_t>(z.len_q));
      for (auto [name, opt] : masks(z)) {
        INFO(B::name() << " / " << name << ": Lq " << z.len_q << " Lk " << z.len_k << " d " << z.dim
                       << " dv " << z.dim_v);
        const rmat<float> got = run_flash<B>(p, opt, posenc::no_position_policy{});
        CHECK(rel_err(got, run_reference(p, opt, posenc::no_position_policy{})) < 2e-6);
        // against the portable kernel: the documented tolerance, not bit identity (the
        // lane kernel sums the products in another order and has its own exp)
        const rmat<float> portable =
            run_flash<posenc::backend::scalar>(p, opt, posenc::no_position_policy{});
        CHECK(rel_err(got, portable) < 2e-6);
        // and the lane kernel did run where it should: its rounding differs somewhere (a
        // silent fallback to the portable kernel would be bit-identical)
        if (z.len_q > 8 && z.len_k >= 200 && name != "bool+additive") CHECK_FALSE(got == portable);
        CHECK(run_flash<B>(p, opt, posenc::no_position_policy{}, 3) ==
              run_flash<B>(p, opt, posenc::no_position_policy{}, 1));
        for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
          const posenc::alibi_policy alibi(z.heads, form);
          CHECK(rel_err(run_flash<B>(p, opt, alibi), run_reference(p, opt, alibi)) < 2e-6);
        }
        for (bool bidirectional : {true, false}) {
          const posenc::t5_bias_policy t5(random_matrix(16, z.heads, 79), {16, 40, bidirectional});
          CHECK(rel_err(run_flash<B>(p, opt, t5), run_reference(p, opt, t5)) < 2e-6);
        }
      }
    }
    // A long row: 32768 keys (128 tiles) keep the 2e-6 bound, which needs each tile's
    // P·V summed on its own before it joins the running output.
    {
      const sizes z{1, 1, 1, 9, 32768, 128, 128};
      const problem<float> p(z, 13);
      INFO(B::name() << " over 32768 keys");
      CHECK(rel_err(run_flash<B>(p, {}, posenc::no_position_policy{}),
                    run_reference(p, {}, posenc::no_position_policy{})) < 2e-6);
    }
    // Query positions next to INT64_MAX: the per-lane ALiBi and T5 offsets stay in range.
    {
      const sizes z{1, 2, 1, 20, 40, 8, 8};
      const problem<float> p(z, 17);
      posenc::attention_config far;
      far.mask.causal = true;
      far.q_offset = std::numeric_limits<Index>::max() - 20;
      INFO(B::name() << " at q_offset = INT64_MAX - 20");
      const posenc::t5_bias_policy t5(random_matrix(16, 2, 80), {16, 40, true});
      CHECK(rel_err(run_flash<B>(p, far, t5), run_reference(p, far, t5)) < 2e-6);
      CHECK(rel_err(run_flash<B>(p, far, posenc::no_position_policy{}),
                    run_reference(p, far, posenc::no_position_policy{})) < 2e-6);
      // ALiBi at 2^30: there the reference's double logit q.k - m |pos - j| keeps q.k to 1e-8
      // (near INT64_MAX the bias swamps it, while the kernels shift each row by a constant)
      far.q_offset = Index(1) << 30;
      const posenc::alibi_policy alibi(2, posenc::alibi_form::symmetric);
      CHECK(rel_err(run_flash<B>(p, far, alibi), run_reference(p, far, alibi)) < 2e-6);
    }
    // Logits far past float's exp range (hundreds): each tile's running max has to be the
    // true max over every key, or 2^(logit - max) overflows. The logits' own float
    // rounding (about 1e-7 of hundreds) bounds the parity here (6e-6 seen), not 2e-6.
    {
      const sizes z{1, 2, 1, 40, 300, 16, 8};
      problem<float> p(z, 23);
      p.q.array() = 0.5f + 0.5f * p.q.array();  // in [0, 1]
      // keys 1, 6, 203 and 258 (none a multiple of 4, two per key tile): logits near 160,
      // 230 in base 2, where the others are a few units
      for (Index j : {1, 6, 203, 258}) p.k.row(j).setConstant(80.0f);
      for (auto [name, opt] : masks(z)) {
        INFO(B::name() << " / " << name << " with logits in the hundreds");
        const rmat<float> got = run_flash<B>(p, opt, posenc::no_position_policy{});
        CHECK(got.allFinite());
        CHECK(rel_err(got, run_reference(p, opt, posenc::no_position_policy{})) < 2e-5);
      }
    }
    // Infinite inputs: the NaN pattern and every finite value as in the reference.
    const sizes z{1, 1, 1, 40, 300, 16, 8};
    problem<float> p(z, 99);
    const float inf = std::numeric_limits<float>::infinity();
    p.q(3, 0) = inf;                // +inf and -inf logits in row 3
    p.k(100, 0) = -inf;             // key 100: infinite logits for every row
    p.q.row(7).setConstant(0.0f);   // row 7: 0 · inf = NaN at key 100 only
    p.k.row(120).setConstant(inf);  // key 120: +inf or -inf logits for rows 30..39
    posenc::attention_config opt;
    opt.mask.causal = true;
    opt.q_offset = 90;  // rows 0..9 see keys < 100 only: finite but row 3
    const rmat<float> got = run_flash<B>(p, opt, posenc::no_position_policy{});
    const rmat<float> want = run_reference(p, opt, posenc::no_position_policy{});
    INFO(B::name() << " with infinite inputs");
    CHECK((got.array().isNaN() == want.array().isNaN()).all());
    const rmat<float> gf = got.array().isNaN().select(0.0f, got),
                      wf = want.array().isNaN().select(0.0f, want);
    CHECK(rel_err(gf, wf) < 2e-6);
    CHECK(got.topRows(3).allFinite());
    CHECK(got.middleRows(4, 6).allFinite());
    CHECK(got.row(3).array().isNaN().all());
    ++ran;
  });
  SUCCEED("SIMD backends compared: " << ran);
}

TEST_CASE("double storage computes in double", "[flash]") {
  const sizes z{1, 2, 2, 90, 270, 40, 24};
  const problem<double> p(z, 61);
  for (auto [name, opt] : masks(z)) {
    INFO(name);
    const rmat<double> t5 = random_matrix(32, 2, 3);
    CHECK(rel_err(run_flash(p, opt, posenc::t5_bias_policy(t5, {})),
                  run_reference(p, opt, posenc::t5_bias_policy(t5, {}))) < 1e-13);
  }
}

TEST_CASE("half and bfloat16 storage compute in float", "[flash][storage]") {
  const sizes z{1, 2, 1, 70, 300, 64, 64};
  const problem<float> pf(z, 71);
  posenc::attention_config opt;
  opt.mask.causal = true;
  auto check = [&](auto tag, double tol) {
    using H = decltype(tag);
    problem<H> ph(z, 71);
    ph.q = pf.q.cast<H>();
    ph.k = pf.k.cast<H>();
    ph.v = pf.v.cast<H>();
    // The reference on the same rounded inputs, in float.
    problem<float> pr = pf;
    pr.q = ph.q.template cast<float>();
    pr.k = ph.k.template cast<float>();
    pr.v = ph.v.template cast<float>();
    const rmat<float> want = run_reference(pr, opt, posenc::alibi_policy(2));
    const rmat<H> got = run_flash(ph, opt, posenc::alibi_policy(2));
    CHECK(rel_err(got.template cast<float>(), want) < tol);  // one rounding of the output
  };
  check(Eigen::half(), 1e-3);
  check(Eigen::bfloat16(), 8e-3);
}

TEST_CASE("half and bfloat16 inputs give the float result of the same values",
          "[flash][storage][decode]") {
  // 16-bit keys and values are widened exactly (whole heads before a prefill, row by row
  // as decode visits them) and run through the same tiles as float, so the output is the
  // float output of the widened inputs, rounded once: bit for bit, on every backend and
  // thread count. Decode over 3000 keys crosses chunk and tile edges; d = 76 and dv = 36
  // end in partial packets at every vector width; grouped and multi-query heads make
  // several query heads share each converted key row; MHA with one query and d = dv
  // widens a key row and a value row side by side (dot_axpy).
  auto check = [](auto tag) {
    using H = decltype(tag);
    std::vector<sizes> all{sizes{2, 4, 2, 70, 300, 76, 36}, sizes{2, 4, 2, 5, 3000, 76, 36},
                           sizes{2, 4, 2, 1, 3000, 76, 36}, sizes{2, 3, 1, 2, 2000, 76, 36},
                           sizes{2, 2, 2, 1, 3000, 76, 36}, sizes{2, 2, 2, 1, 3000, 76, 76}};
    if (emulated) all.resize(2);  // a prefill and a multi-row decode over chunk edges
    for (const sizes& z : all) {
      const problem<H> ph(z, 91);
      problem<float> pf(z, 91);
      pf.q = ph.q.template cast<float>();
      pf.k = ph.k.template cast<float>();
      pf.v = ph.v.template cast<float>();
      posenc::attention_config opt;
      opt.mask.causal = true;
      opt.q_offset = z.len_k - z.len_q - 7;
      opt.mask.key_lengths = {z.len_k, z.len_k / 2 + 1};
      const auto same = [&](const auto& pol, const std::string& scheme) {
        INFO(scheme << ", Lq = " << z.len_q << ", batch " << z.batch);
        const rmat<H> want = run_flash(pf, opt, pol).template cast<H>();
        CHECK(run_flash(ph, opt, pol) == want);
        CHECK(run_flash(ph, opt, pol, 3) == want);
        CHECK(run_flash<posenc::backend::scalar>(ph, opt, pol) ==
              run_flash<posenc::backend::scalar>(pf, opt, pol).template cast<H>());
        posenc_test::for_each_simd_backend([&](auto b) {
          using B = decltype(b);
          INFO(B::name());
          CHECK(run_flash<B>(ph, opt, pol) == run_flash<B>(pf, opt, pol).template cast<H>());
        });
      };
      same(posenc::no_position_policy{}, "no position");
      same(posenc::alibi_policy(z.heads), "ALiBi");
      same(posenc::rotary_policy(z.dim), "RoPE (keys transformed, values windowed)");
      same(posenc::t5_bias_policy(random_matrix(32, z.heads, 93), {32, 128, true}), "T5");
      posenc::shaw_policy<float> shaw(posenc::shaw_clip::symmetric(8), z.dim, z.dim_v);
      shaw.key_tables() = random_matrix(shaw.rows(), z.dim, 94).cast<float>();
      shaw.value_tables() = random_matrix(shaw.rows(), z.dim_v, 95).cast<float>();
      same(shaw, "Shaw");
    }
  };
  check(Eigen::half());
  check(Eigen::bfloat16());
}

TEST_CASE("flash rejects bad input with posenc::error", "[flash][errors]") {
  const sizes z{1, 4, 2, 5, 6, 8, 8};
  const problem<float> p(z, 81);
  rmat<float> out = p.empty_out();
  posenc::flash_options cfg;
  cfg.threads = -1;
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), {},
                                                          posenc::no_position_policy{}, cfg),
                       "threads = -1");
  const problem<float> bad(sizes{1, 4, 3, 5, 6, 8, 8}, 81);
  POSENC_REQUIRE_ERROR(
      posenc::flash_multi_head_attention(bad.qv(), bad.kv(), bad.vv(), bad.ov(out)),
      "kv_heads = 3");
  posenc::attention_config opt;
  opt.q_offset = -2;
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), opt),
                       "q_offset = -2");
  // far offsets: q_offset + Lq (Lq = 5) must stay representable
  constexpr Index kmax = std::numeric_limits<Index>::max();
  opt.q_offset = kmax - 4;
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), opt),
                       "q_offset = 9223372036854775803");
  opt.q_offset = kmax;
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), opt),
                       "q_offset = 9223372036854775807");
  opt.q_offset = kmax - 5;  // the last offset that fits: accepted, finite
  CHECK_NOTHROW(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), opt));
  CHECK(out.allFinite());
  opt = {};
  opt.scale = -1;
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), opt),
                       "scale = -1");
  opt = {};
  opt.mask.key_lengths = {7};
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), opt),
                       "mask.key_lengths[b] = 7");
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), {},
                                                          posenc::alibi_policy(3)),
                       "heads = 4");
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(p.qv(), p.kv(), p.vv(), p.ov(out), {},
                                                          posenc::rotary_policy(6)),
                       "dim = 8");
  const rmat<float> q = random_matrix(4, 8, 1).cast<float>(),
                    k = random_matrix(5, 6, 2).cast<float>();
  POSENC_REQUIRE_ERROR(posenc::flash_attention(q, k, k), "k.cols() = 6");
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(q, q, q, 3, 1), "q.cols() = 8");
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(q, q, q, 2, 0), "kv_heads = 0");
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(q, q, q, 0, 1), "heads = 0");
  const rmat<float> k5 = random_matrix(3, 8, 2).cast<float>();
  POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(q, q, k5, 2, 2), "v.rows() = 3");
}

namespace {

/// A user-written policy with a bias linear in the distance (a learned slope per head,
/// which no posenc kernel knows by name): its traits alone put it on the fast tiled path.
/// bias() counts its calls, so the test sees that the tiles never ask for it.
std::atomic<long> learned_slope_bias_calls{0};

struct learned_slopes : posenc::policy_base {
  static constexpr bool has_bias = true;
  static constexpr posenc::position_bias bias_form = posenc::position_bias::linear_distance;
  std::vector<double> slopes;
  bool symmetric = false;
  struct head_type : posenc::linear_distance_head {
    double bias(Index pos, Index j) const noexcept {
      learned_slope_bias_calls.fetch_add(1, std::memory_order_relaxed);
      return linear_distance_head::bias(pos, j);
    }
  };
  head_type head(Index, Index h, const posenc::attention_shape&) const {
    head_type t;
    t.slope = slopes[static_cast<std::size_t>(h)];
    t.symmetric = symmetric;
    return t;
  }
};

/// The same with a table by distance (T5's form, any table).
struct distance_decay : posenc::policy_base {
  static constexpr bool has_bias = true;
  static constexpr posenc::position_bias bias_form = posenc::position_bias::distance_table;
  struct head_type : posenc::distance_table_head {};
  head_type head(Index, Index h, const posenc::attention_shape& s) const {
    head_type t;
    t.rel_min = -(s.q_offset + std::max<Index>(s.len_q, 1) - 1);
    const Index n = std::max<Index>(s.len_q, 1) + std::max<Index>(s.len_k, 1) - 1;
    for (Index r = 0; r < n; ++r)
      t.bias_by_rel.push_back(-0.05 * double(h + 1) * std::log1p(std::abs(double(t.rel_min + r))));
    return t;
  }
};

}  // namespace

TEST_CASE("a user policy with the linear-distance trait runs on the tiled fast path",
          "[flash][policy]") {
  const sizes z{2, 4, 2, 200, 260, 32, 24};
  problem<float> p(z, 71);
  for (const bool symmetric : {false, true}) {
    learned_slopes pol;
    pol.slopes = {0.31, 0.07, 0.5, 0.013};
    pol.symmetric = symmetric;
    for (auto [name, opt] : masks(z)) {
      INFO((symmetric ? "symmetric / " : "causal form / ") << name);
      learned_slope_bias_calls = 0;
      const rmat<float> want = run_reference(p, opt, pol);
      CHECK(learned_slope_bias_calls > 0);  // the reference calls the hook
      learned_slope_bias_calls = 0;
      posenc_test::tile_kernel = "";
      const rmat<float> got = run_flash(p, opt, pol);
      // the tiles generate the bias from slope and symmetric; the hook is never called
      // (masks the lane kernel does not take fall back to the portable kernel, which also
      // generates it)
      CHECK(learned_slope_bias_calls == 0);
      // and the lane kernel takes every call it takes for ALiBi (no elementwise mask)
      const bool lanes_expected =
          posenc::simd::has_packet_arch_v<posenc::default_backend> && opt.mask.allowed.size() == 0;
      CHECK(std::string(posenc_test::tile_kernel.load()) ==
            (lanes_expected ? posenc::default_backend::name() : "scalar"));
      CHECK(rel_err(got, want) < 2e-6);
      // and it is ALiBi's path: the same bits as alibi_policy with these slopes
      const posenc::alibi_policy alibi(
          pol.slopes, symmetric ? posenc::alibi_form::symmetric : posenc::alibi_form::causal);
      CHECK(got == run_flash(p, opt, alibi));
    }
  }
}

TEST_CASE("a user policy with the distance-table trait runs on the tiled fast path",
          "[flash][policy]") {
  const sizes z{1, 3, 3, 150, 150, 16, 16};
  problem<float> p(z, 72);
  for (auto [name, opt] : masks(z)) {
    INFO(name);
    CHECK(rel_err(run_flash(p, opt, distance_decay{}), run_reference(p, opt, distance_decay{})) <
          2e-6);
  }
}

TEST_CASE("flash and the reference reject an output that shares memory with an input",
          "[flash][errors]") {
  // one fused buffer [L, 4·H·d]: q, k, v and a spare block of columns, as a fused QKV
  // projection (plus an output arena) lays them out
  const Index L = 6, H = 2, d = 8, row = 4 * H * d;
  rmat<float> buf = random_matrix(L, row, 74).cast<float>();
  auto block = [&](Index col) {
    return posenc::heads_view<float>(buf.data() + col, {1, L, H, d}, {0, row, d, 1});
  };
  const posenc::heads_view<const float> q = block(0), k = block(H * d), v = block(2 * H * d);
  rmat<float> sep(L, H * d);
  const auto separate = posenc::view_shd(sep.data(), L, H, d);
  posenc::flash_multi_head_attention(q, k, v, separate);
  // the spare block shares no element with the inputs: accepted, same result
  posenc::flash_multi_head_attention(q, k, v, block(3 * H * d));
  CHECK(buf.rightCols(H * d) == sep);
  for (const Index col : {Index(0), H * d / 2, H * d + 3, 2 * H * d}) {
    INFO("output at column " << col);
    POSENC_REQUIRE_ERROR(posenc::flash_multi_head_attention(q, k, v, block(col)),
                         "out = shares memory with");
    POSENC_REQUIRE_ERROR(posenc::multi_head_attention(q, k, v, block(col)),
                         "out = shares memory with");
  }
}
