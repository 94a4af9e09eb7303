// Issue 25's regressions for attention: finite inputs whose logits overflow float give the
// reference's finite result in the tiled kernel (it gave silent NaN), on every compiled
// backend, in prefill and split-key decode; a KV cache step that throws leaves the cache as
// it was (it grew); flash_options::threads is bounded (a workspace was allocated per
// requested thread: 10^5 threads on a 4×5 problem took 3.4 GB).

#include <cmath>
#include <limits>
#include <posenc/attention/flash.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/multi_head.hpp>
#include <posenc/encoding/alibi.hpp>
#include <string>
#include <vector>

#include "attention_support.hpp"
#include "backend/backends.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;
using posenc_test::random_matrix;
using posenc_test::rmat;

namespace {

struct sizes {
  Index batch, heads, kv_heads, len_q, len_k, dim, dim_v;
};

template <class T>
auto bshd(T* data, Index b, Index l, Index h, Index d) {
  return posenc::view_bshd(data, b, l, h, d);
}

/// The reference kernel (double inside) on float inputs: [B·Lq, H·dv].
template <class Policy = posenc::no_position_policy>
rmat<float> reference(const sizes& z, const rmat<float>& q, const rmat<float>& k,
                      const rmat<float>& v, const posenc::attention_config& cfg,
                      const Policy& pol = Policy{}) {
  rmat<float> out(z.batch * z.len_q, z.heads * z.dim_v);
  posenc::multi_head_attention(bshd(q.data(), z.batch, z.len_q, z.heads, z.dim),
                               bshd(k.data(), z.batch, z.len_k, z.kv_heads, z.dim),
                               bshd(v.data(), z.batch, z.len_k, z.kv_heads, z.dim_v),
                               bshd(out.data(), z.batch, z.len_q, z.heads, z.dim_v), cfg, pol);
  return out;
}

template <class Backend, class T, class Policy = posenc::no_position_policy>
rmat<T> flash(const sizes& z, const rmat<T>& q, const rmat<T>& k, const rmat<T>& v,
              const posenc::attention_config& cfg, const Policy& pol = Policy{},
              Index threads = 1) {
  rmat<T> out = rmat<T>::Constant(z.batch * z.len_q, z.heads * z.dim_v, T(7));
  posenc::flash_multi_head_attention<Backend>(bshd(q.data(), z.batch, z.len_q, z.heads, z.dim),
                                              bshd(k.data(), z.batch, z.len_k, z.kv_heads, z.dim),
                                              bshd(v.data(), z.batch, z.len_k, z.kv_heads, z.dim_v),
                                              bshd(out.data(), z.batch, z.len_q, z.heads, z.dim_v),
                                              cfg, pol, posenc::flash_options{threads});
  return out;
}

template <class F>
void for_each_backend(F&& f) {
  f(posenc::backend::scalar{});
  posenc_test::for_each_simd_backend(f);
}

/// Every element finite and within tol·(1 + |want|) of the reference's.
template <class T>
void check_close(const rmat<T>& got, const rmat<float>& want, double tol) {
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  for (Index e = 0; e < want.size(); ++e) {
    const double g = static_cast<double>(static_cast<float>(got.data()[e]));
    const double w = want.data()[e];
    INFO("element " << e << ": got " << g << ", want " << w);
    REQUIRE(std::isfinite(w));
    CHECK(std::isfinite(g));
    CHECK(std::abs(g - w) <= tol * (1.0 + std::abs(w)));
  }
}

}  // namespace

