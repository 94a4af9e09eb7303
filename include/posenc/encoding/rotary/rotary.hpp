#pragma once
/// \file
/// Applying rotary position embeddings (RoPE; Su et al. 2021, "RoFormer: Enhanced Transformer
/// with Rotary Position Embedding") to queries and keys.
///
/// A token at position n has each rotation pair (x_a, x_b), i < r/2, turned by n w_i:
///
///     y_a = A (x_a cos(n w_i) - x_b sin(n w_i))
///     y_b = A (x_b cos(n w_i) + x_a sin(n w_i))      A = attention_factor (1 unless scaled)
///
/// so that <R(m) q, R(n) k> depends on m - n only (times A^2). The pairs are set by the
/// pairing (frequencies.hpp): half = (i, i + r/2), interleaved = (2i, 2i + 1). Dims r..D-1
/// (partial rotary) pass through bit for bit. xPos (when the frequencies carry it) also
/// scales the pairs of queries by zeta_i^(n/s) and of keys by zeta_i^(-n/s).
///
/// Shapes (logical; any strides through posenc::strided_view):
///
///     one head      [L, D]         an Eigen matrix/block/map, one token per row
///     multi-head    [L, H, D]      strided_view<T, 3>
///     batched       [B, L, H, D]   heads_view<T>: view_bshd(...), or view_bhsd(...) for a
///                                  [B, H, L, D] buffer
///
/// Storage: float, double, Eigen::half or Eigen::bfloat16; the 16-bit types compute in float
/// (real_type) and round each result once (see rotary_embedding).
///
/// Positions: a start offset P (token l of every sequence is at P + l: prefill, KV-cache
/// decoding, a shard of a long sequence), or per-token position ids (L of them shared by
/// the batch, or B*L, batch-major: packed sequences, arbitrary positions).
///
/// Example (Llama-2 7B, q [L, 32, 128] and k [L, 32, 128] rows for positions 7..7+L-1):
///
///     posenc::rotary_embedding<float> rope(128);            // r = D = 128, base 1e4, half
///     rope.apply_qk(posenc::view_shd(q, L, 32, 128), posenc::view_shd(k, L, 32, 128), 7);

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../backend/rotary.hpp"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/limits.hpp"
#include "../../core/types.hpp"
#include "../../core/view.hpp"
#include "cache.hpp"
#include "frequencies.hpp"
#include "scaling.hpp"

namespace posenc {

/// Where the cos/sin values come from; both give bit-identical results.
enum class rope_cache_mode {
  cached,     ///< precomputed rows, grown on demand to the largest position seen
  on_the_fly  ///< computed per token into scratch (no memory proportional to positions)
};

/// How a rotary_embedding computes and stores its angles.
struct rope_options {
  rope_precision precision = rope_precision::exact;  ///< see cache.hpp
  rope_cache_mode cache = rope_cache_mode::cached;
  Index max_len = 0;  ///< positions to precompute up front (cached mode; at most cache_limit)
  /// The cache grows on demand up to this many positions (default 262144: 128 MiB for
  /// float and r = 128); rows of positions beyond it are computed on the fly, with
  /// identical results, so a far-away position id never allocates a huge table.
  Index cache_limit = Index(1) << 18;
};

/// The positions of the tokens of one apply call: a start offset, or position ids.
///
/// Converts implicitly from an Index (the offset) and from a std::vector<Index> (the ids),
/// so `rope.apply(x, 5)` and `rope.apply(x, ids)` both read naturally. Holds a pointer to
/// the ids: they must outlive the call (a temporary vector in the call is fine).
class rope_positions {
 public:
  /// Positions offset, offset + 1, ... for tokens 0, 1, ... of every sequence.
  rope_positions(Index offset = 0) noexcept : offset_(offset) {}  // NOLINT: implicit
  /// One position per token: L ids shared by every sequence of the batch, or B*L
  /// (batch-major, like Hugging Face position_ids [B, L]).
  rope_positions(const std::vector<Index>& ids) noexcept  // NOLINT: implicit
      : ids_(ids.data()), count_(static_cast<Index>(ids.size())), has_ids_(true) {}
  /// `count` position ids at `ids` (same rules as the vector form).
  rope_positions(const Index* ids, Index count) noexcept
      : ids_(ids), count_(count), has_ids_(true) {}

