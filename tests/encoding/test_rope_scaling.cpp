// RoPE frequencies and scalings: goldens from tests/reference/rope_scaling.py (independent
// float64 numpy), the Hugging Face and GGUF constructors, properties and every error path.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <posenc/encoding/rotary/frequencies.hpp>
#include <posenc/encoding/rotary/hf_config.hpp>
#include <posenc/encoding/rotary/scaling.hpp>
#include <posenc/io/npy.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/rope_models.hpp"

using posenc::Index;
using posenc::rope_config;
using posenc::rope_frequencies;
using posenc::rope_params;
using posenc::rope_scaling_type;
using posenc_test::phi3;
using posenc_test::phi3_long;
using posenc_test::phi3_short;
using posenc_test::qwen2_yarn;

namespace {

// [attention_factor, inv_freq...] as written by the reference script.
std::vector<double> golden(const std::string& name) {
  const auto m = posenc::io::read_npy_matrix<double>(std::string(POSENC_TEST_DATA_DIR) +
                                                     "/rope_scaling_" + name + ".npy");
  REQUIRE(m.rows() == 1);
  return std::vector<double>(m.data(), m.data() + m.cols());
}

// Every inv_freq and the attention factor within `rel` (relative) of the golden.
void check_golden(const rope_frequencies& f, const std::string& name, double rel = 1e-14) {
  INFO("golden " << name);
  const std::vector<double> g = golden(name);
  REQUIRE(f.inv_freq.size() + 1 == g.size());
  CHECK(std::fabs(f.attention_factor - g[0]) <= rel * std::fabs(g[0]));
  double worst = 0.0;
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i)
    worst = std::max(worst, std::fabs(f.inv_freq[i] - g[i + 1]) / std::fabs(g[i + 1]));
  INFO("worst relative error " << worst);
  CHECK(worst <= rel);
}

rope_config llama31() {
  rope_config c;
  c.head_dim = 128;
  c.base = 500000.0;
  c.scaling = rope_scaling_type::llama3;
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_positions = 8192;
  return c;
}

rope_config simple(rope_scaling_type t, double factor, Index orig = 0) {
  rope_config c;
  c.head_dim = 128;
  c.scaling = t;
  c.factor = factor;
  c.original_max_positions = orig;
  return c;
}

bool same_bits(const rope_frequencies& a, const rope_frequencies& b) {
  return a.inv_freq == b.inv_freq && a.attention_factor == b.attention_factor;
}

}  // namespace

TEST_CASE("rope scaling goldens: real model configurations", "[rotary][scaling][golden]") {
  rope_config llama2;
  llama2.head_dim = 128;
  check_golden(llama2.frequencies(), "llama2_7b");
  check_golden(posenc::plain_rope_frequencies(128, 10000.0), "llama2_7b");
  check_golden(llama31().frequencies(), "llama31_8b");
  check_golden(llama31().frequencies(131072), "llama31_8b");  // no seq_len dependence
  check_golden(qwen2_yarn().frequencies(), "qwen2_yarn");
  check_golden(phi3().frequencies(0), "phi3_short");
  check_golden(phi3().frequencies(4096), "phi3_short");
  check_golden(phi3().frequencies(4097), "phi3_long");
  check_golden(phi3().frequencies(131072), "phi3_long");

  rope_config pythia;  // GPT-NeoX / Pythia: rotary 25% of 128
  pythia.head_dim = 128;
  pythia.rotary_dim = 32;
  check_golden(pythia.frequencies(), "pythia");
  rope_config gptj;  // GPT-J: rotary 64 of 256, interleaved
  gptj.head_dim = 256;
  gptj.rotary_dim = 64;
  gptj.pairing = posenc::rope_pairing::interleaved;
  check_golden(gptj.frequencies(), "gptj");
}

TEST_CASE("rope scaling goldens: YaRN variants", "[rotary][scaling][golden]") {
  rope_config c;  // gpt-oss style: no truncation of the correction range
  c.head_dim = 64;
  c.base = 150000.0;
  c.scaling = rope_scaling_type::yarn;
  c.factor = 32.0;
  c.original_max_positions = 4096;
  c.truncate = false;
  check_golden(c.frequencies(), "yarn_notrunc");

  rope_config d;  // DeepSeek-V2-Lite style mscale / mscale_all_dim
  d.head_dim = 64;
  d.scaling = rope_scaling_type::yarn;
  d.factor = 40.0;
  d.original_max_positions = 4096;
  d.mscale = 0.707;
  d.mscale_all_dim = 0.707;
  check_golden(d.frequencies(), "yarn_deepseek");
  CHECK(d.frequencies().attention_factor == 1.0);
  d.factor = 16.0;
  d.mscale = 1.0;
  d.mscale_all_dim = 0.5;
  check_golden(d.frequencies(), "yarn_mscale_ratio");

  rope_config o = qwen2_yarn();
  o.attention_factor = 1.25;
  check_golden(o.frequencies(), "yarn_override");
  CHECK(o.frequencies().attention_factor == 1.25);
}

