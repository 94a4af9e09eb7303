// Issue 25's regressions for the encodings: empty work returns at once whatever the other
// extents say (a 128-byte .npy of shape (10^12, 0, 8) hung `posenc rope`); every size
// that decides an allocation is checked against posenc::limits before allocating (these
// threw std::bad_alloc, or quietly allocated gigabytes); a Hugging Face list holding a
// non-number is reported as such, not as missing.

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <posenc/attention/merge.hpp>
#include <posenc/core/limits.hpp>
#include <posenc/encoding/alibi.hpp>
#include <posenc/encoding/rotary.hpp>
#include <posenc/encoding/shaw.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <posenc/encoding/t5_bias.hpp>
#include <posenc/encoding/transformer_xl.hpp>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;

namespace {
// Before the fix each of these loops visited every position (10^15 of them): a hang.
constexpr Index huge = Index(1) << 50;
}  // namespace

TEST_CASE("limits: empty work returns at once, whatever the other extents", "[limits][empty]") {
  std::vector<float> buf(64, 1.0f);
  posenc::rotary_embedding<float> rope(8);
  // no heads, a huge sequence (the .npy of issue 25): nothing to rotate
  rope.apply(posenc::view_shd(buf.data(), huge, 0, 8), 0);
  rope.apply_qk(posenc::view_shd(buf.data(), huge, 0, 8),
                posenc::view_shd(buf.data() + 8, huge, 0, 8), 0);
  posenc::rotary_embedding<float> otf(
      8, -1, 10000.0, posenc::rope_pairing::half,
      posenc::rope_options{posenc::rope_precision::exact, posenc::rope_cache_mode::on_the_fly});
  otf.apply(posenc::view_bshd(buf.data(), huge, 3, 0, 8), 0);
  otf.apply(posenc::view_bshd(buf.data(), 3, huge, 0, 8), 0);
  CHECK(rope.cache().size() == 0);  // and nothing was cached for them
  // the buffer was not touched
  for (float x : buf) CHECK(x == 1.0f);

  // sinusoidal: a batch of empty sequences
  const posenc::sinusoidal<float> pe(8);
  pe.add_to(posenc::batch_view<float>(buf.data(), {huge, 0, 8}, {0, 8, 1}), 0);

  // merge: rows of no head
  posenc::merge_attention_states(
      posenc::view_bshd(buf.data(), huge, 4, 0, 8), posenc::view_bhs(buf.data(), huge, 0, 4),
      posenc::view_bshd(buf.data(), huge, 4, 0, 8), posenc::view_bhs(buf.data(), huge, 0, 4),
      posenc::view_bshd(buf.data() + 32, huge, 4, 0, 8),
      posenc::view_bhs(buf.data() + 32, huge, 0, 4));
  for (float x : buf) CHECK(x == 1.0f);
}

TEST_CASE("limits: the documented values", "[limits]") {
  STATIC_REQUIRE(posenc::limits::max_elements == (Index(1) << 31));
  STATIC_REQUIRE(posenc::limits::max_dim == (Index(1) << 20));
  STATIC_REQUIRE(posenc::limits::max_heads == (Index(1) << 16));
}

TEST_CASE("limits: absolute encodings refuse absurd sizes before allocating", "[limits][error]") {
  POSENC_REQUIRE_ERROR(posenc::sinusoidal<double>(Index(1) << 40), "dim = 1099511627776");
  const posenc::sinusoidal<double> pe(8);
  POSENC_REQUIRE_ERROR(pe.table(Index(1) << 40), "len = 1099511627776");
  POSENC_REQUIRE_ERROR(pe.table(Index(1) << 40), "posenc::limits::max_elements");
  // at the limit's edge: 2^28 rows of 8 is the most; one more row is refused
  POSENC_REQUIRE_ERROR(pe.table((Index(1) << 28) + 1), "must be <= 268435456");
  CHECK(pe.table(3).rows() == 3);
}