  /// `count` position ids in device memory, for the CUDA backend (rotary_embedding<Scalar,
  /// backend::cuda>), which checks them on the device; CPU backends refuse them.
  static rope_positions on_device(const Index* ids, Index count) noexcept {
    rope_positions p(ids, count);
    p.device_ = true;
    return p;
  }

  bool has_ids() const noexcept { return has_ids_; }
  /// True when the ids are in device memory (on_device()).
  bool on_device() const noexcept { return device_; }
  Index offset() const noexcept { return offset_; }
  const Index* ids() const noexcept { return ids_; }
  Index count() const noexcept { return count_; }

 private:
  Index offset_ = 0;
  const Index* ids_ = nullptr;
  Index count_ = 0;
  bool has_ids_ = false;
  bool device_ = false;
};

namespace detail {

/// Tokens whose cos/sin rows a RoPE call computes together (rows the cache does not hold)
/// before rotating them, q's tokens of the block and then k's. 64 rows read the whole
/// fine angle table of angle addition in one sweep (row f of position n is f = n mod 64),
/// which a memory-bound call has evicted since the last block; 16 and 4 rows were 2-10 %
/// slower from memory (docs/benchmarks-history.md, issue 27). 64 rows of 128 dims: 32 KiB
/// of floats, 64 KiB with the keys' rows of xPos.
inline constexpr Index rope_row_block = 64;

/// One tensor of a RoPE call: its input, its output (the input itself when in place) and
/// whether it holds queries or keys.
template <class Scalar>
struct rope_job {
  heads_view<const Scalar> in;
  heads_view<Scalar> out;
  rope_role role;
};

/// Validates the jobs of a RoPE call (head dim, shapes, in-place strides, overlaps) and its
/// positions, with the messages every backend gives; returns the largest position (-1 when
/// there is none). Host ids are checked here; device ids (on_device()) only for their
/// count, the CUDA kernel checks their values, and the result is then INT64_MAX
/// ("unknown") unless there are none.
template <class Scalar>
Index validate_rope_jobs(Index head_dim, const rope_job<Scalar>* jobs, int count,
                         const rope_positions& positions, bool device_ids_ok, const char* where) {
  static const char* const axes[4] = {"batch", "seq", "heads", "dim"};
  const Index batch = jobs[0].in.extent(0), seq = jobs[0].in.extent(1);
  const auto in_place = [](const rope_job<Scalar>& jb) {
    return static_cast<const Scalar*>(jb.out.data()) == jb.in.data();
  };
  for (int j = 0; j < count; ++j) {
    const rope_job<Scalar>& jb = jobs[j];
    const std::string who = count == 1 ? "" : (jb.role == rope_role::query ? "q." : "k.");
    require(jb.in.extent(3) == head_dim, where, who + "dim", jb.in.extent(3),
            "must equal head_dim = " + std::to_string(head_dim));
    for (int a = 0; a < 4; ++a)
      require(jb.out.extent(a) == jb.in.extent(a), where, who + "out." + axes[a], jb.out.extent(a),
              "must equal the input's " + std::string(axes[a]) + " = " +
                  std::to_string(jb.in.extent(a)));
    if (in_place(jb))
      for (int a = 0; a < 4; ++a)
        require(jb.out.stride(a) == jb.in.stride(a) || jb.in.extent(a) <= 1, where,
                who + "out.stride[" + std::to_string(a) + "]", jb.out.stride(a),
                "an output at the input's address must have the input's strides");
    if (j > 0) {
      require(jb.in.extent(0) == batch, where, who + "batch", jb.in.extent(0),
              "must equal q.batch = " + std::to_string(batch));
      require(jb.in.extent(1) == seq, where, who + "seq", jb.in.extent(1),
              "must equal q.seq = " + std::to_string(seq));
    }
  }
  // an output is its own input (in place) or shares no element with any input or output
  for (int j = 0; j < count; ++j) {
    const std::string out = (count == 1 ? "" : j == 0 ? "q." : "k.") + std::string("out");
    for (int i = 0; i < count; ++i) {
      const std::string in = count == 1 ? "input" : i == 0 ? "q" : "k";
      if (i != j || !in_place(jobs[j]))
        check_no_overlap(where, out.c_str(), jobs[j].out, in.c_str(), jobs[i].in);
      if (i < j) check_no_overlap(where, out.c_str(), jobs[j].out, "q.out", jobs[i].out);
    }
  }
  if (!positions.has_ids()) {
    const Index p = positions.offset();
    require(p >= 0, where, "offset", p, "positions must be >= 0");
    require(seq == 0 || p <= std::numeric_limits<Index>::max() - (seq - 1), where, "offset", p,
            "offset + seq - 1 overflows");
    return seq == 0 ? -1 : p + (seq - 1);
  }
  const Index n = positions.count();
  // n / seq rather than batch * seq: extents of stride-0 views may be huge
  require(n == seq || (seq > 0 && n % seq == 0 && n / seq == batch), where, "position_ids.size()",
          n,
          "must equal seq = " + std::to_string(seq) +
              " or batch * seq (batch = " + std::to_string(batch) + ")");
  require(n == 0 || positions.ids() != nullptr, where, "position_ids", "nullptr",
          "non-empty ids need memory");
  if (positions.on_device()) {
    require(device_ids_ok, where, "position_ids", "device memory",
            "a CPU backend reads host ids (device ids need rotary_embedding<Scalar, "
            "backend::cuda>)");
    return n == 0 || batch == 0 ? -1 : std::numeric_limits<Index>::max();
  }
  Index max_pos = -1;
  for (Index i = 0; i < n; ++i) {
    const Index p = positions.ids()[i];
    if (p < 0) fail(where, "position_ids[" + std::to_string(i) + "]", p, "must be >= 0");
    if (p > max_pos) max_pos = p;
  }
  return max_pos;
}

}  // namespace detail

/// Rotary position embedding of queries and keys: configuration, cos/sin values and the
/// apply entry points. Scalar: the storage type, float, double, Eigen::half or
/// Eigen::bfloat16; Backend: the kernel's tag (the scalar kernel serves any tag without its
/// own).
///
/// Storage and arithmetic: float and double compute in themselves; Eigen::half and
/// Eigen::bfloat16 store the activations in 16 bits and compute in float (real_type): the
/// cos/sin cache is float, each element is widened to float, rotated exactly as a
/// rotary_embedding<float, Backend> rotates float(x), and rounded once to Scalar (round to
/// nearest even, as Eigen's conversions). The partial-rotary tail is copied bit for bit.
///
/// Entry points validate everything (shapes, head dim, positions) and throw posenc::error
/// naming the parameter; the kernel they call never throws. An output is either the input
/// itself (in place) or a buffer that shares no element with it.
///
/// Not thread-safe in cached mode (apply may grow the cache); use one object per thread,
/// or on_the_fly mode, or reserve() up front and then only positions below it.
template <class Scalar, class Backend = default_backend>
class rotary_embedding {
  static_assert(is_storage_v<Scalar>,
                "posenc::rotary_embedding: Scalar must be float, double, Eigen::half or "
                "Eigen::bfloat16");
  // the CUDA specialisation lives in encoding/cuda/rotary.cuh, for nvcc translation units
  static_assert(!std::is_same_v<Backend, backend::cuda>,
                "posenc::rotary_embedding<Scalar, backend::cuda>: include <posenc/cuda.cuh> in a "
                "translation unit compiled by nvcc (the CUDA backend is not available to host-only "
                "code)");