TEST_CASE("rope scaling goldens: linear, NTK, dynamic NTK, xPos", "[rotary][scaling][golden]") {
  check_golden(simple(rope_scaling_type::linear, 4.0).frequencies(), "linear");
  check_golden(simple(rope_scaling_type::ntk, 8.0).frequencies(), "ntk");
  const rope_config dyn = simple(rope_scaling_type::dynamic, 2.0, 4096);
  for (Index n : {1000, 4096, 4097, 8192, 16384, 100000})
    check_golden(dyn.frequencies(n), "dynamic_" + std::to_string(n));

  rope_config x = simple(rope_scaling_type::xpos, 1.0);
  const rope_frequencies f = x.frequencies();
  check_golden(f, "xpos");
  CHECK(f.has_xpos());
  CHECK(f.xpos_scale_base == 512.0);
  CHECK(f.xpos_gamma == 0.4);
  const std::vector<double> zeta = golden("xpos_zeta");
  for (Index i = 0; i < 64; ++i)
    CHECK(std::fabs(f.xpos_zeta(i) - zeta[static_cast<std::size_t>(i) + 1]) <= 1e-15);
  // q . k scales combine to zeta^((m - n) / scale_base).
  const double m = 700, n = 300;
  for (Index i : {0, 17, 63})
    CHECK(std::fabs(f.xpos_scale(i, m, false) * f.xpos_scale(i, n, true) -
                    std::pow(f.xpos_zeta(i), (m - n) / 512.0)) <= 1e-14);
  // Without xPos the scale is exactly 1.
  CHECK(qwen2_yarn().frequencies().xpos_scale(3, 1e6, false) == 1.0);
}

