// posenc::model_config from Hugging Face config.json texts of seven model families as published
// on the hub (tests/data/configs/), every field checked, and the errors for bad values.

#include <posenc/encoding/rotary/model_config.hpp>
#include <string>

#include "io_test_util.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"
#include "support/rope_models.hpp"

using posenc::Index;
using posenc::rope_pairing;
using posenc::rope_scaling_type;
using posenc_test::data_path;
namespace io = posenc::io;

namespace {

posenc::model_config config(const std::string& name) {
  return posenc::model_config_from_hf_json_file(data_path("configs/" + name));
}

/// The text of a shipped config with `from` replaced by `to` (which must occur once).
std::string edited(const std::string& name, const std::string& from, const std::string& to) {
  std::string text = posenc_test::read_bytes(data_path("configs/" + name));
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("model_config: Llama 3.1 8B (GQA, llama3 scaling)", "[io][model_config]") {
  const posenc::model_config m = config("llama-3.1-8b.json");
  CHECK(m.model_type == "llama");
  CHECK(m.num_attention_heads == 32);
  CHECK(m.num_key_value_heads == 8);
  CHECK(m.head_dim == 128);
  CHECK(m.hidden_size == 4096);
  CHECK(m.max_position_embeddings == 131072);
  CHECK(m.rotary_dim == 128);
  CHECK(m.partial_rotary_factor == 1.0);
  CHECK_FALSE(m.sliding_window.has_value());
  CHECK(m.rope.head_dim == 128);
  CHECK(m.rope.base == 500000.0);
  CHECK(m.rope.pairing == rope_pairing::half);
  CHECK(m.rope.scaling == rope_scaling_type::llama3);
  CHECK(m.rope.factor == 8.0);
  CHECK(m.rope.low_freq_factor == 1.0);
  CHECK(m.rope.high_freq_factor == 4.0);
  CHECK(m.rope.original_max_positions == 8192);
}

TEST_CASE("model_config: Qwen2 7B (sliding_window off by use_sliding_window)",
          "[io][model_config]") {
  const posenc::model_config m = config("qwen2-7b.json");
  CHECK(m.model_type == "qwen2");
  CHECK(m.num_attention_heads == 28);
  CHECK(m.num_key_value_heads == 4);
  CHECK(m.head_dim == 128);  // 3584 / 28
  CHECK(m.hidden_size == 3584);
  CHECK(m.max_position_embeddings == 131072);
  CHECK(m.rotary_dim == 128);
  CHECK_FALSE(m.sliding_window.has_value());
  CHECK(m.rope.base == 1000000.0);
  CHECK(m.rope.scaling == rope_scaling_type::none);
  CHECK(m.rope.pairing == rope_pairing::half);
  // the same file with the window switched on
  const posenc::model_config on = posenc::model_config_from_hf_json(
      edited("qwen2-7b.json", "\"use_sliding_window\": false", "\"use_sliding_window\": true"));
  REQUIRE(on.sliding_window.has_value());
  CHECK(*on.sliding_window == 131072);
}

TEST_CASE("model_config: Mistral 7B v0.1 (sliding window 4096)", "[io][model_config]") {
  const posenc::model_config m = config("mistral-7b-v0.1.json");
  CHECK(m.model_type == "mistral");
  CHECK(m.num_attention_heads == 32);
  CHECK(m.num_key_value_heads == 8);
  CHECK(m.head_dim == 128);
  CHECK(m.hidden_size == 4096);
  CHECK(m.max_position_embeddings == 32768);
  CHECK(m.rotary_dim == 128);
  REQUIRE(m.sliding_window.has_value());
  CHECK(*m.sliding_window == 4096);
  CHECK(m.rope.base == 10000.0);
  CHECK(m.rope.scaling == rope_scaling_type::none);
  // v0.2 and later ship "sliding_window": null
  const posenc::model_config v2 = posenc::model_config_from_hf_json(
      edited("mistral-7b-v0.1.json", "\"sliding_window\": 4096", "\"sliding_window\": null"));
  CHECK_FALSE(v2.sliding_window.has_value());
}

TEST_CASE("model_config: Phi-3 mini 128k (longrope short/long factors)", "[io][model_config]") {
  const posenc::model_config m = config("phi-3-mini-128k-instruct.json");
  CHECK(m.model_type == "phi3");
  CHECK(m.num_attention_heads == 32);
  CHECK(m.num_key_value_heads == 32);
  CHECK(m.head_dim == 96);
  CHECK(m.hidden_size == 3072);
  CHECK(m.max_position_embeddings == 131072);
  CHECK(m.rotary_dim == 96);
  CHECK(m.partial_rotary_factor == 1.0);
  REQUIRE(m.sliding_window.has_value());
  CHECK(*m.sliding_window == 262144);
  CHECK(m.rope.scaling == rope_scaling_type::longrope);  // published as "type": "su"
  CHECK(m.rope.short_factor == posenc_test::phi3_short);
  CHECK(m.rope.long_factor == posenc_test::phi3_long);
  CHECK(m.rope.original_max_positions == 4096);
  CHECK(m.rope.factor == 32.0);
  // the same rope_config as the hand-built one the scaling tests use
  const posenc::rope_config ref = posenc_test::phi3();
  CHECK(m.rope.frequencies(8192).inv_freq == ref.frequencies(8192).inv_freq);
  CHECK(m.rope.frequencies(8192).attention_factor == ref.frequencies(8192).attention_factor);
  const posenc::model_config renamed = posenc::model_config_from_hf_json(
      edited("phi-3-mini-128k-instruct.json", "\"type\": \"su\"", "\"type\": \"longrope\""));
  CHECK(renamed.rope.scaling == rope_scaling_type::longrope);
  CHECK(renamed.rope.long_factor == posenc_test::phi3_long);
}

TEST_CASE("model_config: GPT-NeoX 20B (rotary_pct 0.25, no kv heads key)", "[io][model_config]") {
  const posenc::model_config m = config("gpt-neox-20b.json");
  CHECK(m.model_type == "gpt_neox");
  CHECK(m.num_attention_heads == 64);
  CHECK(m.num_key_value_heads == 64);  // absent: one kv head per head
  CHECK(m.head_dim == 96);             // 6144 / 64
  CHECK(m.hidden_size == 6144);
  CHECK(m.max_position_embeddings == 2048);
  CHECK(m.rotary_dim == 24);
  CHECK(m.partial_rotary_factor == 0.25);
  CHECK_FALSE(m.sliding_window.has_value());
  CHECK(m.rope.base == 10000.0);  // rotary_emb_base
  CHECK(m.rope.pairing == rope_pairing::half);
}

TEST_CASE("model_config: GPT-J 6B (n_head / n_embd / n_positions, interleaved)",
          "[io][model_config]") {
  const posenc::model_config m = config("gpt-j-6b.json");
  CHECK(m.model_type == "gptj");
  CHECK(m.num_attention_heads == 16);
  CHECK(m.num_key_value_heads == 16);
  CHECK(m.head_dim == 256);
  CHECK(m.hidden_size == 4096);
  CHECK(m.max_position_embeddings == 2048);
  CHECK(m.rotary_dim == 64);
  CHECK(m.partial_rotary_factor == 0.25);  // 64 / 256
  CHECK_FALSE(m.sliding_window.has_value());
  CHECK(m.rope.pairing == rope_pairing::interleaved);
  CHECK(m.rope.rotary_dim == 64);
  CHECK(m.rope.base == 10000.0);
}

TEST_CASE("model_config: Gemma 7B and 2B (head_dim 256 given, MQA)", "[io][model_config]") {
  const posenc::model_config m7 = config("gemma-7b.json");
  CHECK(m7.model_type == "gemma");
  CHECK(m7.num_attention_heads == 16);
  CHECK(m7.num_key_value_heads == 16);
  CHECK(m7.head_dim == 256);  // not 3072 / 16
  CHECK(m7.hidden_size == 3072);
  CHECK(m7.max_position_embeddings == 8192);
  CHECK(m7.rotary_dim == 256);
  CHECK(m7.rope.head_dim == 256);
  CHECK(m7.rope.scaling == rope_scaling_type::none);  // "rope_scaling": null
  CHECK_FALSE(m7.sliding_window.has_value());
  const posenc::model_config m2 = config("gemma-2b.json");
  CHECK(m2.num_attention_heads == 8);
  CHECK(m2.num_key_value_heads == 1);
  CHECK(m2.head_dim == 256);
  CHECK(m2.hidden_size == 2048);
  CHECK(m2.rotary_dim == 256);
}

TEST_CASE("model_config: bad values name the key and the value", "[io][model_config]") {
  const std::string l = "llama-3.1-8b.json";
  const auto bad = [&](const std::string& from, const std::string& to) {
    return posenc::model_config_from_hf_json(edited(l, from, to));
  };
  POSENC_REQUIRE_ERROR(bad("\"num_attention_heads\": 32", "\"num_attention_heads\": -32"),
                       "num_attention_heads = -32: must be > 0");
  POSENC_REQUIRE_ERROR(bad("\"num_attention_heads\": 32", "\"num_attention_heads\": 0"),
                       "num_attention_heads = 0");
  POSENC_REQUIRE_ERROR(bad("\"num_attention_heads\": 32", "\"num_attention_heads\": 48"),
                       "num_attention_heads = 48: must divide hidden_size = 4096");
  POSENC_REQUIRE_ERROR(bad("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 6"),
                       "num_key_value_heads = 6: must be > 0 and divide num_attention_heads = 32");
  POSENC_REQUIRE_ERROR(bad("\"num_key_value_heads\": 8", "\"num_key_value_heads\": -8"),
                       "num_key_value_heads = -8");
  POSENC_REQUIRE_ERROR(bad("\"num_attention_heads\": 32", "\"num_attention_heads\": \"32\""),
                       "num_attention_heads = \"32\": must be an integer");
  POSENC_REQUIRE_ERROR(bad("\"num_attention_heads\": 32", "\"num_attention_heads\": 32.5"),
                       "num_attention_heads = 32.5: must be an integer");
  POSENC_REQUIRE_ERROR(bad("\"hidden_size\": 4096", "\"hidden_size\": true"),
                       "hidden_size = true: must be an integer");
  POSENC_REQUIRE_ERROR(bad("\"hidden_size\": 4096", "\"hidden_size\": -4096"),
                       "hidden_size = -4096: must be > 0");
  POSENC_REQUIRE_ERROR(bad("\"hidden_size\": 4096,", ""), "hidden_size = <missing>");
  POSENC_REQUIRE_ERROR(bad("\"num_attention_heads\": 32,", ""), "num_attention_heads = <missing>");
  POSENC_REQUIRE_ERROR(bad("\"max_position_embeddings\": 131072", "\"max_position_embeddings\": 0"),
                       "max_position_embeddings = 0: must be > 0");
  POSENC_REQUIRE_ERROR(bad("\"model_type\": \"llama\"", "\"model_type\": 7"),
                       "model_type = 7: must be a string");
  POSENC_REQUIRE_ERROR(bad("\"hidden_act\"", "\"head_dim\": -128, \"hidden_act\""),
                       "head_dim = -128: must be > 0");
  POSENC_REQUIRE_ERROR(bad("\"hidden_act\"", "\"sliding_window\": -1, \"hidden_act\""),
                       "sliding_window = -1: must be > 0");
  POSENC_REQUIRE_ERROR(bad("\"hidden_act\"", "\"use_sliding_window\": 1, \"hidden_act\""),
                       "use_sliding_window = 1: must be true or false");
  POSENC_REQUIRE_ERROR(bad("\"rope_theta\": 500000.0", "\"rope_theta\": \"x\""), "rope_theta");
  POSENC_REQUIRE_ERROR(bad("\"vocab_size\": 128256\n}", "\"vocab_size\": 128256,\n}"),
                       "invalid JSON");
  // the library's limits (core/limits.hpp)
  POSENC_REQUIRE_ERROR(bad("\"num_attention_heads\": 32", "\"num_attention_heads\": 131072"),
                       "num_attention_heads = 131072: must be <= 65536");
  POSENC_REQUIRE_ERROR(bad("\"hidden_act\"", "\"head_dim\": 4194304, \"hidden_act\""),
                       "head_dim = 4194304: must be <= 2^20");
  // GPT-J's own names are checked the same way
  POSENC_REQUIRE_ERROR(posenc::model_config_from_hf_json(
                           edited("gpt-j-6b.json", "\"n_head\": 16", "\"n_head\": 15")),
                       "n_head = 15: must divide n_embd = 4096");
  POSENC_REQUIRE_ERROR(posenc::model_config_from_hf_json_file(data_path("configs/absent.json")),
                       "cannot be opened");
}