 public:
  /// Row-major [rows, cols] matrix of Scalar.
  using matrix = row_matrix<Scalar>;
  /// The arithmetic type, and the type of the cos/sin values: Scalar for float and double,
  /// float for Eigen::half and Eigen::bfloat16.
  using real_type = real_t<Scalar>;

  /// Unscaled RoPE: head dim D, rotary dim r (-1 = D; otherwise even, > 0 and <= D),
  /// inv_freq_i = base^(-2i/r).
  /// Throws posenc::error naming `head_dim`, `rotary_dim` or `base`.
  explicit rotary_embedding(Index head_dim, Index rotary_dim = -1, double base = 10000.0,
                            rope_pairing pairing = rope_pairing::half, rope_options options = {})
      : rotary_embedding(head_dim, make_plain(head_dim, rotary_dim, base), pairing, options) {}

  /// Any effective frequencies (e.g. from rope_config::frequencies): r = 2 inv_freq.size()
  /// must not exceed `head_dim`.
  rotary_embedding(Index head_dim, rope_frequencies freqs, rope_pairing pairing,
                   rope_options options = {})
      : head_dim_(head_dim), pairing_(pairing), options_(options) {
    detail::require(head_dim > 0, "rotary_embedding", "head_dim", head_dim, "must be > 0");
    detail::check_dim_limit("rotary_embedding", "head_dim", head_dim);
    detail::check_rope_frequencies(freqs, "rotary_embedding");
    const Index r = freqs.rotary_dim();
    detail::require(r <= head_dim, "rotary_embedding", "rotary_dim", r,
                    "must be <= head_dim = " + std::to_string(head_dim));
    detail::require(pairing == rope_pairing::half || pairing == rope_pairing::interleaved,
                    "rotary_embedding", "pairing", static_cast<int>(pairing), "unknown pairing");
    detail::require(options.max_len >= 0, "rotary_embedding", "max_len", options.max_len,
                    "must be >= 0");
    detail::require(options.cache_limit >= 0, "rotary_embedding", "cache_limit",
                    options.cache_limit, "must be >= 0");
    // The cache holds at most limits::max_elements values: cache_limit is lowered to that
    // (rows past it are computed on the fly, the same values, as for any position past
    // cache_limit), and an explicit max_len that would still exceed it is an error.
    const Index per_row = std::max<Index>(1, (freqs.has_xpos() ? 2 : 1) * r);
    if (options.cache == rope_cache_mode::cached)  // max_len rows are stored up front
      detail::check_elements("rotary_embedding",
                             options.max_len <= options.cache_limit ? "max_len" : "cache_limit",
                             std::min(options.max_len, options.cache_limit), per_row);
    options_.cache_limit = std::min(options.cache_limit, limits::max_elements / per_row);
    // max_len is capped by cache_limit like every other growth of the cache
    cache_ = rope_cache<real_type, Backend>(std::move(freqs), options.precision,
                                            options.cache == rope_cache_mode::cached
                                                ? std::min(options.max_len, options_.cache_limit)
                                                : 0);
  }