TEST_CASE("rope scaling properties", "[rotary][scaling][property]") {
  const rope_frequencies plain = posenc::plain_rope_frequencies(128);
  std::vector<std::pair<std::string, rope_frequencies>> all = {
      {"none", simple(rope_scaling_type::none, 1.0).frequencies()},
      {"linear", simple(rope_scaling_type::linear, 4.0).frequencies()},
      {"ntk", simple(rope_scaling_type::ntk, 8.0).frequencies()},
      {"dynamic", simple(rope_scaling_type::dynamic, 2.0, 4096).frequencies(50000)},
      {"yarn", qwen2_yarn().frequencies()},
      {"llama3", llama31().frequencies()},
      {"longrope short", phi3().frequencies(10)},
      {"longrope long", phi3().frequencies(100000)},
      {"xpos", simple(rope_scaling_type::xpos, 1.0).frequencies()}};
  SECTION("inv_freq positive, finite, strictly decreasing; attention factor >= 1") {
    for (const auto& [name, f] : all) {
      INFO(name);
      CHECK(f.attention_factor >= 1.0);
      for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
        CHECK(std::isfinite(f.inv_freq[i]));
        CHECK(f.inv_freq[i] > 0.0);
        if (i > 0) CHECK(f.inv_freq[i] < f.inv_freq[i - 1]);
      }
    }
  }
  SECTION("no scaling equals plain, bit for bit; scalings never exceed plain") {
    CHECK(same_bits(all[0].second, plain));
    for (const auto& [name, f] : all) {
      INFO(name);
      if (name.rfind("longrope", 0) == 0) continue;  // head dim 96
      for (std::size_t i = 0; i < f.inv_freq.size(); ++i)
        CHECK(f.inv_freq[i] <= plain.inv_freq[i] * (1.0 + 1e-15));
    }
  }
  SECTION("llama3: high-frequency dims untouched, low ones divided by factor exactly") {
    const rope_config c = llama31();
    const rope_frequencies f = c.frequencies();
    const rope_frequencies p = posenc::plain_rope_frequencies(128, 500000.0);
    const double pi = 3.14159265358979323846;
    int high = 0, low = 0, mid = 0;
    for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
      const double wavelen = 2.0 * pi / p.inv_freq[i];
      if (wavelen < 8192.0 / 4.0) {
        ++high;
        CHECK(f.inv_freq[i] == p.inv_freq[i]);
      } else if (wavelen > 8192.0 / 1.0) {
        ++low;
        CHECK(f.inv_freq[i] == p.inv_freq[i] / 8.0);
      } else {
        ++mid;
        CHECK(f.inv_freq[i] < p.inv_freq[i]);
        CHECK(f.inv_freq[i] > p.inv_freq[i] / 8.0);
      }
    }
    CHECK(high > 0);  // every band is exercised
    CHECK(low > 0);
    CHECK(mid > 0);
    CHECK(f.attention_factor == 1.0);
  }
  SECTION("YaRN with factor 1 equals plain; attention factor exactly 1") {
    rope_config c = qwen2_yarn();
    c.factor = 1.0;
    const rope_frequencies f = c.frequencies();
    const rope_frequencies p = posenc::plain_rope_frequencies(128, 1e6);
    CHECK(f.attention_factor == 1.0);
    for (std::size_t i = 0; i < f.inv_freq.size(); ++i)
      CHECK(std::fabs(f.inv_freq[i] - p.inv_freq[i]) <= 4e-16 * p.inv_freq[i]);
  }
  SECTION("YaRN: extrapolated fast dims equal plain, interpolated slow dims are plain / factor") {
    const rope_frequencies f = qwen2_yarn().frequencies();
    const rope_frequencies p = posenc::plain_rope_frequencies(128, 1e6);
    CHECK(f.inv_freq.front() == p.inv_freq.front());
    CHECK(std::fabs(f.inv_freq.back() - p.inv_freq.back() / 4.0) <= 1e-16 * p.inv_freq.back());
    CHECK(f.attention_factor == 0.1 * std::log(4.0) + 1.0);
  }
  SECTION("dynamic NTK equals plain for seq_len <= original, grows the base beyond") {
    const rope_config c = simple(rope_scaling_type::dynamic, 2.0, 4096);
    for (Index n : {0, 1, 2048, 4095, 4096}) CHECK(same_bits(c.frequencies(n), plain));
    rope_frequencies prev = c.frequencies(4096);
    for (Index n : {4097, 8192, 65536, 1048576}) {
      const rope_frequencies f = c.frequencies(n);
      CHECK(f.inv_freq[0] == 1.0);
      for (std::size_t i = 1; i < f.inv_freq.size(); ++i) CHECK(f.inv_freq[i] < prev.inv_freq[i]);
      prev = f;
    }
  }
  SECTION("identity settings: linear 1, NTK alpha 1") {
    CHECK(same_bits(simple(rope_scaling_type::linear, 1.0).frequencies(), plain));
    CHECK(same_bits(simple(rope_scaling_type::ntk, 1.0).frequencies(), plain));
  }
  SECTION("LongRoPE switches to the long factors exactly past the original context") {
    const rope_config c = phi3();
    CHECK(same_bits(c.frequencies(4096), c.frequencies(0)));
    CHECK(!same_bits(c.frequencies(4097), c.frequencies(4096)));
    CHECK(c.frequencies(4097).attention_factor == c.frequencies(1).attention_factor);
    rope_config four_k = c;  // max == original: factor 1, attention factor 1
    four_k.factor = 1.0;
    CHECK(four_k.frequencies().attention_factor == 1.0);
  }
  SECTION("partial rotary: r/2 frequencies of r, independent of head_dim") {
    rope_config c;
    c.head_dim = 256;
    c.rotary_dim = 64;
    CHECK(same_bits(c.frequencies(), posenc::plain_rope_frequencies(64)));
    CHECK(c.frequencies().rotary_dim() == 64);
  }
}

