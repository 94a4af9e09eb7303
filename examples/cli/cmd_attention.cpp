// `posenc bias alibi`, `posenc bias t5` and `posenc attention`: position biases and
// single-head attention outputs as .npy files.

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <limits>
#include <posenc/attention.hpp>
#include <posenc/io/npy.hpp>
#include <string>
#include <vector>

#include "cli.hpp"

namespace posenc_cli {
namespace {

// Head counts far beyond any model (the largest have a few hundred) are refused before the
// slopes are computed; posenc::limits::max_heads is the same 2^16.
constexpr long long max_heads = 1LL << 16;
// T5 bucket counts likewise (T5 uses 32, the largest published configs a few hundred).
constexpr long long max_buckets = 1LL << 20;

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
                      " (must be <= 2^16 = 65536)");
  return h;
}

// --q-offset P for Lq queries: P >= 0 and the last query position P + Lq - 1 an int64.
long long q_offset_flag(const args& a, long long len_q) {
  const long long off = at_least(a, "--q-offset", 0, 0);
  if (off > std::numeric_limits<long long>::max() - len_q)
    throw usage_error("invalid value for --q-offset: " + std::to_string(off) +
                      " (too large: query positions P + i, i < " + std::to_string(len_q) +
                      ", must stay below 2^63)");
  return off;
}

using dmat = posenc::attention_matrix<double>;

dmat read_matrix(const args& a, const std::string& flag) {
  return posenc::io::read_npy_matrix<double>(a.str(flag));
}

// The files of an attention run, started before the work so that a bad destination fails
// at once; the kernel's results fill them and commit() renames them into place together.
template <class Scalar, class Policy>
int attend(const posenc::attention_matrix<Scalar>& q, const posenc::attention_matrix<Scalar>& k,
           const posenc::attention_matrix<Scalar>& v, const posenc::attention_config& opt,
           const Policy& policy, const args& a) {
  using M = posenc::attention_matrix<Scalar>;
  const std::string out_path = a.str("--out");
  output_files files;
  npy_output& out_file = files.npy<Scalar>("--out", out_path, {q.rows(), v.cols()});
  // The [Lq, Lk] weights only when asked for: the kernel itself never forms them.
  const bool want_w = a.has("--weights-out");
  npy_output* w_file = nullptr;
  if (want_w) {
    check_size(1, q.rows(), k.rows(), "attention weights");
    w_file = &files.npy<Scalar>("--weights-out", a.str("--weights-out"), {q.rows(), k.rows()});
  }
  M w;
  const M out = want_w ? posenc::attention_with_weights(q, k, v, w, opt, policy)
                       : posenc::attention(q, k, v, opt, policy);
  out_file.write(out.data(), static_cast<std::size_t>(out.size()));
  if (w_file) w_file->write(w.data(), static_cast<std::size_t>(w.size()));
  files.commit();
  std::cout << "wrote " << out_path << ": [" << out.rows() << ", " << out.cols() << "] "
            << dtype_name<Scalar>() << "\n";
  return 0;
}

template <class Policy>
int dispatch(const dmat& q, const dmat& k, const dmat& v, const posenc::attention_config& opt,
             const Policy& policy, const args& a) {
  if (a.choice("--dtype", {"f32", "f64"}, "f64") == "f64")
    return attend<double>(q, k, v, opt, policy, a);
  using F = posenc::attention_matrix<float>;
  const F qf = q.cast<float>(), kf = k.cast<float>(), vf = v.cast<float>();
  return attend<float>(qf, kf, vf, opt, policy, a);
}

