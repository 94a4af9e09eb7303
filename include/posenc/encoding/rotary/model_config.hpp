#pragma once
/// \file
/// A model's attention shape and RoPE, read the way checkpoints ship them: from a Hugging
/// Face `config.json` or from the metadata of a GGUF file (llama.cpp).
///
///     model_config m = model_config_from_hf_json_file("Llama-3.1-8B/config.json");
///     // m.num_attention_heads 32, m.num_key_value_heads 8, m.head_dim 128,
///     // m.rope: llama3 scaling, base 500000, half pairing
///     io::gguf_file g("llama-3.1-8b-q4_k_m.gguf");
///     model_config n = model_config_from_gguf(g);            // the same shape; the RoPE
///                                                            // as llama.cpp applies it
///
/// The rope_config comes from encoding/rotary/hf_config.hpp (rope_config_from_hf_json,
/// rope_config_from_gguf): this header adds the attention shape around it.

#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/limits.hpp"
#include "../../io/gguf.hpp"
#include "hf_config.hpp"

namespace posenc {

/// What an attention layer needs to know about a model, whatever the file named it.
struct model_config {
  /// HF `model_type` ("llama", "qwen2", "gptj", ...; empty when absent); GGUF
  /// `general.architecture`.
  std::string model_type;
  /// Query heads (HF `num_attention_heads`, GPT-J `n_head`; GGUF `.attention.head_count`).
  Index num_attention_heads = 0;
  /// Key/value heads (HF `num_key_value_heads`; GGUF `.attention.head_count_kv`); equal to
  /// num_attention_heads when absent. Divides num_attention_heads.
  Index num_key_value_heads = 0;
  /// Per-head dim: HF `head_dim` (GGUF `.attention.key_length`) when given (Gemma's 256 is
  /// not hidden_size / heads), else hidden_size / num_attention_heads.
  Index head_dim = 0;
  /// Model width (HF `hidden_size`, GPT-J `n_embd`; GGUF `.embedding_length`).
  Index hidden_size = 0;
  /// Trained context (HF `max_position_embeddings`, GPT-J `n_positions`; GGUF
  /// `.context_length`); 0 when the file does not say.
  Index max_position_embeddings = 0;
  /// Rotated dims per head (rope.resolved_rotary_dim()): GPT-J `rotary_dim`, GPT-NeoX
  /// `int(head_dim * rotary_pct)`, `int(head_dim * partial_rotary_factor)`; GGUF
  /// `.rope.dimension_count`.
  Index rotary_dim = 0;
  /// `partial_rotary_factor` (or GPT-NeoX `rotary_pct`) as given, else rotary_dim / head_dim.
  double partial_rotary_factor = 1.0;
  /// Sliding-window attention span, when the model uses one (HF `sliding_window`, left
  /// out when null or when `use_sliding_window` is false, as Qwen2 ships it; GGUF
  /// `.attention.sliding_window`).
  std::optional<Index> sliding_window;
  /// The RoPE: rope_config_from_hf_json on the same text, or rope_config_from_gguf.
  rope_config rope;
};

namespace detail {

/// A config.json value as error messages show it.
inline std::string hf_param_text(const rope_param& v) {
  if (const double* d = std::get_if<double>(&v)) {
    std::ostringstream os;
    os.precision(17);
    os << *d;
    return os.str();
  }
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const std::string* s = std::get_if<std::string>(&v)) return "\"" + *s + "\"";
  return "<a list>";
}

/// The integer under the first of `keys` present (its name in `used`); none when absent.
/// posenc::error "model_config: <key> = <value>: must be an integer" otherwise.
inline std::optional<Index> hf_integer(const rope_params& p,
                                       std::initializer_list<const char*> keys, std::string& used) {
  for (const char* key : keys) {
    const rope_param* v = posenc::detail::find_param(p, key);
    if (v == nullptr) continue;
    used = key;
    const double* d = std::get_if<double>(v);
    posenc::detail::require(
        d != nullptr && std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 9.0e15,
        "model_config", key, hf_param_text(*v), "must be an integer");
    return static_cast<Index>(*d);
  }
  used = *keys.begin();
  return std::nullopt;
}

/// The attention shape shared by both readers, checked: heads > 0, kv heads > 0 dividing
/// heads, hidden > 0, head dim from `head_dim` or hidden / heads (which must divide).
inline void settle_shape(model_config& m, std::optional<Index> head_dim, const char* where,
                         const std::string& heads_key, const std::string& kv_key,
                         const std::string& hidden_key, const std::string& head_dim_key) {
  using posenc::detail::require;
  require(m.num_attention_heads > 0, where, heads_key, m.num_attention_heads, "must be > 0");
  // sizes a kernel later allocates from: the library's limits (core/limits.hpp)
  posenc::detail::check_heads_limit(where, heads_key.c_str(), m.num_attention_heads);
  posenc::detail::check_dim_limit(where, hidden_key.c_str(), m.hidden_size);
  require(m.num_key_value_heads > 0 && m.num_attention_heads % m.num_key_value_heads == 0, where,
          kv_key, m.num_key_value_heads,
          "must be > 0 and divide " + heads_key + " = " + std::to_string(m.num_attention_heads));
  require(m.hidden_size > 0, where, hidden_key, m.hidden_size, "must be > 0");
  if (head_dim) {
    require(*head_dim > 0, where, head_dim_key, *head_dim, "must be > 0");
    posenc::detail::check_dim_limit(where, head_dim_key.c_str(), *head_dim);
    m.head_dim = *head_dim;
  } else {
    require(m.hidden_size % m.num_attention_heads == 0, where, heads_key, m.num_attention_heads,
            "must divide " + hidden_key + " = " + std::to_string(m.hidden_size) +
                " for the head dim (or give " + head_dim_key + ")");
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
}

/// The text of a config.json no larger than hf_config_max_bytes.
inline std::string read_config_text(const std::string& path, const char* where) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  posenc::detail::require(static_cast<bool>(in), where, "path", path, "cannot be opened");
  const std::streamoff size = in.tellg();
  posenc::detail::require(size >= 0, where, "path", path, "cannot be read (not a regular file?)");
  posenc::detail::require(
      static_cast<std::uint64_t>(size) <= hf_config_max_bytes, where, "path", path,
      "the file has " + std::to_string(size) + " bytes, over the 16 MiB a config.json may have");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(size));
  posenc::detail::require(in.gcount() == static_cast<std::streamsize>(size), where, "path", path,
                          "read failed");
  return text;
}

}  // namespace detail