TEST_CASE("rope_config from Hugging Face parameters", "[rotary][scaling][hf]") {
  SECTION("Llama-3.1 8B") {
    const rope_params config = {{"hidden_size", 4096.0},
                                {"num_attention_heads", 32.0},
                                {"max_position_embeddings", 131072.0},
                                {"rope_theta", 500000.0},
                                {"model_type", std::string("llama")}};
    const rope_params scaling = {{"rope_type", std::string("llama3")},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192.0}};
    const rope_config c = posenc::rope_config_from_hf(config, scaling);
    CHECK(c.head_dim == 128);
    CHECK(c.resolved_rotary_dim() == 128);
    CHECK(c.pairing == posenc::rope_pairing::half);
    CHECK(same_bits(c.frequencies(), llama31().frequencies()));
    check_golden(c.frequencies(), "llama31_8b");
  }
  SECTION("Qwen2 YaRN, 'type' spelling, nulls absent") {
    const rope_params config = {{"hidden_size", 3584.0},
                                {"num_attention_heads", 28.0},
                                {"max_position_embeddings", 32768.0},
                                {"rope_theta", 1000000.0}};
    const rope_params scaling = {{"type", std::string("yarn")},
                                 {"factor", 4.0},
                                 {"original_max_position_embeddings", 32768.0}};
    const rope_config c = posenc::rope_config_from_hf(config, scaling);
    check_golden(c.frequencies(), "qwen2_yarn");
    // Without the dict's original context, max_position_embeddings is used.
    const rope_params scaling2 = {{"rope_type", std::string("yarn")}, {"factor", 4.0}};
    CHECK(same_bits(posenc::rope_config_from_hf(config, scaling2).frequencies(), c.frequencies()));
  }
  SECTION("Phi-3-mini-128k ('su', top-level original context, factor = max / original)") {
    const rope_params config = {{"hidden_size", 3072.0},
                                {"num_attention_heads", 32.0},
                                {"max_position_embeddings", 131072.0},
                                {"original_max_position_embeddings", 4096.0},
                                {"rope_theta", 10000.0}};
    const rope_params scaling = {
        {"type", std::string("su")}, {"short_factor", phi3_short}, {"long_factor", phi3_long}};
    const rope_config c = posenc::rope_config_from_hf(config, scaling);
    CHECK(c.factor == 32.0);
    check_golden(c.frequencies(4096), "phi3_short");
    check_golden(c.frequencies(8192), "phi3_long");
    // An explicit factor in the dict wins (newer transformers); here 1: attention factor 1.
    rope_params with_factor = scaling;
    with_factor["factor"] = 1.0;
    CHECK(posenc::rope_config_from_hf(config, with_factor).frequencies().attention_factor == 1.0);
    // The original context inside the dict (rope_parameters style) works the same.
    rope_params top = config;
    top.erase("original_max_position_embeddings");
    rope_params inner = scaling;
    inner["original_max_position_embeddings"] = 4096.0;
    check_golden(posenc::rope_config_from_hf(top, inner).frequencies(8192), "phi3_long");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"head_dim", 96.0}}, {{"type", std::string("su")},
                                                           {"short_factor", phi3_short},
                                                           {"long_factor", phi3_long}}),
        "original_max_position_embeddings = <missing>");
    top["original_max_position_embeddings"] = -4.0;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf(top, scaling),
                         "original_max_position_embeddings = -4");
  }
  SECTION("partial rotary, explicit head_dim, GPT-J and GPT-NeoX keys, default base") {
    const rope_params neox = {{"hidden_size", 512.0},
                              {"num_attention_heads", 4.0},
                              {"rotary_pct", 0.25},
                              {"rotary_emb_base", 10000.0}};
    check_golden(posenc::rope_config_from_hf(neox).frequencies(), "pythia");
    const rope_params phi = {{"head_dim", 128.0}, {"partial_rotary_factor", 0.25}};
    check_golden(posenc::rope_config_from_hf(phi).frequencies(), "pythia");
    const rope_params gptj = {{"n_embd", 4096.0},
                              {"n_head", 16.0},
                              {"rotary_dim", 64.0},
                              {"model_type", std::string("gptj")}};
    const rope_config g = posenc::rope_config_from_hf(gptj);
    CHECK(g.head_dim == 256);
    CHECK(g.pairing == posenc::rope_pairing::interleaved);
    check_golden(g.frequencies(), "gptj");
  }
  SECTION("linear, dynamic, ntk, yarn options") {
    const rope_params config = {{"head_dim", 128.0}, {"max_position_embeddings", 4096.0}};
    check_golden(
        posenc::rope_config_from_hf(config, {{"rope_type", std::string("linear")}, {"factor", 4.0}})
            .frequencies(),
        "linear");
    check_golden(posenc::rope_config_from_hf(
                     config, {{"rope_type", std::string("dynamic")}, {"factor", 2.0}})
                     .frequencies(8192),
                 "dynamic_8192");
    check_golden(
        posenc::rope_config_from_hf(config, {{"rope_type", std::string("ntk")}, {"alpha", 8.0}})
            .frequencies(),
        "ntk");
    const rope_params y = {{"rope_type", std::string("yarn")},
                           {"factor", 32.0},
                           {"beta_fast", 32.0},
                           {"beta_slow", 1.0},
                           {"truncate", false},
                           {"rope_theta", 150000.0}};
    const rope_config c =
        posenc::rope_config_from_hf({{"head_dim", 64.0}, {"max_position_embeddings", 4096.0}}, y);
    CHECK_FALSE(c.truncate);
    check_golden(c.frequencies(), "yarn_notrunc");
    const rope_params ds = {{"rope_type", std::string("yarn")},
                            {"factor", 40.0},
                            {"original_max_position_embeddings", 4096.0},
                            {"mscale", 0.707},
                            {"mscale_all_dim", 0.707}};
    check_golden(posenc::rope_config_from_hf({{"head_dim", 64.0}}, ds).frequencies(),
                 "yarn_deepseek");
    const rope_params ov = {{"rope_type", std::string("yarn")},
                            {"factor", 4.0},
                            {"original_max_position_embeddings", 32768.0},
                            {"attention_factor", 1.25}};
    check_golden(
        posenc::rope_config_from_hf({{"head_dim", 128.0}, {"rope_theta", 1e6}}, ov).frequencies(),
        "yarn_override");
    const rope_params xp = {{"rope_type", std::string("xpos")}, {"xpos_scale_base", 256.0}};
    CHECK(posenc::rope_config_from_hf(config, xp).frequencies().xpos_scale_base == 256.0);
  }
  SECTION("errors name the key") {
    const rope_params ok = {{"head_dim", 128.0}, {"max_position_embeddings", 4096.0}};
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf(ok, {{"rope_type", std::string("magic")}}),
                         "rope_type = magic");
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf(ok, {{"type", std::string("Linear")}}),
                         "type = Linear");
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf(ok, {{"rope_type", std::string("linear")}}),
                         "factor = <missing>");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf(ok, {{"rope_type", std::string("linear")}, {"factor", true}}),
        "factor = <not a number>");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf(ok, {{"rope_type", std::string("linear")}, {"factor", -2.0}}),
        "factor = -2");
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf(ok, {{"rope_type", 3.0}}),
                         "rope_type = <not a string>");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf(
            ok, {{"rope_type", std::string("yarn")}, {"factor", 4.0}, {"truncate", 1.0}}),
        "truncate = <not a boolean>");
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf(
                             ok, {{"rope_type", std::string("longrope")}, {"short_factor", 1.0}}),
                         "short_factor = <not a list>");
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf({{"hidden_size", 4096.0}}),
                         "num_attention_heads = <missing>");
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf({{"num_attention_heads", 32.0}}),
                         "hidden_size = <missing>");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"hidden_size", 4096.0}, {"num_attention_heads", 30.0}}),
        "num_attention_heads = 30");
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf({{"head_dim", 127.5}}), "head_dim = 127.5");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"head_dim", 128.0}, {"partial_rotary_factor", 1.5}}),
        "partial_rotary_factor = 1.5");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"head_dim", 100.0}, {"partial_rotary_factor", 0.25}}),
        "rotary_dim = 25");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"head_dim", 128.0}},
                                    {{"rope_type", std::string("dynamic")}, {"factor", 2.0}}),
        "max_position_embeddings = <missing>");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"head_dim", 128.0}},
                                    {{"rope_type", std::string("yarn")}, {"factor", 2.0}}),
        "original_max_position_embeddings = <missing>");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"head_dim", 128.0}}, {{"rope_type", std::string("llama3")},
                                                            {"factor", 8.0},
                                                            {"low_freq_factor", 1.0},
                                                            {"high_freq_factor", 4.0}}),
        "original_max_position_embeddings = <missing>");
    POSENC_REQUIRE_ERROR(
        posenc::rope_config_from_hf({{"head_dim", 96.0}, {"max_position_embeddings", 131072.0}},
                                    {{"rope_type", std::string("longrope")},
                                     {"short_factor", phi3_short},
                                     {"long_factor", std::vector<double>(47, 1.0)}}),
        "long_factor.size() = 47");
  }
}