  /// From a configuration (any scaling): its frequencies for a sequence length `seq_len`
  /// (dynamic NTK and LongRoPE depend on it), its head dim, rotary dim and pairing.
  rotary_embedding(const rope_config& config, Index seq_len, rope_options options = {})
      : rotary_embedding(config.head_dim, config.frequencies(seq_len), config.pairing, options) {}

  /// With the inverse frequencies a framework already holds (e.g. a Hugging Face model's
  /// float32 `inv_freq` buffer): `inv_freq` is a std::vector or Eigen vector of float or
  /// double, rotary_dim / 2 values (rotary_dim -1 = head_dim). With
  /// `options.precision = rope_precision::float32_reference` a float32 buffer is used bit
  /// for bit and the rotation is the framework's float32 computation up to the rounding of
  /// cos/sin (see rope_frequencies::from_inv_freq and docs/rotary.md). Throws posenc::error
  /// naming `head_dim`, `rotary_dim`, `inv_freq.size()` (which must equal rotary_dim / 2) or
  /// a non-finite `inv_freq[i]`.
  template <class Values>
  static rotary_embedding from_inv_freq(Index head_dim, const Values& inv_freq,
                                        rope_pairing pairing = rope_pairing::half,
                                        rope_options options = {}, Index rotary_dim = -1) {
    detail::require(head_dim > 0, "rotary_embedding::from_inv_freq", "head_dim", head_dim,
                    "must be > 0");
    const Index r = rotary_dim == -1 ? head_dim : rotary_dim;
    return rotary_embedding(head_dim, rope_frequencies::from_inv_freq(inv_freq, r), pairing,
                            options);
  }

