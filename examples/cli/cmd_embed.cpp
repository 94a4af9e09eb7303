// `posenc embed`: token ids through a checkpoint's token table (and position table or a
// sinusoidal encoding): the input rows of a transformer, as an .npy file.

#include <cstdint>
#include <iostream>
#include <posenc/encoding/embedding.hpp>
#include <posenc/io/npy.hpp>
#include <string>
#include <vector>

#include "cli.hpp"

namespace posenc_cli {
namespace {

using id_matrix = Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using id_vector = Eigen::Matrix<std::int64_t, 1, Eigen::Dynamic>;

// The ids file: int32 or int64, [L] or [B, L] (anything else is a usage error naming --ids).
posenc::io::tensor<std::int64_t> read_ids(const std::string& path) {
  const posenc::io::npy_info info = posenc::io::read_npy_info(path);
  if (info.type != posenc::io::dtype::i32 && info.type != posenc::io::dtype::i64)
    throw usage_error("--ids " + path + ": expected int32 or int64 token ids, got dtype '" +
                      info.descr + "'");
  if (info.shape.size() != 1 && info.shape.size() != 2)
    throw usage_error("--ids " + path + ": expected an [L] or [B, L] array, got rank " +
                      std::to_string(info.shape.size()));
  return posenc::io::read_npy<std::int64_t>(path);
}

// The positional part the flags ask for, and its name for the "wrote" line (empty: none).
template <class Scalar>
typename posenc::embedding_layer<Scalar>::position_encoding positions_from(
    const args& a, const std::string& checkpoint, posenc::Index dim, std::string& what) {
  if (a.has("--position-table")) {
    what = a.str("--position-table");
    return posenc::learned_table<Scalar>::load_safetensors(checkpoint, a.str("--position-table"));
  }
  if (a.has("--sinusoidal")) {
    const std::string preset = a.choice("--sinusoidal", {"vaswani", "fairseq", "t2t"}, "vaswani");
    const double base = a.real_or("--base", 10000.0);
    what = "sinusoidal " + preset;
    if (preset == "fairseq")
      return posenc::sinusoidal<Scalar>(posenc::sinusoidal_config::fairseq(dim, -1, base));
    if (preset == "t2t")
      return posenc::sinusoidal<Scalar>(posenc::sinusoidal_config::t2t(dim, 1.0, base));
    return posenc::sinusoidal<Scalar>(posenc::sinusoidal_config::vaswani(dim, base));
  }
  what.clear();  // nothing added
  return posenc::no_positions{};
}

template <class Scalar>
int embed(const args& a) {
  const std::string checkpoint = a.str("--checkpoint"), out_path = a.str("--out");
  const auto ids = read_ids(a.str("--ids"));
  const bool batched = ids.shape.size() == 2;
  const long long batch = batched ? ids.shape[0] : 1, len = ids.shape.back();
  auto tokens = posenc::learned_table<Scalar>::load_safetensors(checkpoint, a.str("--token-table"));
  const long long dim = tokens.dim();
  if (len > 0 && (batch > max_elements / len || batch * len > max_elements / dim))
    throw usage_error("output too large: " + std::to_string(batch) + " x " + std::to_string(len) +
                      " ids x " + std::to_string(dim) + " values exceeds 2^28 elements");
  std::string what;
  auto pe = positions_from<Scalar>(a, checkpoint, dim, what);
  posenc::embedding_options opt;
  if (a.has("--scale-sqrt-d")) opt.scale = posenc::embedding_scale::sqrt_dim;
  const long long vocab = tokens.max_len();
  posenc::embedding_layer<Scalar> layer(std::move(tokens), std::move(pe), opt);
  layer.eval();  // inference: no dropout
  const long long offset = a.integer_or("--offset", 0);
  const posenc::row_matrix<Scalar> x =
      batched ? layer.forward(Eigen::Map<const id_matrix>(ids.data.data(), batch, len), offset)
              : layer.forward(Eigen::Map<const id_vector>(ids.data.data(), len), offset);

  std::vector<long long> shape = {len, dim};
  if (batched) shape.insert(shape.begin(), batch);
  output_files files;
  files.npy<Scalar>("--out", out_path, shape).write(x.data(), static_cast<std::size_t>(x.size()));
  files.commit();
  std::cout << "wrote " << out_path << ": [" << (batched ? std::to_string(batch) + ", " : "") << len
            << ", " << dim << "] " << dtype_name<Scalar>() << ", tokens " << a.str("--token-table")
            << " (vocab " << vocab << ")" << (a.has("--scale-sqrt-d") ? " x sqrt(d)" : "")
            << (what.empty() ? "" : " + " + what) << ", positions " << offset << ".."
            << offset + len - 1 << "\n";
  return 0;
}

}  // namespace

command embed_command() {
  command c;
  c.name = "embed";
  c.summary = "token ids [L] or [B, L] -> s * wte[id] + positions, [L, D] or [B, L, D]";
  c.usage =
      "posenc embed --checkpoint F.safetensors --token-table NAME --ids IDS.npy\n"
      "             [--position-table NAME | --sinusoidal vaswani|fairseq|t2t [--base B]]\n"
      "             [--scale-sqrt-d] [--offset P] [--dtype f32|f64] --out FILE.npy";
  c.flags = {
      {"--checkpoint", "F.safetensors", "the file holding the tables", true},
      {"--token-table", "NAME", "the [vocab, D] token table, e.g. transformer.wte.weight", true},
      {"--ids", "IDS.npy", "int32 or int64 token ids, [L] (one sequence) or [B, L]", true},
      {"--position-table", "NAME", "a learned [max_len, D] table, e.g. transformer.wpe.weight",
       false},
      {"--sinusoidal", "PRESET", "add a sinusoidal encoding instead: vaswani, fairseq or t2t",
       false},
      {"--base", "B", "with --sinusoidal: frequency base (default 10000; t2t: max_timescale)",
       false},
      {"--scale-sqrt-d", "", "multiply the token rows by sqrt(D) (Vaswani et al. 3.4)", false},
      {"--offset", "P", "position of the first token of each sequence (default 0)", false},
      {"--dtype", "f32|f64", "element type of the output (default f32)", false},
      {"--out", "FILE.npy", "output file", true},
  };
  c.run = [](const args& a) {
    if (a.has("--position-table") && a.has("--sinusoidal"))
      throw usage_error("--position-table and --sinusoidal exclude each other");
    if (a.has("--base") && !a.has("--sinusoidal")) throw usage_error("--base needs --sinusoidal");
    if (a.has("--sinusoidal")) a.choice("--sinusoidal", {"vaswani", "fairseq", "t2t"}, "vaswani");
    const std::string dtype = a.choice("--dtype", {"f32", "f64"}, "f32");
    return dtype == "f64" ? embed<double>(a) : embed<float>(a);
  };
  return c;
}

}  // namespace posenc_cli