/// The model_config of a Hugging Face config.json text (Llama, Qwen2, Mistral, Phi-3,
/// GPT-NeoX, GPT-J, Gemma and configs that name things the same way). Keys, first found
/// wins: heads `num_attention_heads` / `n_head`, kv heads `num_key_value_heads`, hidden
/// `hidden_size` / `n_embd`, context `max_position_embeddings` / `n_positions`, `head_dim`,
/// `sliding_window` (+ `use_sliding_window`), `model_type`; the RoPE is
/// rope_config_from_hf_json(json_text, layer_type) (rotary_dim / rotary_pct /
/// partial_rotary_factor, rope_theta / rotary_emb_base, rope_scaling, GPT-J's interleaved
/// pairing). Throws posenc::error naming the key and its value for a value of the wrong
/// type, heads or kv heads <= 0, kv heads not dividing heads, hidden_size not divisible by
/// heads (when there is no head_dim), a sliding_window or context <= 0, and everything
/// rope_config_from_hf_json rejects (invalid JSON, with its offset).
inline model_config model_config_from_hf_json(std::string_view json_text,
                                              std::string_view layer_type = {}) {
  constexpr const char* where = "model_config";
  rope_params top, scaling;
  std::vector<std::string> nested;
  posenc::detail::read_hf_json(json_text, layer_type, top, scaling, nested);

  model_config m;
  if (const rope_param* mt = posenc::detail::find_param(top, "model_type")) {
    const std::string* s = std::get_if<std::string>(mt);
    posenc::detail::require(s != nullptr, where, "model_type", detail::hf_param_text(*mt),
                            "must be a string");
    m.model_type = *s;
  }
  std::string heads_key, kv_key, hidden_key, ctx_key, head_dim_key, window_key;
  const std::optional<Index> heads =
      detail::hf_integer(top, {"num_attention_heads", "n_head"}, heads_key);
  const std::optional<Index> kv = detail::hf_integer(top, {"num_key_value_heads"}, kv_key);
  const std::optional<Index> hidden =
      detail::hf_integer(top, {"hidden_size", "n_embd"}, hidden_key);
  const std::optional<Index> ctx =
      detail::hf_integer(top, {"max_position_embeddings", "n_positions"}, ctx_key);
  const std::optional<Index> head_dim = detail::hf_integer(top, {"head_dim"}, head_dim_key);
  const std::optional<Index> window = detail::hf_integer(top, {"sliding_window"}, window_key);
  if (!heads) posenc::detail::fail(where, heads_key, "<missing>", "required (or n_head)");
  if (!hidden) posenc::detail::fail(where, hidden_key, "<missing>", "required (or n_embd)");
  m.num_attention_heads = *heads;
  m.num_key_value_heads = kv.value_or(*heads);
  m.hidden_size = *hidden;
  detail::settle_shape(m, head_dim, where, heads_key, kv_key, hidden_key, head_dim_key);
  if (ctx) {
    posenc::detail::require(*ctx > 0, where, ctx_key, *ctx, "must be > 0");
    m.max_position_embeddings = *ctx;
  }
  // Qwen2 ships "sliding_window": 131072 with "use_sliding_window": false: no window
  const rope_param* use = posenc::detail::find_param(top, "use_sliding_window");
  if (use != nullptr && std::get_if<bool>(use) == nullptr)
    posenc::detail::fail(where, "use_sliding_window", detail::hf_param_text(*use),
                         "must be true or false");
  if (window && !(use != nullptr && !std::get<bool>(*use))) {
    posenc::detail::require(*window > 0, where, window_key, *window, "must be > 0 (or null)");
    m.sliding_window = *window;
  }

  m.rope = rope_config_from_hf_json(json_text, layer_type);
  m.rotary_dim = m.rope.resolved_rotary_dim();
  std::optional<double> prf = posenc::detail::param_number(scaling, "partial_rotary_factor");
  if (!prf) prf = posenc::detail::param_number(top, "partial_rotary_factor");
  if (!prf && !posenc::detail::find_param(top, "rotary_dim"))
    prf = posenc::detail::param_number(top, "rotary_pct");
  m.partial_rotary_factor =
      prf ? *prf : static_cast<double>(m.rotary_dim) / static_cast<double>(m.head_dim);
  return m;
}