  Index head_dim() const noexcept { return head_dim_; }
  Index rotary_dim() const noexcept { return cache_.frequencies().rotary_dim(); }
  rope_pairing pairing() const noexcept { return pairing_; }
  const rope_options& options() const noexcept { return options_; }
  const rope_frequencies& frequencies() const noexcept { return cache_.frequencies(); }
  /// The cos/sin cache (empty in on_the_fly mode); of real_type values (float for 16-bit
  /// storage).
  const rope_cache<real_type, Backend>& cache() const noexcept { return cache_; }

  /// Precomputes cos/sin for positions [0, min(max_len, cache_limit)) (cached mode; no-op
  /// on the fly): rows past cache_limit are never stored (they are computed on the fly,
  /// with identical results). Throws posenc::error naming `max_len` when it is < 0.
  void reserve(Index max_len) {
    detail::require(max_len >= 0, "rotary_embedding::reserve", "max_len", max_len, "must be >= 0");
    if (options_.cache == rope_cache_mode::cached)
      cache_.reserve(std::min(max_len, options_.cache_limit));
  }

  // ---- one head [L, D] (Eigen) -------------------------------------------------------

  /// In place on one head: x [L, D], a writable matrix, block, map or Ref (either storage
  /// order), rows at `positions`.
  template <class Derived>
  void apply(const Eigen::MatrixBase<Derived>& x, rope_positions positions = {},
             rope_role role = rope_role::query) {
    const auto v = one_head(x);
    run_single(v, v, positions, role, false, "rotary_embedding::apply");
  }

  /// Out of place on one head: out [L, D] = rotation of in [L, D] (any expression).
  template <class DerivedIn, class DerivedOut>
  void apply(const Eigen::MatrixBase<DerivedIn>& in, const Eigen::MatrixBase<DerivedOut>& out,
             rope_positions positions = {}, rope_role role = rope_role::query) {
    check_scalar<DerivedIn>();
    const matrix_input<DerivedIn> vin(in);
    run_single(as_heads(vin.view()), one_head(out), positions, role, false,
               "rotary_embedding::apply");
  }

  /// Returns the rotation of one head in [L, D] as a new row-major matrix.
  template <class Derived>
  matrix rotated(const Eigen::MatrixBase<Derived>& in, rope_positions positions = {},
                 rope_role role = rope_role::query) {
    matrix out(in.rows(), in.cols());
    apply(in, out, positions, role);
    return out;
  }

  /// Rotates by -angle in place: undoes apply() exactly when the attention factor is 1 and
  /// there is no xPos (the cos/sin scale is not divided out, so otherwise the result is the
  /// input times the scale squared).
  template <class Derived>
  void invert(const Eigen::MatrixBase<Derived>& x, rope_positions positions = {},
              rope_role role = rope_role::query) {
    const auto v = one_head(x);
    run_single(v, v, positions, role, true, "rotary_embedding::invert");
  }

  // ---- multi-head [L, H, D] ------------------------------------------------------------

  /// In place on [L, H, D].
  void apply(const strided_view<Scalar, 3>& x, rope_positions positions = {},
             rope_role role = rope_role::query) {
    run_single(as_heads(x), as_heads(x), positions, role, false, "rotary_embedding::apply");
  }
  /// Out of place on [L, H, D].
  void apply(const strided_view<const Scalar, 3>& in, const strided_view<Scalar, 3>& out,
             rope_positions positions = {}, rope_role role = rope_role::query) {
    run_single(as_heads(in), as_heads(out), positions, role, false, "rotary_embedding::apply");
  }

  // ---- batched [B, L, H, D] ------------------------------------------------------------

  /// In place on [B, L, H, D] (view_bshd, or view_bhsd for [B, H, L, D] memory).
  void apply(const heads_view<Scalar>& x, rope_positions positions = {},
             rope_role role = rope_role::query) {
    run_single(x, x, positions, role, false, "rotary_embedding::apply");
  }
  /// Out of place on [B, L, H, D].
  void apply(const heads_view<const Scalar>& in, const heads_view<Scalar>& out,
             rope_positions positions = {}, rope_role role = rope_role::query) {
    run_single(in, out, positions, role, false, "rotary_embedding::apply");
  }
  /// Undoes apply() in place on [B, L, H, D] (see the one-head invert()).
  void invert(const heads_view<Scalar>& x, rope_positions positions = {},
              rope_role role = rope_role::query) {
    run_single(x, x, positions, role, true, "rotary_embedding::invert");
  }