// The T5 bucket parameters, checked here so that the message names the flag at fault
// (the library's check names max_distance whenever the two disagree, even for a huge
// --buckets with the default --max-distance).
posenc::t5_bucket_config t5_config(const args& a) {
  posenc::t5_bucket_config cfg;
  cfg.bidirectional = !a.has("--unidirectional");
  const long long min_buckets = cfg.bidirectional ? 4 : 2;
  cfg.num_buckets = a.integer_or("--buckets", 32);
  if (cfg.num_buckets < min_buckets || cfg.num_buckets > max_buckets)
    throw usage_error("invalid value for --buckets: " + std::to_string(cfg.num_buckets) +
                      " (must be " + std::to_string(min_buckets) + " .. 2^20" +
                      (cfg.bidirectional ? "; 2 .. 2^20 with --unidirectional)" : ")"));
  // E exact buckets (one per distance): num_buckets / 2, halved again when bidirectional.
  const long long exact = (cfg.bidirectional ? cfg.num_buckets / 2 : cfg.num_buckets) / 2;
  cfg.max_distance = a.integer_or("--max-distance", 128);
  if (cfg.max_distance <= exact) {
    const std::string exact_text = std::to_string(exact);
    if (!a.has("--max-distance"))
      throw usage_error("invalid value for --buckets: " + std::to_string(cfg.num_buckets) +
                        " (its " + exact_text + " exact buckets need --max-distance > " +
                        exact_text + "; the default is 128)");
    throw usage_error("invalid value for --max-distance: " + std::to_string(cfg.max_distance) +
                      " (must exceed the " + exact_text + " exact buckets of --buckets " +
                      std::to_string(cfg.num_buckets) + ")");
  }
  return cfg;
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
      {"--heads", "H", "number of heads, 1 .. 2^16 (any count: the paper's slopes)", true},
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
                    lk = at_least(a, "--len-k", 0, 0), off = q_offset_flag(a, lq);
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
    p.check(s);
    const std::string path = a.str("--out");
    output_files files;
    // Element by element into 1 MiB chunks: memory stays bounded whatever H x Lq x Lk is.
    auto write_all = [&](auto zero) {
      using Scalar = decltype(zero);
      npy_chunks<Scalar> chunks(files.npy<Scalar>("--out", path, {H, lq, lk}));
      for (long long h = 0; h < H; ++h) {
        const auto head = p.head(0, h, s);
        for (long long i = 0; i < lq; ++i)
          for (long long j = 0; j < lk; ++j)
            chunks.push(static_cast<Scalar>(head.bias(off + i, j)));
      }
      chunks.flush();
    };
    if (a.choice("--dtype", {"f32", "f64"}, "f64") == "f32")
      write_all(0.0f);
    else
      write_all(0.0);
    files.commit();
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
      {"--buckets", "N", "num_buckets (default 32; 4 .. 2^20, 2 .. 2^20 unidirectional)", false},
      {"--max-distance", "D", "max_distance (default 128)", false},
      {"--unidirectional", "", "decoder buckets (keys after the query share bucket 0)", false},
      {"--q-offset", "P", "position of the first query (default 0)", false},
      {"--out", "B.npy", "output file", true},
  };
  c.run = [](const args& a) {
    const long long lq = at_least(a, "--len-q", 0, 0), lk = at_least(a, "--len-k", 0, 0),
                    off = q_offset_flag(a, lq);
    check_size(1, lq, lk, "bucket matrix");
    const posenc::t5_bucket_config cfg = t5_config(a);
    const std::string path = a.str("--out");
    output_files files;
    // Element by element into 1 MiB chunks (bucket(j - (P + i)), what t5_buckets fills).
    npy_chunks<std::int64_t> chunks(files.npy<std::int64_t>("--out", path, {lq, lk}));
    for (long long i = 0; i < lq; ++i)
      for (long long j = 0; j < lk; ++j)
        chunks.push(static_cast<std::int64_t>(posenc::t5_bucket(j - (off + i), cfg)));
    chunks.flush();
    files.commit();
    std::cout << "wrote " << path << ": [" << lq << ", " << lk << "] int64 T5 buckets ("
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
      {"--alibi-heads", "H", "ALiBi with the slopes for H heads (1 .. 2^16)", false},
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
    if (q.cols() < 1)
      throw usage_error("--q " + a.str("--q") + ": rows have 0 values (d must be >= 1)");
    if (k.cols() != q.cols())
      throw usage_error("--k " + a.str("--k") + ": rows have " + std::to_string(k.cols()) +
                        " values but --q rows have " + std::to_string(q.cols()));
    if (v.rows() != k.rows())
      throw usage_error("--v " + a.str("--v") + ": " + std::to_string(v.rows()) +
                        " rows but --k has " + std::to_string(k.rows()) +
                        " (one value row per key)");
    posenc::attention_config opt;
    opt.mask.causal = a.has("--causal");
    opt.q_offset = q_offset_flag(a, q.rows());
    if (a.has("--scale")) {
      opt.scale = a.real("--scale");
      if (opt.scale <= 0) throw usage_error("invalid value for --scale: must be > 0");
    }
    if (a.has("--alibi-heads")) {
      const long long H = heads_flag(a, "--alibi-heads");
      const long long h = at_least(a, "--alibi-head", 0, 0);
      if (h >= H)
        throw usage_error("invalid value for --alibi-head: " + std::to_string(h) +
                          " (must be < --alibi-heads " + std::to_string(H) + ")");
      const auto form =
          a.has("--symmetric") ? posenc::alibi_form::symmetric : posenc::alibi_form::causal;
      return dispatch(q, k, v, opt, posenc::alibi_policy(H, form).only_head(h), a);
    }
    if (a.has("--symmetric")) throw usage_error("--symmetric needs --alibi-heads");
    if (a.has("--rope-base")) {
      const double base = a.real("--rope-base");
      if (!(base > 1))
        throw usage_error("invalid value for --rope-base: " + a.str("--rope-base") +
                          " (must be > 1)");
      long long r = -1;
      if (a.has("--rotary-dim")) {
        r = at_least(a, "--rotary-dim", 2, 2);
        if (r % 2 != 0 || r > q.cols())
          throw usage_error("invalid value for --rotary-dim: " + std::to_string(r) +
                            " (must be even and <= " + std::to_string(q.cols()) +
                            ", the width of --q)");
      }
      return dispatch(q, k, v, opt, posenc::rotary_policy(q.cols(), base, r), a);
    }
    return dispatch(q, k, v, opt, posenc::no_position_policy{}, a);
  };
  return c;
}

}  // namespace posenc_cli
