#pragma once
/// \file
/// Sinusoidal absolute positional encoding (Vaswani et al., "Attention Is All You Need",
/// 2017, section 3.5) and the two widely used variants that lay it out differently.
///
///     vaswani  PE(p, 2i)   = sin(p * w_i),  PE(p, 2i+1) = cos(p * w_i),
///              w_i = base^(-2i/d),  i = 0 .. d/2-1            layout [s0 c0 s1 c1 ...]
///              odd d is an error.
///     fairseq  PE(p, i) = sin(p * w_i),  PE(p, d/2 + i) = cos(p * w_i),
///              w_i = exp(-i * ln(base) / (d/2 - 1))           layout [s0 s1 ... c0 c1 ...]
///              odd d: a zero last column; d < 4 is an error (fairseq divides by d/2 - 1);
///              optional padding_idx whose row is all zeros.
///              (fairseq's SinusoidalPositionalEmbedding.get_embedding.)
///     t2t      PE(p, i) = sin(p * w_i),  PE(p, d/2 + i) = cos(p * w_i),
///              w_i = min_ts * exp(-i * ln(max_ts/min_ts) / max(d/2 - 1, 1))
///              odd d: a zero last column.  (tensor2tensor's get_timing_signal_1d;
///              max_ts is `base`, min_ts is `min_timescale`.)
///
/// A position is the number p in the formula, and row r of table(len, offset) is PE(offset
/// + r). fairseq numbers the tokens of a sequence from padding_idx + 1 (its make_positions),
/// so fairseq's embedding of token t (0-based, no padding before it) is PE(padding_idx + 1
/// + t): use `fairseq_first_position()` as the offset. Positions may be any integers of
/// magnitude <= 2^53 (exact in double); angles are formed as double(p) * w_i in double and
/// sin/cos are evaluated in double, then rounded once to Scalar, so a float table is
/// within 6e-8 of the exact values at every position (the tests check 1e-6 up to 10^6).

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../backend/sinusoidal.hpp"
#include "../core/backend.hpp"
#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/types.hpp"
#include "../core/view.hpp"
#include "../math/frequency.hpp"
#include "detail/arguments.hpp"
#include "detail/rows.hpp"

namespace posenc {

/// Which published table to reproduce; see the file comment for the formulas.
enum class sinusoidal_preset {
  vaswani,  ///< interleaved sin/cos, w_i = base^(-2i/d) (the paper; most tutorials)
  fairseq,  ///< sin block then cos block, fairseq's frequencies and padding row
  t2t,      ///< sin block then cos block, tensor2tensor's timing signal
};

/// Name of a preset: "vaswani", "fairseq" or "t2t".
inline const char* to_string(sinusoidal_preset p) noexcept {
  switch (p) {
    case sinusoidal_preset::vaswani:
      return "vaswani";
    case sinusoidal_preset::fairseq:
      return "fairseq";
    case sinusoidal_preset::t2t:
      return "t2t";
  }
  return "?";
}

/// Whether add_to() multiplies the token embeddings by sqrt(d) before adding PE
/// (input = sqrt(d) * E + PE, section 3.4 of Vaswani et al.).
enum class embedding_scale {
  none,      ///< input = E + PE
  sqrt_dim,  ///< input = sqrt(d) * E + PE
};

/// Configuration of a sinusoidal encoding. Build one with the named constructors.
struct sinusoidal_config {
  Index dim = 0;                                          ///< d, the model width
  sinusoidal_preset preset = sinusoidal_preset::vaswani;  ///< layout and frequency rule
  double base = 10000.0;       ///< vaswani/fairseq: the base; t2t: max_timescale
  double min_timescale = 1.0;  ///< t2t only
  Index padding_idx = -1;      ///< fairseq only: the position whose row is zero; -1: none

