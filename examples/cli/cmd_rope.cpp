// `posenc rope`: rotate the rows of an .npy file with rotary position embeddings, with any
// scaling or with inverse frequencies read from a file; optionally write the effective inv_freq
// and print the attention factor.

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <posenc/encoding/rotary.hpp>
#include <posenc/io/npy.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"

namespace posenc_cli {
namespace {

long long positive(const args& a, const std::string& name) {
  const long long v = a.integer(name);
  if (v < 1)
    throw usage_error("invalid value for " + name + ": " + std::to_string(v) + " (must be >= 1)");
  return v;
}

/// A scaling flag given with a --scaling that ignores it is a usage error (it would
/// otherwise be silently dropped: `--scaling none --factor 3` rotates as unscaled).
void reject_unused_scaling_flags(const args& a, posenc::rope_scaling_type s) {
  using t = posenc::rope_scaling_type;
  struct use {
    const char* flag;
    bool used;
  };
  const bool yarn = s == t::yarn;
  const use uses[] = {
      {"--factor", s != t::none && s != t::xpos},
      {"--original-max", s == t::dynamic || yarn || s == t::llama3 || s == t::longrope},
      {"--beta-fast", yarn},
      {"--beta-slow", yarn},
      {"--mscale", yarn},
      {"--mscale-all-dim", yarn},
      {"--low-freq-factor", s == t::llama3},
      {"--high-freq-factor", s == t::llama3},
      {"--short-factor", s == t::longrope},
      {"--long-factor", s == t::longrope},
      {"--xpos-scale-base", s == t::xpos},
  };
  for (const use& u : uses)
    if (!u.used && a.has(u.flag))
      throw usage_error(std::string(u.flag) + " is not used by --scaling " + posenc::to_string(s));
}

/// The flags a --scaling cannot do without (the library's rope_config_from_hf requires the
/// same keys): a missing one is a usage error naming it, never a silent default (a
/// `--scaling linear` without --factor used to rotate as unscaled, factor 1). LongRoPE's
/// --factor stays optional: it only sets the default attention factor (1 without it).
void require_scaling_flags(const args& a, posenc::rope_scaling_type s) {
  using t = posenc::rope_scaling_type;
  struct need {
    const char* flag;
    bool needed;
  };
  const need needs[] = {
      {"--factor",
       s == t::linear || s == t::ntk || s == t::dynamic || s == t::yarn || s == t::llama3},
      {"--original-max", s == t::dynamic || s == t::yarn || s == t::llama3 || s == t::longrope},
      {"--short-factor", s == t::longrope},
      {"--long-factor", s == t::longrope},
  };
  for (const need& n : needs)
    if (n.needed && !a.has(n.flag))
      throw usage_error(std::string("missing ") + n.flag + ": required by --scaling " +
                        posenc::to_string(s));
}

/// The rope_config the flags describe (the library validates the values when used).
posenc::rope_config config_from(const args& a) {
  posenc::rope_config c;
  c.head_dim = positive(a, "--head-dim");
  if (a.has("--rotary-dim")) {
    c.rotary_dim = positive(a, "--rotary-dim");
    if (c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
      throw usage_error("invalid value for --rotary-dim: " + std::to_string(c.rotary_dim) +
                        " (must be even and <= --head-dim " + std::to_string(c.head_dim) + ")");
  }
  c.base = a.real_or("--base", 10000.0);
  c.pairing = posenc::parse_rope_pairing(a.choice("--pairing", {"half", "interleaved"}, "half"));
  c.scaling = posenc::parse_rope_scaling_type(
      a.choice("--scaling",
               {"none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "xpos"}, "none"));
  reject_unused_scaling_flags(a, c.scaling);
  require_scaling_flags(a, c.scaling);
  c.factor = a.real_or("--factor", 1.0);
  if (a.has("--original-max")) c.original_max_positions = positive(a, "--original-max");
  c.beta_fast = a.real_or("--beta-fast", c.beta_fast);
  c.beta_slow = a.real_or("--beta-slow", c.beta_slow);
  if (a.has("--mscale")) c.mscale = a.real("--mscale");
  if (a.has("--mscale-all-dim")) c.mscale_all_dim = a.real("--mscale-all-dim");
  if (a.has("--attention-factor")) c.attention_factor = a.real("--attention-factor");
  c.low_freq_factor = a.real_or("--low-freq-factor", c.low_freq_factor);
  c.high_freq_factor = a.real_or("--high-freq-factor", c.high_freq_factor);
  if (a.has("--short-factor")) c.short_factor = a.reals("--short-factor");
  if (a.has("--long-factor")) c.long_factor = a.reals("--long-factor");
  c.xpos_scale_base = a.real_or("--xpos-scale-base", c.xpos_scale_base);
  return c;
}

/// The flags --inv-freq-in replaces: the file's frequencies are used as they are, so a base,
/// a scaling or a sequence length would be silently ignored. --attention-factor still
/// applies (it multiplies cos and sin).
void reject_replaced_by_inv_freq_in(const args& a) {
  for (const char* flag :
       {"--base", "--scaling", "--factor", "--original-max", "--seq-len", "--beta-fast",
        "--beta-slow", "--mscale", "--mscale-all-dim", "--low-freq-factor", "--high-freq-factor",
        "--short-factor", "--long-factor", "--xpos-scale-base"})
    if (a.has(flag))
      throw usage_error(std::string(flag) +
                        " is not used with --inv-freq-in (the file replaces the frequencies)");
}

/// The frequencies of --inv-freq-in: a 1-D float32 or float64 .npy of R/2 values, used bit
/// for bit (float32 values stay exact in double, and --float32-reference rounds them back
/// to the same float32), with the attention factor of --attention-factor (default 1).
posenc::rope_frequencies frequencies_from_file(const args& a, const posenc::rope_config& cfg) {
  const std::string path = a.str("--inv-freq-in");
  const std::string flag = "--inv-freq-in " + path + ": ";
  const posenc::Index pairs = cfg.resolved_rotary_dim() / 2;
  try {
    posenc::io::detail::input_file f(path, "rope --inv-freq-in");
    const posenc::io::detail::npy_header h = posenc::io::detail::read_npy_header(f, path);
    if (h.type != posenc::io::dtype::f32 && h.type != posenc::io::dtype::f64)
      throw usage_error(flag + "dtype '" + h.descr + "' (must be float32 or float64)");
    if (h.shape.size() != 1 || h.shape[0] != pairs) {
      std::string shape = "[";
      for (std::size_t i = 0; i < h.shape.size(); ++i)
        shape += (i ? ", " : "") + std::to_string(h.shape[i]);
      throw usage_error(flag + "expected a 1-D array of R/2 = " + std::to_string(pairs) +
                        " inverse frequencies (rotary dim R = " + std::to_string(2 * pairs) +
                        "), got shape " + shape + "]");
    }
    posenc::rope_frequencies freqs = h.type == posenc::io::dtype::f32
                                         ? posenc::rope_frequencies::from_inv_freq(
                                               posenc::io::read_npy<float>(path).data, 2 * pairs)
                                         : posenc::rope_frequencies::from_inv_freq(
                                               posenc::io::read_npy<double>(path).data, 2 * pairs);
    if (cfg.attention_factor) {
      const double af = *cfg.attention_factor;
      if (!(std::isfinite(af) && af > 0.0))
        throw usage_error("invalid value for --attention-factor: " + a.str("--attention-factor") +
                          " (must be finite and > 0)");
      freqs.attention_factor = af;
    }
    return freqs;
  } catch (const posenc::error& e) {  // an unreadable file or a non-finite value: exit 1
    throw std::runtime_error(flag + e.what());
  }
}

/// The dtype of an .npy file: its rows are rotated and written back in that type.
posenc::io::dtype file_dtype(const std::string& path) {
  posenc::io::detail::input_file f(path, "rope --in");
  return posenc::io::detail::read_npy_header(f, path).type;
}

template <class Scalar>
int rotate_file(const args& a, const posenc::rope_config& cfg,
                const std::optional<posenc::rope_frequencies>& file_freqs) {
  const std::string in = a.str("--in"), out = a.str("--out");
  auto x = posenc::io::read_npy<Scalar>(in);
  if (x.shape.size() != 2 && x.shape.size() != 3)
    throw usage_error("--in " + in + ": expected a [L, D] (or [L, H, D]) array, got rank " +
                      std::to_string(x.shape.size()));
  const posenc::Index len = x.shape[0];
  const posenc::Index width = x.shape.back();
  const posenc::Index heads = x.shape.size() == 3 ? x.shape[1] : 1;
  if (width != cfg.head_dim)
    throw usage_error("--in " + in + ": rows have " + std::to_string(width) +
                      " values but --head-dim is " + std::to_string(cfg.head_dim));
  const long long offset = a.integer_or("--offset", 0);
  if (offset < 0)
    throw usage_error("invalid value for --offset: " + std::to_string(offset) + " (must be >= 0)");
  if (offset > std::numeric_limits<long long>::max() - len)
    throw usage_error("invalid value for --offset: " + std::to_string(offset) + " (too large)");
  // frequencies for the whole sequence seen so far unless told otherwise (dynamic NTK, LongRoPE)
  const long long seq_len = a.integer_or("--seq-len", offset + len);
  if (seq_len < 0)
    throw usage_error("invalid value for --seq-len: " + std::to_string(seq_len) +
                      " (must be >= 0)");

  posenc::rope_options opt;
  opt.cache = posenc::rope_cache_mode::on_the_fly;
  if (a.has("--float32-reference")) opt.precision = posenc::rope_precision::float32_reference;
  posenc::rotary_embedding<Scalar> rope(
      cfg.head_dim, file_freqs ? *file_freqs : cfg.frequencies(seq_len), cfg.pairing, opt);
  const auto& f = rope.frequencies();

  // Both files or neither: each is written to a temporary and renamed only when both are.
  output_files files;
  npy_output& rotated =
      files.npy<Scalar>("--out", out, std::vector<long long>(x.shape.begin(), x.shape.end()));
  npy_output* inv_freq = nullptr;
  if (a.has("--inv-freq-out"))
    inv_freq = &files.npy<double>("--inv-freq-out", a.str("--inv-freq-out"),
                                  {static_cast<long long>(f.inv_freq.size())});
  const auto role = a.has("--key") ? posenc::rope_role::key : posenc::rope_role::query;
  rope.apply(posenc::view_shd(x.data.data(), len, heads, width), offset, role);
  rotated.write(x.data.data(), x.data.size());
  if (inv_freq) inv_freq->write(f.inv_freq.data(), f.inv_freq.size());
  files.commit();
  std::cout << "wrote " << out << ": [" << len;
  if (x.shape.size() == 3) std::cout << ", " << heads;
  std::cout << ", " << width << "] " << dtype_name<Scalar>() << ", "
            << (file_freqs ? "inv_freq from " + a.str("--inv-freq-in")
                           : std::string(posenc::to_string(cfg.scaling)))
            << ", " << posenc::to_string(cfg.pairing) << ", rotary dim " << rope.rotary_dim()
            << ", positions " << offset << ".." << offset + len - 1 << "\n";
  if (a.has("--print-attention-factor"))
    std::cout << "attention_factor " << std::setprecision(17) << f.attention_factor << "\n";
  return 0;
}

}  // namespace

command rope_command() {
  command c;
  c.name = "rope";
  c.summary = "rotate the [L, D] rows of an .npy with rotary embeddings (any scaling)";
  c.usage =
      "posenc rope --head-dim D [--rotary-dim R] [--base B] [--pairing half|interleaved]\n"
      "              [--scaling none|linear|ntk|dynamic|yarn|llama3|longrope|xpos] [--factor F]\n"
      "              [--original-max N] [--seq-len N] [--beta-fast X] [--beta-slow X] [--mscale "
      "X]\n"
      "              [--mscale-all-dim X] [--attention-factor X] [--low-freq-factor X]\n"
      "              [--high-freq-factor X] [--short-factor a,b,...] [--long-factor a,b,...]\n"
      "              [--xpos-scale-base X] [--key] [--float32-reference]\n"
      "              [--offset P] [--inv-freq-in F.npy] [--inv-freq-out F.npy]\n"
      "              [--print-attention-factor]\n"
      "              --in X.npy --out Y.npy";
  c.flags = {
      {"--head-dim", "D", "per-head dim D: the width of each row of X", true},
      {"--rotary-dim", "R", "rotary dim (even, <= D; default D): dims R..D-1 pass through", false},
      {"--base", "B", "RoPE base / rope_theta (default 10000)", false},
      {"--pairing", "half|interleaved",
       "half = Hugging Face rotate_half (default), interleaved = GPT-J/RoFormer", false},
      {"--scaling", "TYPE", "none (default), linear, ntk, dynamic, yarn, llama3, longrope, xpos",
       false},
      {"--factor", "F", "scaling factor (ntk: alpha; longrope: max/original context)", false},
      {"--original-max", "N", "original max positions (dynamic, yarn, llama3, longrope)", false},
      {"--seq-len", "N", "sequence length the frequencies are for (default offset + L)", false},
      {"--beta-fast", "X", "YaRN beta_fast (default 32)", false},
      {"--beta-slow", "X", "YaRN beta_slow (default 1)", false},
      {"--mscale", "X", "YaRN mscale", false},
      {"--mscale-all-dim", "X", "YaRN mscale_all_dim", false},
      {"--attention-factor", "X", "attention factor override (multiplies cos and sin)", false},
      {"--low-freq-factor", "X", "Llama 3 low_freq_factor (default 1)", false},
      {"--high-freq-factor", "X", "Llama 3 high_freq_factor (default 4)", false},
      {"--short-factor", "a,b,...", "LongRoPE short factors (R/2 values)", false},
      {"--long-factor", "a,b,...", "LongRoPE long factors (R/2 values)", false},
      {"--xpos-scale-base", "X", "xPos scale base (default 512)", false},
      {"--key", "", "rotate X as keys (differs from queries only with xpos)", false},
      {"--float32-reference", "", "float32 angles like PyTorch float32 code (default: exact)",
       false},
      {"--offset", "P", "position of the first row (default 0): rows are P..P+L-1", false},
      {"--in", "X.npy", "input rows [L, D] (or [L, H, D]), float32 or float64", true},
      {"--out", "Y.npy", "output, same shape and dtype as the input", true},
      {"--inv-freq-in", "F.npy",
       "a model's own inv_freq [R/2] (1-D f32/f64): replaces --base, --scaling and their flags",
       false},
      {"--inv-freq-out", "F.npy", "also write the effective inv_freq [R/2] (float64)", false},
      {"--print-attention-factor", "", "print the attention factor applied to cos and sin", false},
  };
  c.run = [](const args& a) {
    if (a.has("--inv-freq-in")) reject_replaced_by_inv_freq_in(a);
    const posenc::rope_config cfg = config_from(a);
    std::optional<posenc::rope_frequencies> file_freqs;
    if (a.has("--inv-freq-in")) file_freqs = frequencies_from_file(a, cfg);
    const std::string in = a.str("--in");
    if (file_dtype(in) == posenc::io::dtype::f64) return rotate_file<double>(a, cfg, file_freqs);
    return rotate_file<float>(a, cfg, file_freqs);
  };
  return c;
}

}  // namespace posenc_cli