TEST_CASE("hardening: logits past float's range give the reference's finite result",
          "[flash][overflow]") {
  // q = k = 1e20: every logit is 1e40 · d / sqrt(d), inf in float, finite in double
  for (const sizes z : {sizes{2, 4, 2, 9, 37, 8, 8},       // prefill
                        sizes{1, 4, 4, 1, 1100, 8, 8}}) {  // split-key decode
    const bool decode = z.len_q == 1;
    DYNAMIC_SECTION((decode ? "decode" : "prefill")) {
      const rmat<float> v = random_matrix<float>(z.batch * z.len_k, z.kv_heads * z.dim_v, 3);
      const rmat<float> big_q = rmat<float>::Constant(z.batch * z.len_q, z.heads * z.dim, 1e20f);
      rmat<float> big_k = rmat<float>::Constant(z.batch * z.len_k, z.kv_heads * z.dim, 1e20f);
      // a few keys larger still: the softmax is not uniform, its weights are exactly 0/1
      big_k.row(3).setConstant(2e20f);
      posenc::attention_config causal;
      causal.mask.causal = !decode;
      for (const posenc::attention_config& cfg : {posenc::attention_config{}, causal}) {
        const rmat<float> want = reference(z, big_q, big_k, v, cfg);
        for_each_backend([&](auto tag) {
          using B = decltype(tag);
          INFO("backend " << B::name() << ", causal " << cfg.mask.causal);
          check_close(flash<B>(z, big_q, big_k, v, cfg), want, 1e-5);
          check_close(flash<B>(z, big_q, big_k, v, cfg, posenc::no_position_policy{}, 3), want,
                      1e-5);
        });
      }
      // every logit -inf in float (q = 1e20, k = -1e20): the reference averages V
      const rmat<float> neg_k = -big_k;
      const rmat<float> want = reference(z, big_q, neg_k, v, {});
      for_each_backend([&](auto tag) {
        using B = decltype(tag);
        INFO("backend " << B::name());
        check_close(flash<B>(z, big_q, neg_k, v, {}), want, 1e-5);
      });
      // with ALiBi: the bias added to an overflowed logit
      const rmat<float> want_alibi =
          reference(z, big_q, big_k, v, causal, posenc::alibi_policy(z.heads));
      check_close(
          flash<posenc::default_backend>(z, big_q, big_k, v, causal, posenc::alibi_policy(z.heads)),
          want_alibi, 1e-5);
      // bfloat16 storage (float arithmetic) the same way
      const rmat<Eigen::bfloat16> qb = big_q.cast<Eigen::bfloat16>(),
                                  kb = big_k.cast<Eigen::bfloat16>(),
                                  vb = v.cast<Eigen::bfloat16>();
      const rmat<float> want_b =
          reference(z, qb.cast<float>(), kb.cast<float>(), vb.cast<float>(), {});
      check_close(flash<posenc::default_backend>(z, qb, kb, vb, {}), want_b, 1e-2);
    }
  }
}

TEST_CASE("hardening: values whose weighted sum overflows float", "[flash][overflow]") {
  // uniform weights over 64 keys of V = 3e38: the unnormalised sum is inf in float, the
  // average (3e38) is finite
  const sizes z{1, 2, 2, 5, 64, 8, 8};
  const rmat<float> q = rmat<float>::Zero(z.len_q, z.heads * z.dim);
  const rmat<float> k = random_matrix<float>(z.len_k, z.kv_heads * z.dim, 5);
  const rmat<float> v = rmat<float>::Constant(z.len_k, z.kv_heads * z.dim_v, 3e38f);
  const rmat<float> want = reference(z, q, k, v, {});
  for_each_backend([&](auto tag) {
    using B = decltype(tag);
    INFO("backend " << B::name());
    check_close(flash<B>(z, q, k, v, {}), want, 1e-6);
  });
}

TEST_CASE("hardening: NaN inputs still give NaN rows", "[flash][overflow]") {
  const sizes z{1, 2, 2, 4, 16, 8, 8};
  rmat<float> q = random_matrix<float>(z.len_q, z.heads * z.dim, 1);
  const rmat<float> k = random_matrix<float>(z.len_k, z.kv_heads * z.dim, 2);
  const rmat<float> v = random_matrix<float>(z.len_k, z.kv_heads * z.dim_v, 3);
  q(2, 0) = std::numeric_limits<float>::quiet_NaN();  // row 2, head 0
  const rmat<float> got = flash<posenc::default_backend>(z, q, k, v, {});
  for (Index c = 0; c < z.dim_v; ++c) {
    CHECK(std::isnan(got(2, c)));               // the NaN query's row
    CHECK(std::isfinite(got(2, z.dim_v + c)));  // the other head of that token
    CHECK(std::isfinite(got(1, c)));
  }
}

