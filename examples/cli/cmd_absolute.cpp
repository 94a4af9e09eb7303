// `posenc sinusoidal` and `posenc learned`: absolute-encoding tables as .npy files.

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <posenc/core/random.hpp>
#include <posenc/encoding/learned.hpp>
#include <posenc/encoding/sinusoidal.hpp>
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

struct table_shape {
  long long len, dim;
};

// --dim, then --len (each >= 1), then their product against max_elements.
table_shape read_shape(const args& a) {
  const long long dim = positive(a, "--dim");
  const long long len = positive(a, "--len");
  if (dim > max_elements || len > max_elements / dim)
    throw usage_error("table too large: --len " + std::to_string(len) + " x --dim " +
                      std::to_string(dim) + " exceeds 2^28 elements");
  return {len, dim};
}

// The flags both table commands end with.
const flag dtype_flag{"--dtype", "f32|f64", "element type of the file (default f32)", false};
const flag out_flag{"--out", "FILE.npy", "output file", true};

// Rows per chunk of a streamed table: about 1 MiB, at least one row.
template <class Scalar>
long long chunk_rows(long long dim) {
  return std::max(1LL, static_cast<long long>((std::size_t{1} << 20) / sizeof(Scalar)) / dim);
}

// The table goes out a chunk of rows at a time through one buffer (table_into(rows, p)
// gives exactly those rows of the full table), so memory stays at one chunk whatever --len.
template <class Scalar>
int write_sinusoidal(const posenc::sinusoidal_config& cfg, long long len, long long offset,
                     const std::string& out) {
  const posenc::sinusoidal<Scalar> enc(cfg);
  output_files files;
  npy_output& file = files.npy<Scalar>("--out", out, {len, cfg.dim});
  const long long step = std::min(len, chunk_rows<Scalar>(cfg.dim));
  std::vector<Scalar> chunk(static_cast<std::size_t>(step * cfg.dim));
  for (long long r0 = 0; r0 < len; r0 += step) {
    const long long n = std::min(step, len - r0);
    enc.table_into(Eigen::Map<posenc::row_matrix<Scalar>>(chunk.data(), n, cfg.dim), offset + r0);
    file.write(chunk.data(), static_cast<std::size_t>(n * cfg.dim));
  }
  files.commit();
  std::cout << "wrote " << out << ": [" << len << ", " << cfg.dim << "] " << dtype_name<Scalar>()
            << ", " << posenc::to_string(cfg.preset) << ", positions " << offset << ".."
            << offset + len - 1 << "\n";
  return 0;
}

// The table learned_table<Scalar>(len, dim, seed) holds, generated and written 1 MiB at a
// time rather than built whole (with its gradient buffer, 3x the file): element k = r*dim + c
// is stddev * z_k rounded to Scalar, z_k the generator's k-th normal() (learned.hpp).
template <class Scalar>
int write_learned(long long len, long long dim, std::uint64_t seed, const std::string& out) {
  output_files files;
  npy_output& file = files.npy<Scalar>("--out", out, {len, dim});
  posenc::random_generator gen(seed);
  const double stddev = posenc::learned_table<Scalar>::default_stddev;
  std::vector<Scalar> chunk(std::min<std::size_t>(static_cast<std::size_t>(len * dim),
                                                  (std::size_t{1} << 20) / sizeof(Scalar)));
  for (long long k0 = 0; k0 < len * dim; k0 += static_cast<long long>(chunk.size())) {
    const auto n =
        static_cast<std::size_t>(std::min(len * dim - k0, static_cast<long long>(chunk.size())));
    for (std::size_t i = 0; i < n; ++i) chunk[i] = static_cast<Scalar>(stddev * gen.normal());
    file.write(chunk.data(), n);
  }
  files.commit();
  std::cout << "wrote " << out << ": [" << len << ", " << dim << "] " << dtype_name<Scalar>()
            << ", N(0, 0.02), seed " << seed << "\n";
  return 0;
}

}  // namespace

command sinusoidal_command() {
  command c;
  c.name = "sinusoidal";
  c.summary = "sinusoidal table [L, D] for positions P..P+L-1 (vaswani, fairseq, t2t)";
  c.usage =
      "posenc sinusoidal --dim D --len L [--offset P] [--base B] [--preset vaswani|fairseq|t2t]\n"
      "                    [--padding-idx N] [--dtype f32|f64] --out FILE.npy";
  c.flags = {
      {"--dim", "D", "width d of each row (vaswani: even; fairseq: >= 4; t2t: >= 1)", true},
      {"--len", "L", "number of positions (rows), >= 1", true},
      {"--offset", "P", "first position (default 0); row r is PE(P + r)", false},
      {"--base", "B", "frequency base (default 10000); t2t: max_timescale", false},
      {"--preset", "NAME",
       "vaswani (interleaved sin/cos, default), fairseq or t2t (sin block, cos block)", false},
      {"--padding-idx", "N", "fairseq only: position N gets a zero row", false},
      dtype_flag,
      out_flag,
  };
  c.run = [](const args& a) {
    const auto [len, dim] = read_shape(a);
    const long long offset = a.integer_or("--offset", 0);
    const std::string preset = a.choice("--preset", {"vaswani", "fairseq", "t2t"}, "vaswani");
    const std::string dtype = a.choice("--dtype", {"f32", "f64"}, "f32");
    const double base = a.real_or("--base", 10000.0);
    posenc::sinusoidal_config cfg;
    if (preset == "vaswani") cfg = posenc::sinusoidal_config::vaswani(dim, base);
    if (preset == "t2t") cfg = posenc::sinusoidal_config::t2t(dim, 1.0, base);
    if (preset == "fairseq") {
      const long long pad = a.integer_or("--padding-idx", -1);
      if (a.has("--padding-idx") && pad < 0)
        throw usage_error("invalid value for --padding-idx: " + std::to_string(pad) +
                          " (must be >= 0)");
      cfg = posenc::sinusoidal_config::fairseq(dim, pad, base);
    } else if (a.has("--padding-idx")) {
      throw usage_error("--padding-idx needs --preset fairseq");
    }
    const std::string out = a.str("--out");
    return dtype == "f64" ? write_sinusoidal<double>(cfg, len, offset, out)
                          : write_sinusoidal<float>(cfg, len, offset, out);
  };
  return c;
}

command learned_command() {
  command c;
  c.name = "learned";
  c.summary = "learned position table [L, D], initialised N(0, 0.02) from a seed";
  c.usage = "posenc learned --dim D --len L --seed S [--dtype f32|f64] --out FILE.npy";
  c.flags = {
      {"--dim", "D", "width d of each row, >= 1", true},
      {"--len", "L", "number of positions (max_len), >= 1", true},
      {"--seed", "S", "generator seed, 0 .. 2^63-1 (same seed, same table, every platform)", true},
      dtype_flag,
      out_flag,
  };
  c.run = [](const args& a) {
    const auto [len, dim] = read_shape(a);
    const long long seed = a.integer("--seed");
    if (seed < 0)
      throw usage_error("invalid value for --seed: " + std::to_string(seed) + " (must be >= 0)");
    const std::string dtype = a.choice("--dtype", {"f32", "f64"}, "f32");
    const std::string out = a.str("--out");
    return dtype == "f64" ? write_learned<double>(len, dim, static_cast<std::uint64_t>(seed), out)
                          : write_learned<float>(len, dim, static_cast<std::uint64_t>(seed), out);
  };
  return c;
}

}  // namespace posenc_cli
