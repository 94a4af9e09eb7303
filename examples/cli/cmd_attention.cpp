// `posenc bias alibi`, `posenc bias t5` and `posenc attention`: position biases and
// single-head attention outputs as .npy files.

#include <cstdint>
#include <iostream>
#include <posenc/attention.hpp>
#include <posenc/io/npy.hpp>
#include <string>
#include <vector>

#include "cli.hpp"

namespace posenc_cli {
namespace {

// Refuse outputs whose element count would overflow or need gigabytes (2^28 doubles is
// 2 GiB), and head counts far beyond any model, before allocating anything.
constexpr long long max_elements = 1LL << 28;
constexpr long long max_heads = 1LL << 20;

long long at_least(const args& a, const std::string& name, long long lo, long long fallback) {
  const long long v = a.has(name) ? a.integer(name) : fallback;
  if (v < lo)
    throw usage_error("invalid value for " + name + ": " + std::to_string(v) +
                      " (must be >= " + std::to_string(lo) + ")");
  return v;
}

void check_size(long long a, long long b, long long c, const std::string& what) {
  // Each factor alone too (an empty output must not hide a huge head count).
  if (a > max_elements || b > max_elements || c > max_elements ||
      (b > 0 && c > 0 && a > max_elements / b / c))
    throw usage_error(what + " too large: " + std::to_string(a) + " x " + std::to_string(b) +
                      " x " + std::to_string(c) + " exceeds 2^28 elements");
}

long long heads_flag(const args& a, const std::string& name) {
  const long long h = at_least(a, name, 1, 1);
  if (h > max_heads)
    throw usage_error("invalid value for " + name + ": " + std::to_string(h) +
                      " (must be <= 2^20)");
  return h;
}

using dmat = posenc::attention_matrix<double>;

dmat read_matrix(const args& a, const std::string& flag) {
  return posenc::io::read_npy_matrix<double>(a.str(flag));
}

template <class Scalar, class Policy>
int run_attention(const dmat& q, const dmat& k, const dmat& v, const posenc::attention_config& opt,
                  const Policy& policy, const args& a) {
  using M = posenc::attention_matrix<Scalar>;
  const M qs = q.cast<Scalar>(), ks = k.cast<Scalar>(), vs = v.cast<Scalar>();
  // The [Lq, Lk] weights only when asked for: the kernel itself never forms them.
  M w;
  const bool want_w = a.has("--weights-out");
  if (want_w) check_size(1, q.rows(), k.rows(), "attention weights");
  const M out = want_w ? posenc::attention_with_weights(qs, ks, vs, w, opt, policy)
                       : posenc::attention(qs, ks, vs, opt, policy);
  posenc::io::write_npy(a.str("--out"), out);
  if (want_w) posenc::io::write_npy(a.str("--weights-out"), w);
  std::cout << "wrote " << a.str("--out") << ": [" << out.rows() << ", " << out.cols() << "] "
            << dtype_name<Scalar>() << "\n";
  return 0;
}

template <class Policy>
int dispatch(const dmat& q, const dmat& k, const dmat& v, const posenc::attention_config& opt,
             const Policy& policy, const args& a) {
  return a.choice("--dtype", {"f32", "f64"}, "f64") == "f32"
             ? run_attention<float>(q, k, v, opt, policy, a)
             : run_attention<double>(q, k, v, opt, policy, a);
}

}  // namespace

command bias_alibi_command() {
  command c;
  c.name = "bias alibi";
  c.summary = "ALiBi biases [H, Lq, Lk] (Press et al. slopes), causal or symmetric";
  c.usage =
      "posenc bias alibi --heads H --len-q Lq --len-k Lk [--q-offset P] [--symmetric]\n"
      "                    [--max-bias X] [--dtype f32|f64] --out B.npy";
  c.flags = {
      {"--heads", "H", "number of heads, 1 .. 2^20 (any count: the paper's slopes)", true},
      {"--len-q", "Lq", "queries; query i sits at position P + i", true},
      {"--len-k", "Lk", "keys; key j sits at position j", true},
      {"--q-offset", "P", "position of the first query (default 0)", false},
      {"--symmetric", "", "-m|i-j| (bidirectional) instead of the causal form -m(i-j)", false},
      {"--max-bias", "X", "llama.cpp max_bias parameterisation (default 8: the paper's slopes)",
       false},
      {"--dtype", "f32|f64", "element type of the file (default f64)", false},
      {"--out", "B.npy", "output file", true},
  };
  c.run = [](const args& a) {
    const long long H = heads_flag(a, "--heads"), lq = at_least(a, "--len-q", 0, 0),
                    lk = at_least(a, "--len-k", 0, 0), off = at_least(a, "--q-offset", 0, 0);
    check_size(H, lq, lk, "bias");
    const double max_bias = a.real_or("--max-bias", 8.0);
    if (max_bias <= 0) throw usage_error("invalid value for --max-bias: must be > 0");
    const auto form =
        a.has("--symmetric") ? posenc::alibi_form::symmetric : posenc::alibi_form::causal;
    const posenc::alibi_policy p = posenc::alibi_policy::from_max_bias(H, max_bias, form);
    posenc::attention_shape s;
    s.heads = H;
    s.len_q = lq;
    s.len_k = lk;
    s.dim = 1;
    s.q_offset = off;
    std::vector<double> out(static_cast<std::size_t>(H * lq * lk));
    for (long long h = 0; h < H; ++h) {
      const posenc::dmatrix b = posenc::materialize_bias(p, 0, h, s);
      std::copy(b.data(), b.data() + b.size(),
                out.begin() + static_cast<std::ptrdiff_t>(h * lq * lk));
    }
    const std::string path = a.str("--out");
    if (a.choice("--dtype", {"f32", "f64"}, "f64") == "f32") {
      const std::vector<float> f(out.begin(), out.end());
      posenc::io::write_npy(path, f.data(), {H, lq, lk});
    } else {
      posenc::io::write_npy(path, out.data(), {H, lq, lk});
    }
    std::cout << "wrote " << path << ": [" << H << ", " << lq << ", " << lk << "] ALiBi "
              << (form == posenc::alibi_form::symmetric ? "symmetric" : "causal") << ", queries at "
              << off << ".." << off + lq - 1 << "\n";
    return 0;
  };
  return c;
}

command bias_t5_command() {
  command c;
  c.name = "bias t5";
  c.summary = "T5 relative-position bucket indices [Lq, Lk] (int64)";
  c.usage =
      "posenc bias t5 --len-q Lq --len-k Lk [--buckets 32] [--max-distance 128] "
      "[--unidirectional]\n"
      "                 [--q-offset P] --out B.npy";
  c.flags = {
      {"--len-q", "Lq", "queries; query i sits at position P + i", true},
      {"--len-k", "Lk", "keys; key j sits at position j", true},
      {"--buckets", "N", "num_buckets (default 32)", false},
      {"--max-distance", "D", "max_distance (default 128)", false},
      {"--unidirectional", "", "decoder buckets (keys after the query share bucket 0)", false},
      {"--q-offset", "P", "position of the first query (default 0)", false},
      {"--out", "B.npy", "output file", true},
  };
  c.run = [](const args& a) {
    const long long lq = at_least(a, "--len-q", 0, 0), lk = at_least(a, "--len-k", 0, 0),
                    off = at_least(a, "--q-offset", 0, 0);
    check_size(1, lq, lk, "bucket matrix");
    posenc::t5_bucket_config cfg;
    cfg.num_buckets = a.integer_or("--buckets", 32);
    cfg.max_distance = a.integer_or("--max-distance", 128);
    cfg.bidirectional = !a.has("--unidirectional");
    const auto m = posenc::t5_buckets(lq, lk, cfg, off);
    const posenc::io::matrix<std::int64_t> mi = m.cast<std::int64_t>();
    posenc::io::write_npy(a.str("--out"), mi.data(), {lq, lk});
    std::cout << "wrote " << a.str("--out") << ": [" << lq << ", " << lk << "] int64 T5 buckets ("
              << cfg.num_buckets << " buckets, max distance " << cfg.max_distance << ", "
              << (cfg.bidirectional ? "bidirectional" : "unidirectional") << ")\n";
    return 0;
  };
  return c;
}

command attention_command() {
  command c;
  c.name = "attention";
  c.summary = "single-head attention softmax(QK^T scale + bias + mask) V with a position scheme";
  c.usage =
      "posenc attention --q Q.npy --k K.npy --v V.npy [--causal] [--q-offset P]\n"
      "                 [--alibi-heads H [--alibi-head h] [--symmetric] | --rope-base B "
      "[--rotary-dim R]]\n"
      "                 [--scale S] [--dtype f32|f64] [--weights-out W.npy] --out O.npy";
  c.flags = {
      {"--q", "Q.npy", "queries [Lq, d]; query i at position P + i", true},
      {"--k", "K.npy", "keys [Lk, d]; key j at position j", true},
      {"--v", "V.npy", "values [Lk, dv]", true},
      {"--causal", "", "query i sees keys j <= P + i", false},
      {"--q-offset", "P", "position of the first query (default 0)", false},
      {"--alibi-heads", "H", "ALiBi with the slopes for H heads (1 .. 2^20)", false},
      {"--alibi-head", "h", "which head's slope to use (default 0)", false},
      {"--symmetric", "", "ALiBi -m|i-j| instead of -m(i-j)", false},
      {"--rope-base", "B", "RoPE (half pairing) with base B on Q and K", false},
      {"--rotary-dim", "R", "RoPE: rotate the first R dims only (default d)", false},
      {"--scale", "S", "logit scale (default 1/sqrt(d))", false},
      {"--dtype", "f32|f64", "compute and output type (default f64)", false},
      {"--weights-out", "W.npy", "also write the attention weights [Lq, Lk]", false},
      {"--out", "O.npy", "output file [Lq, dv]", true},
  };
  c.run = [](const args& a) {
    if (a.has("--alibi-heads") && a.has("--rope-base"))
      throw usage_error("--alibi-heads and --rope-base are exclusive");
    if (a.has("--alibi-head") && !a.has("--alibi-heads"))
      throw usage_error("--alibi-head needs --alibi-heads");
    if (a.has("--rotary-dim") && !a.has("--rope-base"))
      throw usage_error("--rotary-dim needs --rope-base");
    const dmat q = read_matrix(a, "--q"), k = read_matrix(a, "--k"), v = read_matrix(a, "--v");
    posenc::attention_config opt;
    opt.mask.causal = a.has("--causal");
    opt.q_offset = at_least(a, "--q-offset", 0, 0);
    if (a.has("--scale")) {
      opt.scale = a.real("--scale");
      if (opt.scale <= 0) throw usage_error("invalid value for --scale: must be > 0");
    }
    if (a.has("--alibi-heads")) {
      const long long H = heads_flag(a, "--alibi-heads");
      const long long h = at_least(a, "--alibi-head", 0, 0);
      if (h >= H)
        throw usage_error("invalid value for --alibi-head: " + std::to_string(h) +
                          " (must be < H)");
      const auto form =
          a.has("--symmetric") ? posenc::alibi_form::symmetric : posenc::alibi_form::causal;
      return dispatch(q, k, v, opt, posenc::alibi_policy(H, form).only_head(h), a);
    }
    if (a.has("--symmetric")) throw usage_error("--symmetric needs --alibi-heads");
    if (a.has("--rope-base")) {
      const double base = a.real("--rope-base");
      const long long r = a.has("--rotary-dim") ? at_least(a, "--rotary-dim", 2, 2) : -1;
      return dispatch(q, k, v, opt, posenc::rotary_policy(q.cols(), base, r), a);
    }
    return dispatch(q, k, v, opt, posenc::no_position_policy{}, a);
  };
  return c;
}

}  // namespace posenc_cli