/// model_config_from_hf_json on a file (at most hf_config_max_bytes); posenc::error naming
/// the path when it cannot be read.
inline model_config model_config_from_hf_json_file(const std::string& path,
                                                   std::string_view layer_type = {}) {
  return model_config_from_hf_json(detail::read_config_text(path, "model_config_from_hf_json_file"),
                                   layer_type);
}

/// The pairing llama.cpp rotates an architecture's q/k with (llama_model_rope_type): ggml
/// "normal" (interleaved) for llama and its kin, whose q/k weights the converter permuted
/// from Hugging Face's half layout, NEOX (half) for the others; none for an architecture
/// not in this list.
inline std::optional<rope_pairing> gguf_arch_pairing(std::string_view arch) noexcept {
  static constexpr std::string_view interleaved[] = {
      "llama",   "llama4",     "deci",    "baichuan", "internlm2", "minicpm",
      "xverse",  "command-r",  "cohere2", "olmo",     "deepseek",  "deepseek2",
      "granite", "granitemoe", "chatglm", "gptj"};
  static constexpr std::string_view half[] = {
      "falcon", "gptneox",    "stablelm", "qwen",   "qwen2",   "qwen2moe",
      "qwen3",  "qwen3moe",   "phi2",     "phi3",   "gemma",   "gemma2",
      "gemma3", "starcoder2", "olmo2",    "exaone", "nemotron"};
  for (std::string_view a : interleaved)
    if (a == arch) return rope_pairing::interleaved;
  for (std::string_view a : half)
    if (a == arch) return rope_pairing::half;
  return std::nullopt;
}