TEST_CASE("rope_config from a config.json text", "[rotary][scaling][hf][json]") {
  const std::string llama = R"({
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": false,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
      "factor": 8.0,
      "low_freq_factor": 1.0,
      "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192,
      "rope_type": "llama3"
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": false,
    "torch_dtype": "bfloat16",
    "quantization_config": {"bits": 4, "modules": [["q", "k"], []], "name": "a\"b\\c\u00e9"},
    "vocab_size": 128256
  })";
  check_golden(posenc::rope_config_from_hf_json(llama).frequencies(), "llama31_8b");

  std::string phi = R"({"hidden_size": 3072, "num_attention_heads": 32,
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0, "sliding_window": null, "rope_scaling": {"type": "su", "long_factor": [)";
  for (std::size_t i = 0; i < phi3_long.size(); ++i)
    phi += (i ? ", " : "") + std::to_string(phi3_long[i]);
  phi += R"(], "short_factor": [)";
  for (std::size_t i = 0; i < phi3_short.size(); ++i)
    phi += (i ? ", " : "") + std::to_string(phi3_short[i]);
  phi += "]}}";
  // std::to_string keeps 6 decimals: the factors differ from the goldens' at the 1e-7 level.
  const rope_config c = posenc::rope_config_from_hf_json(phi);
  CHECK(c.scaling == rope_scaling_type::longrope);
  CHECK(c.short_factor.size() == 48);
  check_golden(c.frequencies(5000), "phi3_long", 1e-6);

  // No rope_scaling (or null): plain RoPE.
  check_golden(
      posenc::rope_config_from_hf_json(R"({"head_dim": 128, "rope_scaling": null})").frequencies(),
      "llama2_7b");
  // Newer configs: rope_parameters holds rope_theta and rope_type.
  check_golden(
      posenc::rope_config_from_hf_json(
          R"({"head_dim":128,"rope_parameters":{"rope_theta":1000000.0,"rope_type":"yarn","factor":4.0,
                       "original_max_position_embeddings":32768}})")
          .frequencies(),
      "qwen2_yarn");

  // rope_parameters keyed by layer type (Gemma-3 style): pick one, else an error.
  const std::string per_layer = R"({"head_dim": 128, "partial_rotary_factor": 1.0,
    "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}})";
  check_golden(posenc::rope_config_from_hf_json(per_layer, "full_attention").frequencies(),
               "linear");
  const rope_config sliding = posenc::rope_config_from_hf_json(per_layer, "sliding_attention");
  CHECK(sliding.resolved_rotary_dim() == 32);  // the dict's partial_rotary_factor wins
  check_golden(sliding.frequencies(), "pythia");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(per_layer),
                       "layer_type = <none>: rope parameters are given per layer type "
                       "(full_attention, sliding_attention)");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(per_layer, "global"),
                       "layer_type = global");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(R"({"head_dim": 128})", "full_attention"),
                       "layer_type = full_attention");

  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"head_dim\": 128,}"), "invalid JSON");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("[1, 2]"), "offset = 0");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"head_dim\": 128} x"), "trailing");
  // An empty top-level object is no exception: what follows it is still an error.
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{} x"),
                       "offset = 3: invalid JSON: trailing");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json(" {}{}"),
                       "offset = 3: invalid JSON: trailing");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("  "),
                       "offset = 2: invalid JSON: expected '{'");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"head_dim\": 128, \"head_dim\": 64}"),
                       "duplicate key");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"head_dim\": +128}"), "invalid JSON");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"head_dim\": 12a8}"), "invalid JSON");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"head_dim\": \"128"), "invalid JSON");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"a\": " + std::string(100, '[') +
                                                        std::string(100, ']') + "}"),
                       "nesting");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json("{\"head_dim\": \"128\"}"),
                       "head_dim = <not a number>");
  POSENC_REQUIRE_ERROR(posenc::rope_config_from_hf_json_file("/nonexistent/config.json"),
                       "path = /nonexistent/config.json");

  // The file reader: a Qwen2-style config.json written to the test tmp dir.
  const std::string path = std::string(POSENC_TEST_TMP_DIR) + "/rope_scaling_qwen2_config.json";
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\n  \"hidden_size\": 3584,\n  \"num_attention_heads\": 28,\n"
           "  \"max_position_embeddings\": 32768,\n  \"rope_theta\": 1000000.0,\n"
           "  \"rope_scaling\": {\"factor\": 4.0, \"original_max_position_embeddings\": 32768,"
           " \"type\": \"yarn\"}\n}\n";
  }
  check_golden(posenc::rope_config_from_hf_json_file(path).frequencies(), "qwen2_yarn");
  std::remove(path.c_str());
}

