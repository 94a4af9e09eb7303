#pragma once
/// \file
/// Building a rope_config from the parameters a checkpoint ships with:
///
/// - Hugging Face `config.json`: top-level `rope_theta`, `partial_rotary_factor`,
///   `head_dim` / `hidden_size` / `num_attention_heads`, `max_position_embeddings`,
///   `original_max_position_embeddings` (Phi-3) and the `rope_scaling` dict (`rope_type` or
///   `type`, `factor`, `original_max_position_embeddings`, `beta_fast`, `beta_slow`, `mscale`,
///   `mscale_all_dim`, `attention_factor`, `truncate`, `low_freq_factor`, `high_freq_factor`,
///   `short_factor`, `long_factor`), as two rope_params maps or as the JSON text itself;
/// - llama.cpp / GGUF rope parameters (`freq_base`, `freq_scale`, `ext_factor`, `attn_factor`,
///   `beta_fast`, `beta_slow`, `n_ctx_orig`, `freq_factors`).
///
/// Both map the same model to the same effective inv_freq and attention factor (tested).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/view.hpp"
#include "../../io/json.hpp"
#include "frequencies.hpp"
#include "scaling.hpp"

namespace posenc {

/// One configuration value: a number, a boolean, a string or a list of numbers.
using rope_param = std::variant<double, bool, std::string, std::vector<double>>;

/// A flat key/value map of configuration values, keyed by the Hugging Face parameter names
/// (JSON `null` values are simply left out).
using rope_params = std::map<std::string, rope_param, std::less<>>;

namespace detail {

inline const rope_param* find_param(const rope_params& p, std::string_view key) {
  const auto it = p.find(key);
  return it == p.end() ? nullptr : &it->second;
}

inline std::optional<double> param_number(const rope_params& p, std::string_view key) {
  const rope_param* v = find_param(p, key);
  if (!v) return std::nullopt;
  if (const double* d = std::get_if<double>(v)) return *d;
  fail("rope_config_from_hf", key, "<not a number>", "must be a number");
}

inline std::optional<Index> param_index(const rope_params& p, std::string_view key) {
  const std::optional<double> d = param_number(p, key);
  if (!d) return std::nullopt;
  require(std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 9.0e15,
          "rope_config_from_hf", key, *d, "must be an integer");
  return static_cast<Index>(*d);
}

inline std::optional<bool> param_bool(const rope_params& p, std::string_view key) {
  const rope_param* v = find_param(p, key);
  if (!v) return std::nullopt;
  if (const bool* b = std::get_if<bool>(v)) return *b;
  fail("rope_config_from_hf", key, "<not a boolean>", "must be true or false");
}

inline std::optional<std::string> param_string(const rope_params& p, std::string_view key) {
  const rope_param* v = find_param(p, key);
  if (!v) return std::nullopt;
  if (const std::string* s = std::get_if<std::string>(v)) return *s;
  fail("rope_config_from_hf", key, "<not a string>", "must be a string");
}

inline std::optional<std::vector<double>> param_list(const rope_params& p, std::string_view key) {
  const rope_param* v = find_param(p, key);
  if (!v) return std::nullopt;
  if (const auto* l = std::get_if<std::vector<double>>(v)) return *l;
  // read_hf_json keeps a list holding a non-number as a string that says where
  if (const auto* s = std::get_if<std::string>(v); s && s->rfind("<a list", 0) == 0)
    fail("rope_config_from_hf", key, *s, "must be a list of numbers");
  fail("rope_config_from_hf", key, "<not a list>", "must be a list of numbers");
}

template <class T>
T required(const std::optional<T>& v, std::string_view key, std::string_view why) {
  if (!v) fail("rope_config_from_hf", key, "<missing>", why);
  return *v;
}

}  // namespace detail

/// A rope_config from a Hugging Face model config (`config`: the top-level keys) and its
/// `rope_scaling` dict (`rope_scaling`; empty = no scaling). Newer configs that put
/// `rope_theta` inside the dict (`rope_parameters`) work too: the dict's value wins.
///
/// Read keys and how they map (everything else is ignored):
/// - head dim: `head_dim`, else `hidden_size / num_attention_heads` (GPT-J: `n_embd / n_head`);
/// - rotary dim: `rotary_dim` (GPT-J), else `int(head_dim * partial_rotary_factor)` (from the
///   dict or the top level; `rotary_pct` for GPT-NeoX / Pythia), default the whole head;
/// - base: `rope_theta` (`rotary_emb_base` for GPT-NeoX), default 10000;
/// - pairing: interleaved for `model_type` "gptj" / "codegen" (their rotate_every_two),
///   half (rotate_half) otherwise;
/// - `rope_type` / `type`: default, linear, dynamic, yarn, llama3, longrope (or "su"), plus
///   posenc's own ntk (`factor` or `alpha`) and xpos (`xpos_scale_base`, `xpos_gamma`);
/// - dynamic: original context = `max_position_embeddings` (as Hugging Face does);
/// - yarn: original context = the dict's `original_max_position_embeddings`, else
///   `max_position_embeddings`;
/// - longrope: original context = top-level (or dict) `original_max_position_embeddings`, else
///   `max_position_embeddings`; factor (for the default attention factor) = the dict's `factor`,
///   else `max_position_embeddings` / original, else 1.
///
/// Throws posenc::error naming the key for a missing required key, a value of the wrong
/// type, an unknown `rope_type`, and anything rope_config::validate() rejects.
inline rope_config rope_config_from_hf(const rope_params& config,
                                       const rope_params& rope_scaling = {}) {
  using namespace detail;
  rope_config c;
  // Sizes.
  if (auto hd = param_index(config, "head_dim")) {
    c.head_dim = *hd;
  } else {
    const bool gptj = find_param(config, "n_embd") != nullptr;
    const char* hidden_key = gptj ? "n_embd" : "hidden_size";
    const char* heads_key = gptj ? "n_head" : "num_attention_heads";
    const Index hidden = required(param_index(config, hidden_key), hidden_key,
                                  "needed for the head dim (or give head_dim)");
    const Index heads = required(param_index(config, heads_key), heads_key,
                                 "needed for the head dim (or give head_dim)");
    require(heads > 0 && hidden > 0 && hidden % heads == 0, "rope_config_from_hf", heads_key, heads,
            "must be > 0 and divide " + std::string(hidden_key) + " = " + std::to_string(hidden));
    c.head_dim = hidden / heads;
  }
  if (auto rd = param_index(config, "rotary_dim")) {
    c.rotary_dim = *rd;
  } else {
    std::optional<double> prf = param_number(rope_scaling, "partial_rotary_factor");
    if (!prf) prf = param_number(config, "partial_rotary_factor");
    const char* prf_key = "partial_rotary_factor";
    if (!prf) {
      prf = param_number(config, "rotary_pct");
      prf_key = "rotary_pct";
    }
    if (prf) {
      require(std::isfinite(*prf) && *prf > 0.0 && *prf <= 1.0, "rope_config_from_hf", prf_key,
              *prf, "must be in (0, 1]");
      c.rotary_dim = static_cast<Index>(static_cast<double>(c.head_dim) * *prf);  // int() truncates
    }
  }
  if (auto b = param_number(config, "rope_theta"))
    c.base = *b;
  else if (auto b2 = param_number(config, "rotary_emb_base"))
    c.base = *b2;
  if (auto b = param_number(rope_scaling, "rope_theta")) c.base = *b;
  if (auto mt = param_string(config, "model_type"))
    if (*mt == "gptj" || *mt == "codegen") c.pairing = rope_pairing::interleaved;

  // Scaling.
  std::optional<std::string> type = param_string(rope_scaling, "rope_type");
  const char* type_key = "rope_type";
  if (!type) {
    type = param_string(rope_scaling, "type");
    type_key = "type";
  }
  c.scaling = parse_rope_scaling_type(type.value_or("default"), type_key);
  const std::optional<Index> max_pos = param_index(config, "max_position_embeddings");
  const char* need_factor = "required by this rope_type";
  switch (c.scaling) {
    case rope_scaling_type::none:
      break;
    case rope_scaling_type::linear:
      c.factor = required(param_number(rope_scaling, "factor"), "factor", need_factor);
      break;
    case rope_scaling_type::ntk: {
      std::optional<double> a = param_number(rope_scaling, "factor");
      if (!a) a = param_number(rope_scaling, "alpha");
      c.factor = required(a, "factor", need_factor);
      break;
    }
    case rope_scaling_type::dynamic:
      c.factor = required(param_number(rope_scaling, "factor"), "factor", need_factor);
      c.original_max_positions =
          required(max_pos, "max_position_embeddings", "required by dynamic NTK");
      break;
    case rope_scaling_type::yarn: {
      c.factor = required(param_number(rope_scaling, "factor"), "factor", need_factor);
      std::optional<Index> orig = param_index(rope_scaling, "original_max_position_embeddings");
      if (!orig) orig = max_pos;
      c.original_max_positions = required(orig, "original_max_position_embeddings",
                                          "required by yarn (or max_position_embeddings)");
      if (auto v = param_number(rope_scaling, "beta_fast")) c.beta_fast = *v;
      if (auto v = param_number(rope_scaling, "beta_slow")) c.beta_slow = *v;
      c.mscale = param_number(rope_scaling, "mscale");
      c.mscale_all_dim = param_number(rope_scaling, "mscale_all_dim");
      c.attention_factor = param_number(rope_scaling, "attention_factor");
      if (auto v = param_bool(rope_scaling, "truncate")) c.truncate = *v;
      break;
    }
    case rope_scaling_type::llama3:
      c.factor = required(param_number(rope_scaling, "factor"), "factor", need_factor);
      c.low_freq_factor =
          required(param_number(rope_scaling, "low_freq_factor"), "low_freq_factor", need_factor);
      c.high_freq_factor =
          required(param_number(rope_scaling, "high_freq_factor"), "high_freq_factor", need_factor);
      c.original_max_positions =
          required(param_index(rope_scaling, "original_max_position_embeddings"),
                   "original_max_position_embeddings", need_factor);
      break;
    case rope_scaling_type::longrope: {
      c.short_factor =
          required(param_list(rope_scaling, "short_factor"), "short_factor", need_factor);
      c.long_factor = required(param_list(rope_scaling, "long_factor"), "long_factor", need_factor);
      std::optional<Index> orig = param_index(config, "original_max_position_embeddings");
      if (!orig) orig = param_index(rope_scaling, "original_max_position_embeddings");
      c.original_max_positions = required(orig ? orig : max_pos, "original_max_position_embeddings",
                                          "required by longrope (or max_position_embeddings)");
      require(c.original_max_positions > 0, "rope_config_from_hf",
              "original_max_position_embeddings", c.original_max_positions, "must be > 0");
      if (auto f = param_number(rope_scaling, "factor"))
        c.factor = *f;
      else if (orig && max_pos)
        c.factor = static_cast<double>(*max_pos) / static_cast<double>(*orig);
      else
        c.factor = 1.0;
      c.attention_factor = param_number(rope_scaling, "attention_factor");
      break;
    }
    case rope_scaling_type::xpos:
      if (auto v = param_number(rope_scaling, "xpos_scale_base")) c.xpos_scale_base = *v;
      if (auto v = param_number(rope_scaling, "xpos_gamma")) c.xpos_gamma = *v;
      break;
  }
  c.validate();
  return c;
}

/// llama.cpp / ggml rope parameters, as passed to `ggml_rope_ext` (GGUF keys
/// `<arch>.rope.freq_base`, `.rope.scaling.factor` = 1/freq_scale, `.rope.scaling.attn_factor`,
/// `.rope.scaling.original_context_length` = n_ctx_orig, tensor `rope_freqs` = freq_factors).
struct gguf_rope_params {
  /// Rotary dims `n_dims` (GGUF `rope.dimension_count`).
  Index n_dims = 0;
  /// Head dim; 0 = n_dims.
  Index head_dim = 0;
  /// ggml mode 0 ("normal") = interleaved, GGML_ROPE_TYPE_NEOX = half.
  rope_pairing pairing = rope_pairing::interleaved;
  /// RoPE base.
  double freq_base = 10000.0;
  /// Position scale (1 / the context-extension factor).
  double freq_scale = 1.0;
  /// YaRN extrapolation blend; 0 = no YaRN (plain or linear scaling).
  double ext_factor = 0.0;
  /// Multiplies cos and sin; ggml multiplies it by 1 + 0.1 ln(1/freq_scale) when ext_factor != 0.
  double attn_factor = 1.0;
  /// YaRN correction range, in rotations.
  double beta_fast = 32.0;
  /// YaRN correction range, in rotations.
  double beta_slow = 1.0;
  /// Original (pre-training) context, for YaRN's correction range.
  Index n_ctx_orig = 0;
  /// Per-pair divisors of the base frequencies (n_dims/2 values; empty = none).
  std::vector<double> freq_factors;
};

/// The rope_config equivalent to ggml's rotation with these parameters:
/// - ext_factor != 0: yarn with factor = 1/freq_scale, original = n_ctx_orig, ggml's
///   floor/ceil correction range (truncate), yarn_ext_factor = ext_factor and
///   attention_factor = attn_factor * (1 + 0.1 ln(1/freq_scale)) (ggml's folded mscale);
/// - else freq_scale != 1: linear with factor = 1/freq_scale, attention_factor = attn_factor;
/// - else: no scaling, attention_factor = attn_factor;
/// freq_factors carry over unchanged (Llama 3's rope_freqs, Phi-3's chosen long/short list).
/// GGUF stores these as float32, so 1/freq_scale is exact only for powers of two.
inline rope_config rope_config_from_gguf(const gguf_rope_params& g) {
  constexpr const char* where = "rope_config_from_gguf";
  detail::require(g.n_dims > 0 && g.n_dims % 2 == 0, where, "n_dims", g.n_dims,
                  "must be even and > 0");
  detail::require(std::isfinite(g.freq_scale) && g.freq_scale > 0.0, where, "freq_scale",
                  g.freq_scale, "must be finite and > 0");
  detail::require(std::isfinite(g.ext_factor) && g.ext_factor >= 0.0 && g.ext_factor <= 1.0, where,
                  "ext_factor", g.ext_factor, "must be in [0, 1]");
  detail::require(std::isfinite(g.attn_factor) && g.attn_factor > 0.0, where, "attn_factor",
                  g.attn_factor, "must be finite and > 0");
  rope_config c;
  c.head_dim = g.head_dim == 0 ? g.n_dims : g.head_dim;
  c.rotary_dim = g.n_dims;
  c.base = g.freq_base;
  c.pairing = g.pairing;
  c.freq_factors = g.freq_factors;
  const double factor = 1.0 / g.freq_scale;
  if (g.ext_factor != 0.0) {
    detail::require(g.n_ctx_orig > 0, where, "n_ctx_orig", g.n_ctx_orig,
                    "must be > 0 when ext_factor != 0 (YaRN)");
    c.scaling = rope_scaling_type::yarn;
    c.factor = factor;
    c.original_max_positions = g.n_ctx_orig;
    c.beta_fast = g.beta_fast;
    c.beta_slow = g.beta_slow;
    c.truncate = true;
    c.yarn_ext_factor = g.ext_factor;
    c.attention_factor = g.attn_factor * (1.0 + 0.1 * std::log(factor));
  } else {
    c.scaling = g.freq_scale != 1.0 ? rope_scaling_type::linear : rope_scaling_type::none;
    c.factor = factor;
    c.attention_factor = g.attn_factor;
  }
  c.validate();
  return c;
}

namespace detail {

/// Stores one config.json value under `key` when it is a kind rope_params holds: a string, a
/// number, a boolean or a list of numbers. null leaves the key absent and objects are
/// skipped. A list holding anything but numbers (`"architectures": ["LlamaForCausalLM"]`) is
/// kept as a string naming its first such element, so that reading it as a list (a
/// `"short_factor": [1, "x"]`) says what is wrong instead of "missing".
inline void hf_value_into(rope_params& out, const std::string& key,
                          const io::detail::json_value& v) {
  using kind = io::detail::json_value::kind;
  switch (v.k) {
    case kind::string:
      out[key] = v.text;
      break;
    case kind::number:
      out[key] = std::strtod(v.text.c_str(), nullptr);
      break;
    case kind::boolean:
      out[key] = v.b;
      break;
    case kind::array: {
      std::vector<double> list;
      for (const io::detail::json_value& item : v.items) {
        if (item.k != kind::number) {
          out[key] = "<a list whose element " + std::to_string(list.size()) + " is not a number>";
          return;
        }
        list.push_back(std::strtod(item.text.c_str(), nullptr));
      }
      out[key] = std::move(list);
      break;
    }
    case kind::null:
    case kind::object:
      break;
  }
}

/// Reads config.json (strict JSON, a top-level object) into the values of its top-level
/// members (`top`) and of its `rope_scaling` / `rope_parameters` object (`scaling`; when that
/// object is keyed by layer type, the members of the `layer_type` one). `nested` receives the
/// keys of the dict's members that are objects (the layer types).
inline void read_hf_json(std::string_view text, std::string_view layer_type, rope_params& top,
                         rope_params& scaling, std::vector<std::string>& nested) {
  using kind = io::detail::json_value::kind;
  constexpr const char* where = "rope_config_from_hf_json";
  const std::size_t first = std::min(text.find_first_not_of(" \t\n\r"), text.size());
  if (first == text.size() || text[first] != '{')
    fail(where, "offset", first, "invalid JSON: expected '{'");
  const io::detail::json_value root =
      io::detail::json_parser(text, [&](const std::string& what, std::size_t at) {
        fail(where, "offset", at, "invalid JSON: " + what);
      }).parse_document("trailing characters after the top-level object");
  for (std::size_t k = 0; k < root.keys.size(); ++k) {
    const io::detail::json_value& dict = root.items[k];
    if ((root.keys[k] != "rope_scaling" && root.keys[k] != "rope_parameters") ||
        dict.k != kind::object) {
      hf_value_into(top, root.keys[k], dict);
      continue;
    }
    for (std::size_t m = 0; m < dict.keys.size(); ++m) {
      const io::detail::json_value& member = dict.items[m];
      if (member.k != kind::object) {
        hf_value_into(scaling, dict.keys[m], member);
        continue;
      }
      nested.push_back(dict.keys[m]);
      if (!layer_type.empty() && dict.keys[m] == layer_type)
        for (std::size_t j = 0; j < member.keys.size(); ++j)
          hf_value_into(scaling, member.keys[j], member.items[j]);
    }
  }
}

}  // namespace detail

/// rope_config_from_hf() on the text of a Hugging Face config.json (its top-level members and
/// its `rope_scaling` or `rope_parameters` object). Configs whose `rope_parameters` is keyed
/// by layer type (e.g. "full_attention" / "sliding_attention") need `layer_type` to pick one.
/// The text must be strict JSON (io/json.hpp: RFC 8259, no duplicate keys, nothing after the
/// top-level object). Throws posenc::error for invalid JSON (naming the offset), a per-layer-type
/// dict without (or without the given) `layer_type`, and everything rope_config_from_hf() rejects.
inline rope_config rope_config_from_hf_json(std::string_view json_text,
                                            std::string_view layer_type = {}) {
  rope_params top, scaling;
  std::vector<std::string> nested;
  detail::read_hf_json(json_text, layer_type, top, scaling, nested);
  const bool found = std::find(nested.begin(), nested.end(), layer_type) != nested.end();
  if (!layer_type.empty() && !found)
    detail::fail("rope_config_from_hf_json", "layer_type", std::string(layer_type),
                 "not a member of rope_parameters / rope_scaling");
  if (layer_type.empty() && !nested.empty()) {
    std::string names;
    for (const auto& n : nested) names += (names.empty() ? "" : ", ") + n;
    detail::fail("rope_config_from_hf_json", "layer_type", "<none>",
                 "rope parameters are given per layer type (" + names + "): pick one");
  }
  return rope_config_from_hf(top, scaling);
}

/// The largest config.json rope_config_from_hf_json_file reads: 16 MiB.
inline constexpr std::uint64_t hf_config_max_bytes = std::uint64_t(1) << 24;

/// rope_config_from_hf_json() on a file; posenc::error naming the path if it cannot be read
/// or is larger than hf_config_max_bytes.
inline rope_config rope_config_from_hf_json_file(const std::string& path,
                                                 std::string_view layer_type = {}) {
  constexpr const char* where = "rope_config_from_hf_json_file";
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  detail::require(static_cast<bool>(in), where, "path", path, "cannot be opened");
  // a config.json is a few kB: a larger file is not one (and is not read into memory)
  const std::streamoff size = in.tellg();
  detail::require(size >= 0, where, "path", path, "cannot be read (not a regular file?)");
  detail::require(static_cast<std::uint64_t>(size) <= hf_config_max_bytes, where, "path", path,
                  "the file has " + std::to_string(size) +
                      " bytes, over the 16 MiB a config.json may have (hf_config_max_bytes)");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(size));
  detail::require(in.gcount() == static_cast<std::streamsize>(size), where, "path", path,
                  "read failed");
  return rope_config_from_hf_json(text, layer_type);
}

}  // namespace posenc