/// The model_config of a GGUF file's metadata, with A = `general.architecture`:
/// heads `A.attention.head_count`, kv heads `A.attention.head_count_kv` (default heads),
/// hidden `A.embedding_length`, context `A.context_length`, head dim
/// `A.attention.key_length` (default hidden / heads), window `A.attention.sliding_window`;
/// the RoPE through gguf_rope_params and rope_config_from_gguf: rotary dims
/// `A.rope.dimension_count` (default head dim), base `A.rope.freq_base` (default 10000),
/// `A.rope.scaling.type` "none" / "linear" / "yarn" with `.factor` (freq_scale = 1/factor;
/// older files: `A.rope.scale_linear`),
/// `.original_context_length`, `.attn_factor`, `.yarn_beta_fast` / `.yarn_beta_slow`, and
/// the tensor `rope_freqs.weight` (Llama 3's per-pair divisors) as freq_factors. Phi-3's
/// `rope_factors_short.weight` / `rope_factors_long.weight` give longrope (original
/// context `.rope.scaling.original_context_length`). The pairing is llama.cpp's for the
/// architecture (gguf_arch_pairing), or `pairing` when given (required for others).
///
/// Throws posenc::error naming the key (and its value) for a missing or mistyped key and
/// the shape checks of model_config_from_hf_json.
inline model_config model_config_from_gguf(io::gguf_file& g,
                                           std::optional<rope_pairing> pairing = std::nullopt) {
  constexpr const char* where = "model_config_from_gguf";
  using posenc::detail::fail;
  using posenc::detail::require;
  const std::optional<std::string> arch = g.get_string("general.architecture");
  if (!arch) fail(where, "general.architecture", "<missing>", "required (in " + g.path() + ")");
  const auto key = [&](const char* suffix) { return *arch + suffix; };
  const auto integer = [&](const char* suffix) -> std::optional<Index> {
    const std::optional<std::int64_t> v = g.get_integer(key(suffix));
    return v ? std::optional<Index>(static_cast<Index>(*v)) : std::nullopt;
  };

  model_config m;
  m.model_type = *arch;
  const std::optional<Index> heads = integer(".attention.head_count");
  const std::optional<Index> hidden = integer(".embedding_length");
  if (!heads) fail(where, key(".attention.head_count"), "<missing>", "required");
  if (!hidden) fail(where, key(".embedding_length"), "<missing>", "required");
  m.num_attention_heads = *heads;
  m.num_key_value_heads = integer(".attention.head_count_kv").value_or(*heads);
  m.hidden_size = *hidden;
  detail::settle_shape(m, integer(".attention.key_length"), where, key(".attention.head_count"),
                       key(".attention.head_count_kv"), key(".embedding_length"),
                       key(".attention.key_length"));
  if (auto ctx = integer(".context_length")) {
    require(*ctx > 0, where, key(".context_length"), *ctx, "must be > 0");
    m.max_position_embeddings = *ctx;
  }
  if (auto w = integer(".attention.sliding_window")) {
    require(*w > 0, where, key(".attention.sliding_window"), *w, "must be > 0");
    m.sliding_window = *w;
  }

  gguf_rope_params p;
  p.head_dim = m.head_dim;
  p.n_dims = integer(".rope.dimension_count").value_or(m.head_dim);
  require(p.n_dims > 0 && p.n_dims <= m.head_dim, where, key(".rope.dimension_count"), p.n_dims,
          "must be in (0, head dim = " + std::to_string(m.head_dim) + "]");
  p.freq_base = g.get_number(key(".rope.freq_base")).value_or(10000.0);
  if (pairing) {
    p.pairing = *pairing;
  } else if (auto known = gguf_arch_pairing(*arch)) {
    p.pairing = *known;
  } else {
    fail(where, "general.architecture", "\"" + *arch + "\"",
         "llama.cpp's pairing for this architecture is not known here: pass `pairing`");
  }
  const std::optional<Index> orig = integer(".rope.scaling.original_context_length");
  const std::optional<double> attn = g.get_number(key(".rope.scaling.attn_factor"));

  const io::gguf_tensor_info* shorts = g.find_tensor("rope_factors_short.weight");
  const io::gguf_tensor_info* longs = g.find_tensor("rope_factors_long.weight");
  if (shorts != nullptr && longs != nullptr) {
    // LongRoPE (Phi-3): llama.cpp picks the long factors past the original context
    rope_config c;
    c.head_dim = m.head_dim;
    c.rotary_dim = p.n_dims;
    c.base = p.freq_base;
    c.pairing = p.pairing;
    c.scaling = rope_scaling_type::longrope;
    c.short_factor = g.read<double>(shorts->name).data;
    c.long_factor = g.read<double>(longs->name).data;
    c.original_max_positions = orig.value_or(m.max_position_embeddings);
    require(c.original_max_positions > 0, where, key(".rope.scaling.original_context_length"),
            c.original_max_positions, "must be > 0 (or give .context_length) for longrope");
    c.factor = m.max_position_embeddings > 0 ? static_cast<double>(m.max_position_embeddings) /
                                                   static_cast<double>(c.original_max_positions)
                                             : 1.0;
    c.attention_factor = attn;
    c.validate();
    m.rope = c;
  } else {
    const std::string type = g.get_string(key(".rope.scaling.type")).value_or("none");
    // older files carry the linear factor as .rope.scale_linear (llama.cpp still reads it)
    const char* factor_key =
        g.contains(key(".rope.scaling.factor")) || !g.contains(key(".rope.scale_linear"))
            ? ".rope.scaling.factor"
            : ".rope.scale_linear";
    const double factor = g.get_number(key(factor_key)).value_or(0.0);
    require(std::isfinite(factor) && factor >= 0.0, where, key(factor_key), factor,
            "must be finite and >= 0 (0: none)");
    // llama.cpp: freq_scale = 1 / factor, a factor of 0 meaning none
    p.freq_scale = factor == 0.0 ? 1.0 : 1.0 / factor;
    p.attn_factor = attn.value_or(1.0);
    if (type == "yarn") {
      p.ext_factor = 1.0;  // llama.cpp's default for a YaRN model
      p.n_ctx_orig = orig.value_or(m.max_position_embeddings);
      p.beta_fast = g.get_number(key(".rope.scaling.yarn_beta_fast")).value_or(32.0);
      p.beta_slow = g.get_number(key(".rope.scaling.yarn_beta_slow")).value_or(1.0);
    } else if (type != "none" && type != "linear") {
      fail(where, key(".rope.scaling.type"), "\"" + type + "\"",
           "not a type this reader maps (none, linear, yarn)");
    }
    if (const io::gguf_tensor_info* f = g.find_tensor("rope_freqs.weight"))
      p.freq_factors = g.read<double>(f->name).data;
    m.rope = rope_config_from_gguf(p);
  }
  m.rotary_dim = m.rope.resolved_rotary_dim();
  m.partial_rotary_factor = static_cast<double>(m.rotary_dim) / static_cast<double>(m.head_dim);
  return m;
}

}  // namespace posenc