  /// Vaswani et al.: interleaved, w_i = base^(-2i/d). `dim` must be even.
  static sinusoidal_config vaswani(Index dim, double base = 10000.0) {
    sinusoidal_config c;
    c.dim = dim;
    c.base = base;
    return c;
  }
  /// fairseq's SinusoidalPositionalEmbedding table (padding_idx -1: no zero row).
  static sinusoidal_config fairseq(Index dim, Index padding_idx = -1, double base = 10000.0) {
    sinusoidal_config c;
    c.dim = dim;
    c.preset = sinusoidal_preset::fairseq;
    c.base = base;
    c.padding_idx = padding_idx;
    return c;
  }
  /// tensor2tensor's get_timing_signal_1d(length, channels = dim, min_ts, max_ts).
  static sinusoidal_config t2t(Index dim, double min_timescale = 1.0,
                               double max_timescale = 10000.0) {
    sinusoidal_config c;
    c.dim = dim;
    c.preset = sinusoidal_preset::t2t;
    c.base = max_timescale;
    c.min_timescale = min_timescale;
    return c;
  }
};

/// Largest position magnitude accepted: 2^53, so every position is exact in double.
inline constexpr Index sinusoidal_max_position = Index{1} << 53;

namespace detail {

/// Validates a sinusoidal configuration and returns its `dim / 2` frequencies w_i, in
/// double: the one place every backend's sinusoidal gets them. Throws posenc::error
/// "posenc::sinusoidal: ..." (see sinusoidal's constructor).
inline std::vector<double> sinusoidal_frequencies(const sinusoidal_config& config) {
  const Index d = config.dim;
  require(d > 0, "sinusoidal", "dim", d, "must be > 0");
  check_dim_limit("sinusoidal", "dim", d);
  switch (config.preset) {
    case sinusoidal_preset::vaswani:
      require(
          d % 2 == 0, "sinusoidal", "dim", d,
          "must be even for the vaswani preset (use fairseq or t2t for a zero-padded odd width)");
      break;
    case sinusoidal_preset::fairseq:
      require(d >= 4, "sinusoidal", "dim", d,
              "must be >= 4 for the fairseq preset (its frequency step divides by dim/2 - 1)");
      break;
    case sinusoidal_preset::t2t:
      break;
  }
  if (config.preset == sinusoidal_preset::t2t) {
    require(std::isfinite(config.min_timescale) && config.min_timescale > 0, "sinusoidal",
            "min_timescale", config.min_timescale, "must be finite and > 0");
    require(std::isfinite(config.base) && config.base >= config.min_timescale, "sinusoidal",
            "max_timescale", config.base, "must be finite and >= min_timescale");
  } else {
    require(std::isfinite(config.base) && config.base > 1, "sinusoidal", "base", config.base,
            "must be finite and > 1");
  }
  require(config.padding_idx >= -1, "sinusoidal", "padding_idx", config.padding_idx,
          "must be >= 0, or -1 for none");
  require(config.padding_idx == -1 || config.preset == sinusoidal_preset::fairseq, "sinusoidal",
          "padding_idx", config.padding_idx, "is only meaningful for the fairseq preset");

  // frequencies: computed once, here, in double
  const Index pairs = d / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(pairs));
  if (config.preset == sinusoidal_preset::vaswani) {
    for (Index i = 0; i < pairs; ++i)
      inv_freq[static_cast<std::size_t>(i)] = math::inv_freq(config.base, i, d);
  } else {
    const double min_ts = config.preset == sinusoidal_preset::t2t ? config.min_timescale : 1.0;
    const double steps = static_cast<double>(
        config.preset == sinusoidal_preset::t2t ? std::max<Index>(pairs - 1, 1) : pairs - 1);
    const double increment = std::log(config.base / min_ts) / steps;
    for (Index i = 0; i < pairs; ++i)
      inv_freq[static_cast<std::size_t>(i)] = math::log_spaced_freq(min_ts, increment, i);
  }
  return inv_freq;
}

/// Throws posenc::error from `where` unless rows offset .. offset + len - 1 are positions
/// within +-2^53.
inline void sinusoidal_check_range(const char* where, Index len, Index offset) {
  require(len >= 0, where, "len", len, "must be >= 0");
  require(offset >= -sinusoidal_max_position && offset <= sinusoidal_max_position, where, "offset",
          offset, "must be within +-2^53 (exact in double)");
  require(len == 0 || offset + (len - 1) <= sinusoidal_max_position, where, "offset + len - 1",
          offset + (len - 1), "must be <= 2^53 (exact in double)");
}

/// Throws posenc::error from `where` naming the first position beyond +-2^53.
inline void sinusoidal_check_positions(const char* where, const std::vector<Index>& positions) {
  for (std::size_t r = 0; r < positions.size(); ++r)
    require(positions[r] >= -sinusoidal_max_position && positions[r] <= sinusoidal_max_position,
            where, "positions[" + std::to_string(r) + "]", positions[r],
            "must be within +-2^53 (exact in double)");
}

/// The factor s of add_to: 1, or sqrt(d) computed in double and rounded once to Scalar.
template <class Scalar>
Scalar sinusoidal_scale(embedding_scale scale, Index dim) noexcept {
  return scale == embedding_scale::sqrt_dim
             ? static_cast<Scalar>(std::sqrt(static_cast<double>(dim)))
             : Scalar(1);
}

}  // namespace detail