TEST_CASE("limits: relative encodings refuse absurd sizes before allocating", "[limits][error]") {
  POSENC_REQUIRE_ERROR(posenc::alibi_slopes(Index(1) << 40), "heads = 1099511627776");
  POSENC_REQUIRE_ERROR(posenc::alibi_slopes(Index(1) << 17), "posenc::limits::max_heads");
  POSENC_REQUIRE_ERROR(posenc::alibi_policy(Index(1) << 40), "heads = 1099511627776");
  POSENC_REQUIRE_ERROR(posenc::alibi_bias(Index(1) << 20, Index(1) << 20, Index(1) << 20),
                       "heads = 1048576");
  POSENC_REQUIRE_ERROR(posenc::alibi_bias(8, Index(1) << 20, Index(1) << 20), "len_q = 1048576");
  POSENC_REQUIRE_ERROR(posenc::alibi_bias(8, 1, Index(1) << 40), "len_k = 1099511627776");
  CHECK(posenc::alibi_bias(2, 3, 4).rows() == 6);

  const posenc::t5_bucket_config t5;
  POSENC_REQUIRE_ERROR(posenc::t5_buckets(Index(1) << 20, Index(1) << 20, t5), "len_q = 1048576");

  POSENC_REQUIRE_ERROR(
      posenc::shaw_policy<float>(posenc::shaw_clip::symmetric(Index(1) << 31), 64, 64),
      "clip rows * tables = 4294967297");
  POSENC_REQUIRE_ERROR(
      posenc::shaw_policy<float>(posenc::shaw_clip::symmetric(4), Index(1) << 40, 8),
      "dim = 1099511627776");
  POSENC_REQUIRE_ERROR(posenc::transformer_xl_policy(Index(1) << 40, 8), "heads = 1099511627776");
  POSENC_REQUIRE_ERROR(posenc::transformer_xl_policy(2, Index(1) << 40), "dim = 1099511627776");
  POSENC_REQUIRE_ERROR(posenc::txl_inv_freq(Index(1) << 40), "dim = 1099511627776");

  // a materialised bias of an absurd shape
  posenc::attention_shape s;
  s.len_q = Index(1) << 20;
  s.len_k = Index(1) << 20;
  s.dim = 1;
  POSENC_REQUIRE_ERROR(posenc::materialize_bias(posenc::alibi_policy(1), 0, 0, s),
                       "len_q = 1048576");
}

TEST_CASE("limits: rotary sizes are checked before allocating", "[limits][error]") {
  using posenc::rope_options;
  rope_options huge_cache;
  huge_cache.max_len = Index(1) << 40;
  huge_cache.cache_limit = Index(1) << 40;
  POSENC_REQUIRE_ERROR(
      posenc::rotary_embedding<float>(64, -1, 10000.0, posenc::rope_pairing::half, huge_cache),
      "max_len = 1099511627776");
  // cache_limit alone only bounds growth: lowered to what the element limit allows
  rope_options far;
  far.cache_limit = Index(1) << 40;
  posenc::rotary_embedding<float> rope(64, -1, 10000.0, posenc::rope_pairing::half, far);
  CHECK(rope.options().cache_limit == posenc::limits::max_elements / 64);
  POSENC_REQUIRE_ERROR(posenc::rotary_embedding<float>(Index(1) << 40), "head_dim = 1099511627776");
  POSENC_REQUIRE_ERROR(posenc::plain_rope_frequencies(Index(1) << 40),
                       "rotary_dim = 1099511627776");
  posenc::rope_cache<float> cache(posenc::plain_rope_frequencies(64));
  POSENC_REQUIRE_ERROR(cache.reserve(Index(1) << 40), "max_len = 1099511627776");
  CHECK(cache.size() == 0);

  // a config's head_dim decides the frequency table: checked by validate (this threw
  // std::bad_alloc from .frequencies(), and 4000000000 quietly allocated 16 GB)
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(R"({"head_dim": 8000000000000000})"),
                       "head_dim = 8000000000000000");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(R"({"head_dim": 4000000000})"),
                       "posenc::limits::max_dim");
  CHECK(posenc::rope_config_from_hf_json(R"({"head_dim": 128})").head_dim == 128);
}

TEST_CASE("limits: a Hugging Face list holding a non-number is named as such", "[limits][hf]") {
  const std::string json = R"({"head_dim": 8, "max_position_embeddings": 4096,
    "original_max_position_embeddings": 2048, "architectures": ["PhiForCausalLM"],
    "rope_scaling": {"type": "longrope", "short_factor": [1, "x"], "long_factor": [1, 1, 1, 1]}})";
  // was: short_factor = <missing>
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(json), "short_factor");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(json), "element 1 is not a number");
  // a list of strings nobody reads (architectures) is still no error
  const std::string ok = R"({"head_dim": 8, "architectures": ["LlamaForCausalLM"]})";
  CHECK(posenc::rope_config_from_hf_json(ok).head_dim == 8);
}

TEST_CASE("limits: a config.json over 16 MiB is refused before it is read", "[limits][hf]") {
  STATIC_REQUIRE(posenc::hf_config_max_bytes == (std::uint64_t(1) << 24));
  const std::string path = std::string(POSENC_TEST_TMP_DIR) + "/limits_big_config.json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << R"({"head_dim": 8, "pad": ")";
    out << std::string((std::size_t(1) << 24) + 1, 'x') << "\"}";
  }
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json_file(path), "over the 16 MiB");
  std::remove(path.c_str());
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json_file(POSENC_TEST_TMP_DIR),
                       "path = " POSENC_TEST_TMP_DIR);
}