  // ---- queries and keys together (GQA: any head counts) ---------------------------------

  /// In place on q [B, L, Hq, D] and k [B, L, Hk, D] (Hq and Hk may differ): cos/sin are
  /// computed once per token for both.
  void apply_qk(const heads_view<Scalar>& q, const heads_view<Scalar>& k,
                rope_positions positions = {}) {
    const job jobs[2] = {{q, q, rope_role::query}, {k, k, rope_role::key}};
    run(jobs, 2, positions, false, "rotary_embedding::apply_qk");
  }
  /// Out of place on q and k [B, L, H*, D].
  void apply_qk(const heads_view<const Scalar>& q_in, const heads_view<Scalar>& q_out,
                const heads_view<const Scalar>& k_in, const heads_view<Scalar>& k_out,
                rope_positions positions = {}) {
    const job jobs[2] = {{q_in, q_out, rope_role::query}, {k_in, k_out, rope_role::key}};
    run(jobs, 2, positions, false, "rotary_embedding::apply_qk");
  }
  /// In place on q [L, Hq, D] and k [L, Hk, D].
  void apply_qk(const strided_view<Scalar, 3>& q, const strided_view<Scalar, 3>& k,
                rope_positions positions = {}) {
    apply_qk(as_heads(q), as_heads(k), positions);
  }

 private:
  using job = detail::rope_job<Scalar>;

  static rope_frequencies make_plain(Index head_dim, Index rotary_dim, double base) {
    detail::require(head_dim > 0, "rotary_embedding", "head_dim", head_dim, "must be > 0");
    detail::check_dim_limit("rotary_embedding", "head_dim", head_dim);
    // only -1 means "the head dim": any other negative is a mistake, not full rotary
    const Index r = rotary_dim == -1 ? head_dim : rotary_dim;
    detail::require(r > 0 && r % 2 == 0, "rotary_embedding", "rotary_dim", r,
                    "must be even and > 0");
    detail::require(r <= head_dim, "rotary_embedding", "rotary_dim", r,
                    "must be <= head_dim = " + std::to_string(head_dim));
    detail::require(std::isfinite(base) && base > 1.0, "rotary_embedding", "base", base,
                    "must be finite and > 1");
    return plain_rope_frequencies(r, base);
  }

  template <class Derived>
  static constexpr void check_scalar() {
    static_assert(std::is_same<typename Derived::Scalar, Scalar>::value,
                  "posenc::rotary_embedding: the matrix's Scalar must be the embedding's");
  }

  /// A writable Eigen [L, D] as [1, L, 1, D].
  template <class Derived>
  static heads_view<Scalar> one_head(const Eigen::MatrixBase<Derived>& x) {
    check_scalar<Derived>();
    return as_heads(writable_view(x));
  }

  void run_single(const heads_view<const Scalar>& in, const heads_view<Scalar>& out,
                  const rope_positions& positions, rope_role role, bool inverse,
                  const char* where) {
    const job jobs[1] = {{in, out, role}};
    run(jobs, 1, positions, inverse, where);
  }