/// A sinusoidal absolute encoding of width d: tables, values at positions, and adding it
/// to token embeddings. Row-major, one position per row. Scalar is float or double;
/// Backend picks the kernel (see core/backend.hpp). Construction validates the
/// configuration and computes the frequencies once, in double.
template <class Scalar, class Backend = default_backend>
class sinusoidal {
  static_assert(std::is_floating_point_v<Scalar>,
                "posenc::sinusoidal: Scalar must be floating point");

 public:
  using scalar_type = Scalar;    ///< element type of tables and embeddings
  using backend_type = Backend;  ///< kernel tag (see core/backend.hpp)
  /// A [rows, d] row-major table.
  using matrix = row_matrix<Scalar>;

  /// Throws posenc::error for dim <= 0, odd dim (vaswani), dim < 4 (fairseq), a base or
  /// timescale that is not finite and > 1 (resp. 0 < min <= max), or padding_idx < -1 or
  /// used with another preset.
  explicit sinusoidal(const sinusoidal_config& config)
      : config_(config), inv_freq_(detail::sinusoidal_frequencies(config)) {}

  /// The Vaswani et al. encoding of width `dim` with base 10000.
  explicit sinusoidal(Index dim) : sinusoidal(sinusoidal_config::vaswani(dim)) {}

  /// The validated configuration.
  const sinusoidal_config& config() const noexcept { return config_; }
  /// d, the width of every row.
  Index dim() const noexcept { return config_.dim; }
  /// Number of (sin, cos) pairs: d / 2 (rounded down).
  Index pairs() const noexcept { return config_.dim / 2; }
  /// w_i, the angular frequency of pair i (radians per position), i = 0 .. pairs()-1.
  const std::vector<double>& frequencies() const noexcept { return inv_freq_; }
  /// True for [s0 c0 s1 c1 ...] (vaswani), false for [s0 s1 ... c0 c1 ...].
  bool interleaved() const noexcept { return config_.preset == sinusoidal_preset::vaswani; }
  /// Column holding sin(p w_i).
  Index sin_column(Index i) const noexcept { return interleaved() ? 2 * i : i; }
  /// Column holding cos(p w_i).
  Index cos_column(Index i) const noexcept { return interleaved() ? 2 * i + 1 : pairs() + i; }
  /// fairseq's position of the first real token, padding_idx + 1 (0 without padding_idx):
  /// `table(len, fairseq_first_position())` is what fairseq adds to an unpadded sequence.
  Index fairseq_first_position() const noexcept { return config_.padding_idx + 1; }

  /// The [len, d] table of positions offset .. offset + len - 1 (row r = PE(offset + r)).
  /// A shard or a streaming step gets exactly the rows of the full table.
  matrix table(Index len, Index offset = 0) const {
    check_range("sinusoidal::table", len, offset);
    detail::check_elements("sinusoidal::table", "len", len, dim());
    matrix out(len, dim());
    run(nullptr, offset, len, out.data(), dim(), 1, false, Scalar(1));
    return out;
  }

  /// Writes table(out.rows(), offset) into `out` ([len, d], any Eigen lvalue with direct
  /// access, row- or column-major). The `const&` is cast away, as Eigen documents for
  /// output arguments.
  template <class Derived>
  void table_into(const Eigen::MatrixBase<Derived>& out, Index offset = 0) const {
    auto v = checked_view(out, "sinusoidal::table_into");
    check_range("sinusoidal::table_into", v.extent(0), offset);
    run(nullptr, offset, v.extent(0), v.data(), v.stride(0), v.stride(1), false, Scalar(1));
  }

  /// Rows PE(positions[r]) for any list of positions: [n, d].
  matrix at(const std::vector<Index>& positions) const {
    check_positions("sinusoidal::at", positions);
    matrix out(static_cast<Index>(positions.size()), dim());
    run(positions.data(), 0, out.rows(), out.data(), dim(), 1, false, Scalar(1));
    return out;
  }
  /// Rows PE(positions(r)) for an integer Eigen vector of positions: [n, d].
  template <class Derived>
  matrix at(const Eigen::DenseBase<Derived>& positions) const {
    return at(to_positions(positions));
  }

