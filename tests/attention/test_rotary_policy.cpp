// rotary_policy built from what a user has: a rope_config (with the sequence length of its
// frequencies) or a rotary_embedding of any scalar. Each must give the attention of the
// double embedding with the same frequencies, pairing and options, and that attention must
// be the one of q and k rotated beforehand.

#include <Eigen/Core>
#include <posenc/attention/attention.hpp>
#include <posenc/attention/multi_head.hpp>
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/encoding/rotary.hpp>

#include "attention_support.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;
using posenc_test::random_matrix;
using posenc_test::rmat;

namespace {

constexpr Index heads = 4, kv_heads = 2, dim = 32, len_q = 5, len_k = 12;

// Llama 3 scaling, interleaved pairing and a partial rotary dim, so that a conversion that
// dropped any of them would change the result.
posenc::rope_config llama3_config() {
  posenc::rope_config c;
  c.head_dim = dim;
  c.rotary_dim = 24;
  c.base = 500000.0;
  c.pairing = posenc::rope_pairing::interleaved;
  c.scaling = posenc::rope_scaling_type::llama3;
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_positions = 16;
  return c;
}

posenc::attention_config causal_after(Index past) {
  posenc::attention_config c;
  c.mask.causal = true;
  c.q_offset = past;
  return c;
}

rmat<double> mha(const posenc::rotary_policy& rope, const posenc::attention_config& cfg) {
  const rmat<double> q = random_matrix<double>(len_q, heads * dim, 11);
  const rmat<double> k = random_matrix<double>(len_k, kv_heads * dim, 12);
  const rmat<double> v = random_matrix<double>(len_k, kv_heads * dim, 13);
  return posenc::multi_head_attention(q, k, v, heads, kv_heads, cfg, rope);
}

double max_diff(const rmat<double>& a, const rmat<double>& b) {
  return (a - b).cwiseAbs().maxCoeff();
}

}  // namespace

TEST_CASE("rotary_policy from a rotary_embedding of any scalar equals the double one",
          "[rotary_policy]") {
  const posenc::rope_config c = llama3_config();
  const Index seq_len = 64;
  const auto cfg = causal_after(len_k - len_q);
  const rmat<double> want =
      mha(posenc::rotary_policy(posenc::rotary_embedding<double>(c, seq_len)), cfg);

  posenc::rotary_embedding<float> f(c, seq_len);
  CHECK(max_diff(mha(posenc::rotary_policy(f), cfg), want) == 0.0);
  const posenc::rotary_embedding<Eigen::bfloat16> bf(c, seq_len);
  CHECK(max_diff(mha(posenc::rotary_policy(bf), cfg), want) == 0.0);
  const posenc::rotary_embedding<double, posenc::backend::scalar> scalar_backend(c, seq_len);
  CHECK(max_diff(mha(posenc::rotary_policy(scalar_backend), cfg), want) == 0.0);

  const posenc::rotary_policy p(f);
  CHECK(p.embedding().pairing() == posenc::rope_pairing::interleaved);
  CHECK(p.embedding().rotary_dim() == 24);
  CHECK(p.embedding().frequencies().inv_freq == f.frequencies().inv_freq);
}

TEST_CASE("rotary_policy from a rotary_embedding keeps its options", "[rotary_policy]") {
  // float32_reference angles differ from exact ones at large positions: the policy must
  // compute them the float embedding's way.
  posenc::rope_options opt;
  opt.precision = posenc::rope_precision::float32_reference;
  opt.cache = posenc::rope_cache_mode::on_the_fly;
  const posenc::rotary_embedding<float> f(dim, -1, 10000.0, posenc::rope_pairing::half, opt);
  const posenc::rotary_policy p(f);
  CHECK(p.embedding().options().precision == posenc::rope_precision::float32_reference);
  CHECK(p.embedding().options().cache == posenc::rope_cache_mode::on_the_fly);

  const auto far = causal_after(100000);
  const rmat<double> want = mha(posenc::rotary_policy(posenc::rotary_embedding<double>(
                                    dim, -1, 10000.0, posenc::rope_pairing::half, opt)),
                                far);
  CHECK(max_diff(mha(p, far), want) == 0.0);
  CHECK(max_diff(mha(posenc::rotary_policy(dim), far), want) > 1e-6);
}

TEST_CASE("rotary_policy from a rope_config equals rotating q and k beforehand",
          "[rotary_policy]") {
  posenc::rope_config c = llama3_config();
  c.scaling = posenc::rope_scaling_type::dynamic;  // frequencies depend on seq_len
  c.factor = 2.0;
  c.low_freq_factor = 1.0;  // ignored by dynamic
  const Index seq_len = 4 * c.original_max_positions;
  const auto cfg = causal_after(len_k - len_q);

  // the independent path: q rotated at positions q_offset + i, k at j, then plain attention
  posenc::rotary_embedding<double> rope(c, seq_len);
  rmat<double> q = random_matrix<double>(len_q, heads * dim, 11);
  rmat<double> k = random_matrix<double>(len_k, kv_heads * dim, 12);
  const rmat<double> v = random_matrix<double>(len_k, kv_heads * dim, 13);
  rope.apply(posenc::split_heads(posenc::view_of(q), heads), cfg.q_offset);
  rope.apply(posenc::split_heads(posenc::view_of(k), kv_heads), Index(0), posenc::rope_role::key);
  const rmat<double> want = posenc::multi_head_attention(q, k, v, heads, kv_heads, cfg);

  const rmat<double> got = mha(posenc::rotary_policy(c, seq_len), cfg);
  CHECK(max_diff(got, want) < 1e-12);
  // seq_len reaches the frequencies: the default (0, the original context) differs
  CHECK(max_diff(mha(posenc::rotary_policy(c), cfg), want) > 1e-6);
}

TEST_CASE("rotary_policy from an invalid rope_config names the field", "[rotary_policy]") {
  posenc::rope_config c;
  POSENC_REQUIRE_ERROR(posenc::rotary_policy(c, 16), "head_dim");
  c.head_dim = 16;
  c.scaling = posenc::rope_scaling_type::llama3;
  c.factor = 8.0;
  POSENC_REQUIRE_ERROR(posenc::rotary_policy(c), "original_max_positions");
}