  void run(const job* jobs, int count, const rope_positions& positions, bool inverse,
           const char* where) {
    const Index max_pos =
        detail::validate_rope_jobs(head_dim_, jobs, count, positions, false, where);
    const Index batch = jobs[0].in.extent(0), seq = jobs[0].in.extent(1);
    Index heads = 0;  // of all jobs: with none there is nothing to rotate, whatever seq says
    for (int j = 0; j < count; ++j) heads += jobs[j].in.extent(2);
    if (max_pos < 0 || batch == 0 || seq == 0 || heads == 0) return;

    const bool cached = options_.cache == rope_cache_mode::cached;
    if (cached && max_pos >= cache_.size() && cache_.size() < options_.cache_limit) {
      // grow geometrically (amortised O(1) rows per decoded token), never past the limit
      const Index doubled =
          cache_.size() > options_.cache_limit / 2 ? options_.cache_limit : 2 * cache_.size();
      // max_pos may be INT64_MAX: cap it below the limit before adding 1
      cache_.reserve(std::min(options_.cache_limit,
                              std::max(std::min(max_pos, options_.cache_limit - 1) + 1, doubled)));
    }
    const rope_frequencies& f = cache_.frequencies();
    const Index pairs = cache_.pairs();
    const bool xpos = f.has_xpos();
    bool any_key = false;
    for (int j = 0; j < count; ++j) any_key = any_key || jobs[j].role == rope_role::key;
    // Rows the cache does not hold come from the cache's own writer (so they equal cached
    // rows), a block of tokens' rows before those tokens are rotated: one row computed
    // between every two tokens' rotations cost ten times its own time when q and k stream
    // from memory (docs/benchmarks-history.md, issue 27).
    constexpr Index block = detail::rope_row_block;
    const std::size_t row_values = static_cast<std::size_t>(4 * pairs);  // cos/sin, q and k
    std::vector<real_type> scratch;
    std::optional<detail::rope_row_writer<Backend>> writer;
    struct token_rows {
      const real_type *cq, *sq, *ck, *sk;
    } rows[block];

    kernels::rope_token<Scalar, real_type> t;
    t.head_dim = head_dim_;
    t.rotary_dim = 2 * pairs;
    t.pair_step = pairing_ == rope_pairing::half ? 1 : 2;
    t.pair_offset = pairing_ == rope_pairing::half ? pairs : 1;
    t.inverse = inverse;
    double values = 0;  // of Q and K
    for (int j = 0; j < count; ++j)
      values += static_cast<double>(batch) * static_cast<double>(seq) *
                static_cast<double>(jobs[j].in.extent(2)) * static_cast<double>(head_dim_);
    t.streaming = kernels::rope_streams<Scalar>(values);
    const bool shared_ids = positions.has_ids() && positions.count() == seq;

    // batch, then tokens: one cos/sin row per token, reused by every head of q and k
    for (Index b = 0; b < batch; ++b) {
      for (Index l0 = 0; l0 < seq; l0 += block) {
        const Index tokens = std::min(block, seq - l0);
        for (Index i = 0; i < tokens; ++i) {
          const Index l = l0 + i;
          const Index n = !positions.has_ids() ? positions.offset() + l
                          : shared_ids         ? positions.ids()[l]
                                               : positions.ids()[b * seq + l];
          token_rows& r = rows[i];
          if (cached && n < cache_.size()) {
            r = {cache_.cos(n, rope_role::query), cache_.sin(n, rope_role::query),
                 cache_.cos(n, rope_role::key), cache_.sin(n, rope_role::key)};
            continue;
          }
          if (!writer) {
            writer.emplace(cache_.writer());
            scratch.resize(static_cast<std::size_t>(block) * row_values);
          }
          real_type* s = scratch.data() + static_cast<std::size_t>(i) * row_values;
          writer->row(n, rope_role::query, s, s + pairs);
          r = {s, s + pairs, s, s + pairs};
          if (xpos && any_key) {
            writer->row(n, rope_role::key, s + 2 * pairs, s + 3 * pairs);
            r.ck = s + 2 * pairs;
            r.sk = s + 3 * pairs;
          }
        }
        for (int j = 0; j < count; ++j) {
          const job& jb = jobs[j];
          for (Index i = 0; i < tokens; ++i) {
            const Index l = l0 + i;
            t.in = jb.in.data() + b * jb.in.stride(0) + l * jb.in.stride(1);
            t.in_head_stride = jb.in.stride(2);
            t.in_dim_stride = jb.in.stride(3);
            t.out = jb.out.data() + b * jb.out.stride(0) + l * jb.out.stride(1);
            t.out_head_stride = jb.out.stride(2);
            t.out_dim_stride = jb.out.stride(3);
            t.heads = jb.in.extent(2);
            const bool key = jb.role == rope_role::key;
            t.cos = key ? rows[i].ck : rows[i].cq;
            t.sin = key ? rows[i].sk : rows[i].sq;
            kernels::rope_rotate(Backend{}, t);
          }
        }
      }
    }
  }

  Index head_dim_;
  rope_pairing pairing_;
  rope_options options_;
  rope_cache<real_type, Backend> cache_;
};

}  // namespace posenc