  /// Adds PE to token embeddings in place: E(r, :) = s * E(r, :) + PE(offset + r) for an
  /// [seq, d] Eigen lvalue (row- or column-major, blocks fine), s = 1 or sqrt(d).
  /// The `const&` is cast away, as Eigen documents for output arguments.
  template <class Derived>
  void add_to(const Eigen::MatrixBase<Derived>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none) const {
    add_to(checked_view(embeddings, "sinusoidal::add_to"), offset, scale);
  }

  /// Adds PE to a caller-owned [seq, d] buffer: E(r, :) = s * E(r, :) + PE(offset + r).
  void add_to(const seq_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none) const {
    check_width("sinusoidal::add_to", embeddings.extent(1));
    check_range("sinusoidal::add_to", embeddings.extent(0), offset);
    run(nullptr, offset, embeddings.extent(0), embeddings.data(), embeddings.stride(0),
        embeddings.stride(1), true, scale_value(scale));
  }

  /// Adds PE to a caller-owned [batch, seq, d] buffer: every sequence of the batch gets
  /// PE(offset) .. PE(offset + seq - 1). The table is computed once and reused.
  void add_to(const batch_view<Scalar>& embeddings, Index offset = 0,
              embedding_scale scale = embedding_scale::none) const {
    const Index batch = embeddings.extent(0), seq = embeddings.extent(1);
    check_width("sinusoidal::add_to", embeddings.extent(2));
    check_range("sinusoidal::add_to", seq, offset);
    if (batch == 0 || seq == 0) return;  // nothing to add, however large the other extent
    const Scalar s = scale_value(scale);
    if (batch == 1) {
      run(nullptr, offset, seq, embeddings.data(), embeddings.stride(1), embeddings.stride(2), true,
          s);
      return;
    }
    const matrix pe = table(seq, offset);
    // batch, seq: same rounding as the single-sequence path (s * E + Scalar(PE))
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < seq; ++t)
        detail::scale_add_row(embeddings.vector_ptr(b, t), embeddings.stride(2),
                              pe.data() + t * dim(), dim(), s);
  }

 private:
  void run(const Index* positions, Index first, Index rows, Scalar* out, Index row_stride,
           Index col_stride, bool accumulate, Scalar scale) const noexcept {
    kernels::sinusoidal_rows_args<Scalar> a;
    a.inv_freq = inv_freq_.data();
    a.pairs = pairs();
    a.dim = dim();
    a.sin_step = interleaved() ? 2 : 1;
    a.cos_offset = interleaved() ? 1 : pairs();
    a.rows = rows;
    a.first_position = first;
    a.positions = positions;
    a.has_zero_position = config_.padding_idx >= 0;
    a.zero_position = config_.padding_idx;
    a.out = out;
    a.row_stride = row_stride;
    a.col_stride = col_stride;
    a.accumulate = accumulate;
    a.scale = scale;
    kernels::sinusoidal_rows(Backend{}, a);
  }

  Scalar scale_value(embedding_scale scale) const noexcept {
    return detail::sinusoidal_scale<Scalar>(scale, dim());
  }

  void check_width(const char* where, Index cols) const {
    detail::require(cols == dim(), where, "embeddings.cols", cols,
                    "must equal the encoding's dim (" + std::to_string(dim()) + ")");
  }

  static void check_range(const char* where, Index len, Index offset) {
    detail::sinusoidal_check_range(where, len, offset);
  }

  static void check_positions(const char* where, const std::vector<Index>& positions) {
    detail::sinusoidal_check_positions(where, positions);
  }

  template <class Derived>
  static std::vector<Index> to_positions(const Eigen::DenseBase<Derived>& p) {
    return detail::positions_from(p, "sinusoidal::at");
  }

  template <class Derived>
  seq_view<Scalar> checked_view(const Eigen::MatrixBase<Derived>& m, const char* where) const {
    static_assert(std::is_same_v<typename Derived::Scalar, Scalar>,
                  "posenc::sinusoidal: the matrix's scalar type must be the encoding's");
    const auto v = writable_view(m);
    check_width(where, v.extent(1));
    return v;
  }

  sinusoidal_config config_;
  std::vector<double> inv_freq_;
};

}  // namespace posenc