TEST_CASE("hardening: flash_options::threads is bounded", "[flash][threads]") {
  const sizes z{1, 4, 4, 5, 5, 8, 8};
  const rmat<float> q = random_matrix<float>(z.len_q, z.heads * z.dim, 1);
  const rmat<float> k = random_matrix<float>(z.len_k, z.kv_heads * z.dim, 2);
  const rmat<float> v = random_matrix<float>(z.len_k, z.kv_heads * z.dim_v, 3);
  const rmat<float> one = flash<posenc::default_backend>(z, q, k, v, {});
  STATIC_REQUIRE(posenc::flash_options::max_threads == 1024);
  // the most threads is accepted on a problem of 4 units: as many threads as units, the
  // same result
  CHECK(flash<posenc::default_backend>(z, q, k, v, {}, posenc::no_position_policy{}, 1024) == one);
  // more is an error, not 10^5 workspaces (3.4 GB)
  POSENC_REQUIRE_ERROR(
      flash<posenc::default_backend>(z, q, k, v, {}, posenc::no_position_policy{}, 100000),
      "threads = 100000");
  POSENC_REQUIRE_ERROR(
      flash<posenc::default_backend>(z, q, k, v, {}, posenc::no_position_policy{}, 1025),
      "must be in [0, 1024]");
}

TEST_CASE("hardening: a KV cache step that throws leaves the cache unchanged", "[kv_cache]") {
  const Index heads = 4, kv_heads = 2, d = 8, dv = 8;
  posenc::kv_cache<float> cache(kv_heads, d, dv);
  const rmat<float> k0 = random_matrix<float>(1, kv_heads * d, 1);
  const rmat<float> v0 = random_matrix<float>(1, kv_heads * dv, 2);
  const rmat<float> q0 = random_matrix<float>(1, heads * d, 3);
  cache.step(q0, k0, v0, heads);
  REQUIRE(cache.size() == 1);
  const rmat<float> keys = [&] {
    const auto kv = cache.keys();
    return rmat<float>(Eigen::Map<const rmat<float>>(kv.data(), 1, kv_heads * d));
  }();

  const rmat<float> k = random_matrix<float>(1, kv_heads * d, 4);
  const rmat<float> v = random_matrix<float>(1, kv_heads * dv, 5);
  const rmat<float> q = random_matrix<float>(1, heads * d, 6);
  posenc::attention_config negative;
  negative.scale = -1;
  posenc::attention_config masked;
  masked.mask.key_lengths = {7, 7};  // batch 1: one length too many
  const auto unchanged = [&] {
    CHECK(cache.size() == 1);
    const auto kv = cache.keys();
    REQUIRE(kv.extent(1) == 1);
    CHECK(Eigen::Map<const rmat<float>>(kv.data(), 1, kv_heads * d) == keys);
  };
  // a policy for 8 heads on 4 (this grew the cache from 1 to 2)
  POSENC_REQUIRE_ERROR(cache.step(q, k, v, heads, {}, posenc::alibi_policy(8)), "heads");
  unchanged();
  POSENC_REQUIRE_ERROR(cache.step(q, k, v, heads, negative), "scale = -1");  // grew again
  unchanged();
  POSENC_REQUIRE_ERROR(cache.step(q, k, v, heads, masked), "key_lengths");
  unchanged();
  // shapes
  POSENC_REQUIRE_ERROR(cache.step(q, k, v, 3), "q.cols()");
  unchanged();
  POSENC_REQUIRE_ERROR(cache.step(q, k, random_matrix<float>(1, kv_heads * dv + 1, 7), heads),
                       "v.cols()");
  unchanged();
  POSENC_REQUIRE_ERROR(cache.step(random_matrix<float>(2, heads * d, 8), k, v, heads), "q.rows()");
  unchanged();
  // and a good step afterwards appends exactly one token: no duplicate keys from the retries
  const rmat<float> out = cache.step(q, k, v, heads);
  CHECK(cache.size() == 2);
  CHECK(out.allFinite());
}