TEST_CASE("rope_config from llama.cpp / GGUF parameters equals the Hugging Face one",
          "[rotary][scaling][gguf]") {
  SECTION("Qwen2 YaRN: bit-identical frequencies and attention factor") {
    posenc::gguf_rope_params g;
    g.n_dims = 128;
    g.pairing = posenc::rope_pairing::half;
    g.freq_base = 1e6;
    g.freq_scale = 0.25;
    g.ext_factor = 1.0;
    g.attn_factor = 1.0;
    g.n_ctx_orig = 32768;
    const rope_config c = posenc::rope_config_from_gguf(g);
    CHECK(c.scaling == rope_scaling_type::yarn);
    CHECK(same_bits(c.frequencies(), qwen2_yarn().frequencies()));
    check_golden(c.frequencies(), "gguf_qwen2_yarn");
  }
  SECTION("Phi-3 long factors as freq_factors: bit-identical") {
    posenc::gguf_rope_params g;
    g.n_dims = 96;
    g.freq_base = 10000.0;
    g.attn_factor = std::sqrt(1.0 + std::log(32.0) / std::log(4096.0));
    g.freq_factors = phi3_long;
    const rope_config c = posenc::rope_config_from_gguf(g);
    CHECK(same_bits(c.frequencies(), phi3().frequencies(8192)));
    check_golden(c.frequencies(), "gguf_phi3_long");
  }
  SECTION("Llama-3.1 via rope_freqs (llama.cpp's converter): equal to 1e-15") {
    const std::vector<double> ff = [] {
      const auto m = posenc::io::read_npy_matrix<double>(
          std::string(POSENC_TEST_DATA_DIR) + "/rope_scaling_gguf_llama31_8b_freq_factors.npy");
      return std::vector<double>(m.data(), m.data() + m.cols());
    }();
    posenc::gguf_rope_params g;
    g.n_dims = 128;
    g.freq_base = 500000.0;
    g.freq_factors = ff;
    const rope_config c = posenc::rope_config_from_gguf(g);
    CHECK(c.scaling == rope_scaling_type::none);
    CHECK(c.pairing == posenc::rope_pairing::interleaved);
    check_golden(c.frequencies(), "gguf_llama31_8b", 1e-15);
    check_golden(c.frequencies(), "llama31_8b", 1e-15);
  }
  SECTION("linear: bit-identical; partial ext_factor and attn_factor follow ggml") {
    posenc::gguf_rope_params g;
    g.n_dims = 128;
    g.freq_scale = 0.25;
    CHECK(same_bits(posenc::rope_config_from_gguf(g).frequencies(),
                    simple(rope_scaling_type::linear, 4.0).frequencies()));
    check_golden(posenc::rope_config_from_gguf(g).frequencies(), "gguf_linear");
    g.freq_scale = 0.125;
    g.ext_factor = 0.5;
    g.attn_factor = 0.9;
    g.n_ctx_orig = 4096;
    check_golden(posenc::rope_config_from_gguf(g).frequencies(), "gguf_yarn_half_ext");
  }
  SECTION("errors") {
    posenc::gguf_rope_params g;
    g.n_dims = 127;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "n_dims = 127");
    g.n_dims = 128;
    g.freq_scale = 0.0;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "freq_scale = 0");
    g.freq_scale = 0.5;
    g.ext_factor = 1.5;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "ext_factor = 1.5");
    g.ext_factor = 1.0;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "n_ctx_orig = 0");
    g.n_ctx_orig = 4096;
    g.attn_factor = -1.0;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "attn_factor = -1");
    g.attn_factor = 1.0;
    g.freq_factors = std::vector<double>(63, 1.0);
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "freq_factors.size() = 63");
    g.freq_factors = std::vector<double>(64, 1.0);
    g.freq_factors[5] = 0.0;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "freq_factors[5] = 0");
    g.freq_factors.clear();
    g.head_dim = 64;
    POSENC_REQUIRE_ERROR(posenc::rope_config_from_gguf(g), "rotary_dim = 128");
  }
}

TEST_CASE("rope_config validation names the parameter", "[rotary][scaling][error]") {
  rope_config c;
  POSENC_REQUIRE_ERROR(c.validate(), "head_dim = 0");
  c.head_dim = 128;
  c.validate();
  c.rotary_dim = 63;
  POSENC_REQUIRE_ERROR(c.frequencies(), "rotary_dim = 63");
  c.rotary_dim = 130;
  POSENC_REQUIRE_ERROR(c.frequencies(), "rotary_dim = 130");
  c.rotary_dim = 0;
  POSENC_REQUIRE_ERROR(c.frequencies(), "rotary_dim = 0");
  c.rotary_dim = -2;
  POSENC_REQUIRE_ERROR(c.frequencies(), "rotary_dim = -2");
  c.rotary_dim = -1;
  c.base = 1.0;
  POSENC_REQUIRE_ERROR(c.frequencies(), "base = 1");
  c.base = std::nan("");
  POSENC_REQUIRE_ERROR(c.frequencies(), "base = nan");
  c.base = 10000.0;
  c.scaling = static_cast<rope_scaling_type>(42);
  POSENC_REQUIRE_ERROR(c.frequencies(), "scaling = 42");
  c.scaling = rope_scaling_type::none;
  c.pairing = static_cast<posenc::rope_pairing>(7);
  POSENC_REQUIRE_ERROR(c.frequencies(), "pairing = 7");
  c.pairing = posenc::rope_pairing::half;
  POSENC_REQUIRE_ERROR(c.frequencies(-1), "seq_len = -1");

  POSENC_REQUIRE_ERROR(simple(rope_scaling_type::linear, 0.0).frequencies(), "factor = 0");
  POSENC_REQUIRE_ERROR(simple(rope_scaling_type::yarn, -1.0, 4096).frequencies(), "factor = -1");
  POSENC_REQUIRE_ERROR(
      simple(rope_scaling_type::ntk, std::numeric_limits<double>::infinity()).frequencies(),
      "factor = inf");
  rope_config a = simple(rope_scaling_type::none, 1.0);
  a.attention_factor = 0.0;
  POSENC_REQUIRE_ERROR(a.frequencies(), "attention_factor = 0");

  rope_config n = simple(rope_scaling_type::ntk, 2.0);
  n.head_dim = 2;
  POSENC_REQUIRE_ERROR(n.frequencies(), "rotary_dim = 2");
  for (rope_scaling_type t : {rope_scaling_type::dynamic, rope_scaling_type::yarn,
                              rope_scaling_type::llama3, rope_scaling_type::longrope}) {
    INFO(posenc::to_string(t));
    POSENC_REQUIRE_ERROR(simple(t, 2.0, 0).frequencies(), "original_max_positions = 0");
  }

  rope_config y = qwen2_yarn();
  y.beta_fast = 1.0;
  POSENC_REQUIRE_ERROR(y.frequencies(), "beta_fast = 1");
  y.beta_fast = 32.0;
  y.beta_slow = 0.0;
  POSENC_REQUIRE_ERROR(y.frequencies(), "beta_slow = 0");
  y.beta_slow = 1.0;
  y.mscale = std::numeric_limits<double>::infinity();
  POSENC_REQUIRE_ERROR(y.frequencies(), "mscale = inf");
  y.mscale.reset();
  y.mscale_all_dim = std::nan("");
  POSENC_REQUIRE_ERROR(y.frequencies(), "mscale_all_dim = nan");
  y.mscale_all_dim.reset();
  y.yarn_ext_factor = -0.5;
  POSENC_REQUIRE_ERROR(y.frequencies(), "yarn_ext_factor = -0.5");

  rope_config l3 = llama31();
  l3.low_freq_factor = 0.0;
  POSENC_REQUIRE_ERROR(l3.frequencies(), "low_freq_factor = 0");
  l3.low_freq_factor = 4.0;
  POSENC_REQUIRE_ERROR(l3.frequencies(), "high_freq_factor = 4");

  rope_config p = phi3();
  p.short_factor.pop_back();
  POSENC_REQUIRE_ERROR(p.frequencies(), "short_factor.size() = 47");
  p = phi3();
  p.long_factor.push_back(1.0);
  POSENC_REQUIRE_ERROR(p.frequencies(), "long_factor.size() = 49");
  p = phi3();
  p.long_factor[3] = -1.0;
  POSENC_REQUIRE_ERROR(p.frequencies(), "long_factor[3] = -1");
  p = phi3();
  p.freq_factors = std::vector<double>(48, 1.0);
  POSENC_REQUIRE_ERROR(p.frequencies(), "freq_factors.size() = 48");

  rope_config x = simple(rope_scaling_type::xpos, 1.0);
  x.xpos_scale_base = 0.0;
  POSENC_REQUIRE_ERROR(x.frequencies(), "xpos_scale_base = 0");
  x.xpos_scale_base = 512.0;
  x.xpos_gamma = 0.0;
  POSENC_REQUIRE_ERROR(x.frequencies(), "xpos_gamma = 0");

  POSENC_REQUIRE_ERROR(posenc::plain_rope_frequencies(7), "rotary_dim = 7");
  POSENC_REQUIRE_ERROR(posenc::plain_rope_frequencies(0), "rotary_dim = 0");
  POSENC_REQUIRE_ERROR(posenc::plain_rope_frequencies(64, 0.5), "base = 0.5");

  POSENC_REQUIRE_ERROR(posenc::parse_rope_scaling_type("cubic"), "scaling = cubic");
  POSENC_REQUIRE_ERROR(posenc::parse_rope_pairing("neox"), "pairing = neox");
  CHECK(posenc::parse_rope_scaling_type("su") == rope_scaling_type::longrope);
  CHECK(posenc::parse_rope_scaling_type("default") == rope_scaling_type::none);
  for (rope_scaling_type t :
       {rope_scaling_type::none, rope_scaling_type::linear, rope_scaling_type::ntk,
        rope_scaling_type::dynamic, rope_scaling_type::yarn, rope_scaling_type::llama3,
        rope_scaling_type::longrope, rope_scaling_type::xpos})
    CHECK(posenc::parse_rope_scaling_type(posenc::to_string(t)) == t);
  CHECK(posenc::parse_rope_pairing("interleaved") == posenc::rope_pairing::interleaved);
  CHECK(std::string(posenc::to_string(posenc::rope_pairing::half)) == "half");
}
