#pragma once
/// \file
/// The input layer of a transformer in one step (the tutorials' `TokenEmbedding` +
/// `PositionalEncoding` + `Dropout` module; GPT-2's `wte` + `wpe` + `drop`):
///
///     forward   x(r, :)    = s * T(id_r, :) + P(pos_r, :)          s = 1 or sqrt(d)
///               out(r, :)  = m(r, :) * x(r, :)                      m = 0 or 1 / (1 - p)
///     backward  dL/dT(id, :) += sum over r with id_r = id of s * m(r, :) * g(r, :)
///               dL/dW(pos, :) += sum over r with pos_r = pos of m(r, :) * g(r, :)
///
/// T is the [vocab, d] token table (a learned_table used as a lookup by token id), P is a
/// sinusoidal encoding, a learned [max_len, d] table W, or nothing, and m is inverted
/// dropout (training mode only; eval mode is m = 1). Token ids come as [L] (one sequence)
/// or [B, L] (B sequences, one per row); the output is [L, d] or [B * L, d] row-major,
/// row b * L + t for token t of sequence b, whose position is offset + t.

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/random.hpp"
#include "../core/types.hpp"
#include "learned.hpp"
#include "sinusoidal.hpp"

namespace posenc {

/// The positional part of an embedding_layer when there is none (x = s * T(id, :)).
struct no_positions {};

/// Settings of an embedding_layer besides its tables.
struct embedding_options {
  /// x = s * T(id, :) + P: s = 1 (GPT-2, BERT) or sqrt(d) (Vaswani et al., section 3.4).
  embedding_scale scale = embedding_scale::none;
  /// A token id whose row gets no gradient (torch.nn.Embedding's padding_idx); a seeded
  /// table starts with that row zero. -1: none.
  Index padding_idx = -1;
  /// Dropout probability p in [0, 1): each output element is zeroed with probability p in
  /// training mode and the others scaled by 1 / (1 - p). 0: no dropout.
  double dropout = 0.0;
  /// Seed of the dropout generator (posenc::random_generator).
  std::uint64_t dropout_seed = 0;
  /// Standard deviation of a seeded token table (GPT-2, BERT: 0.02).
  double init_stddev = 0.02;
};

/// Token embedding, absolute positional encoding and dropout as one layer. Scalar is
/// float or double. Not thread-safe: forward() draws from the layer's dropout generator
/// and records what backward() needs.
template <class Scalar>
class embedding_layer {
  static_assert(std::is_floating_point_v<Scalar>,
                "posenc::embedding_layer: Scalar must be floating point");

 public:
  using scalar_type = Scalar;  ///< element type of the tables and the output
  /// A [rows, d] row-major matrix.
  using matrix = row_matrix<Scalar>;
  /// The token table's type: a trainable [vocab, d] table with its gradient.
  using table_type = learned_table<Scalar>;
  /// What is added to the scaled token rows: nothing, a sinusoidal encoding of any
  /// preset, or a learned position table (trained along with the tokens).
  using position_encoding = std::variant<no_positions, sinusoidal<Scalar>, learned_table<Scalar>>;

  /// A seeded [vocab, dim] token table: element (r, c) is options.init_stddev * z_k with
  /// z_k the k-th normal() of random_generator(seed), k = r * dim + c (learned_table's
  /// rule), and the padding row, if any, set to zero. Throws posenc::error for vocab < 1,
  /// dim < 1, too many elements, or invalid options or positions (see the other constructor).
  embedding_layer(Index vocab, Index dim, std::uint64_t seed,
                  position_encoding positions = no_positions{},
                  const embedding_options& options = {})
      : embedding_layer(seeded_table(vocab, dim, seed, options), std::move(positions), options) {
    if (options_.padding_idx >= 0) tokens_.mutable_weights().row(options_.padding_idx).setZero();
  }

  /// A layer over an existing token table (a checkpoint's `wte`: loaded values are kept as
  /// they are, the padding row included, as torch's Embedding.from_pretrained does).
  /// Throws posenc::error when the positions' dim differs from the table's, for a
  /// padding_idx outside [-1, vocab), or a dropout outside [0, 1).
  explicit embedding_layer(table_type tokens, position_encoding positions = no_positions{},
                           const embedding_options& options = {})
      : tokens_(std::move(tokens)),
        positions_(std::move(positions)),
        options_(options),
        scale_(detail::sinusoidal_scale<Scalar>(options.scale, tokens_.dim())),
        generator_(options.dropout_seed) {
    const char* where = "embedding_layer";
    detail::require(options.padding_idx >= -1 && options.padding_idx < vocab(), where,
                    "options.padding_idx", options.padding_idx,
                    "must be -1 (none) or in [0, vocab) with vocab = " + std::to_string(vocab()));
    detail::require(std::isfinite(options.dropout) && options.dropout >= 0 && options.dropout < 1,
                    where, "options.dropout", options.dropout, "must be in [0, 1)");
    const Index pdim = position_dim();
    detail::require(pdim < 0 || pdim == dim(), where, "positions.dim", pdim,
                    "must equal the token table's dim (" + std::to_string(dim()) + ")");
    keep_scale_ = static_cast<Scalar>(1.0 / (1.0 - options.dropout));  // p < 1: at most 2^53
  }

  /// Number of token ids, the token table's rows.
  Index vocab() const noexcept { return tokens_.max_len(); }
  /// d, the width of every output row.
  Index dim() const noexcept { return tokens_.dim(); }
  /// The settings given at construction.
  const embedding_options& options() const noexcept { return options_; }
  /// The token table T, its gradient dL/dT, and its SGD step.
  const table_type& token_table() const noexcept { return tokens_; }
  table_type& token_table() noexcept { return tokens_; }
  /// The positional encoding.
  const position_encoding& positions() const noexcept { return positions_; }
  /// The learned position table W, or nullptr when the positions are not learned.
  learned_table<Scalar>* learned_positions() noexcept {
    return std::get_if<learned_table<Scalar>>(&positions_);
  }
  const learned_table<Scalar>* learned_positions() const noexcept {
    return std::get_if<learned_table<Scalar>>(&positions_);
  }

  /// Training mode (dropout applied; the default, as for a torch module) or eval mode
  /// (dropout is the identity and draws nothing).
  void train(bool on = true) noexcept { training_ = on; }
  /// Eval mode: train(false).
  void eval() noexcept { training_ = false; }
  /// Whether forward() applies dropout.
  bool training() const noexcept { return training_; }
  /// Restarts the dropout generator: the same seed and the same sequence of forward()
  /// calls give the same masks.
  void seed_dropout(std::uint64_t seed) noexcept { generator_ = random_generator(seed); }

  /// Embeds one sequence of token ids ([L]) at positions offset .. offset + L - 1: [L, d].
  /// In training mode with p > 0 the mask takes the generator's next L * d uniform()
  /// values u_k, k = r * d + c, and element k is dropped when u_k < p. Throws
  /// posenc::error naming the first id outside [0, vocab) ("token_ids[3]"), or positions
  /// outside the encoding (past a learned table, beyond 2^53 for a sinusoidal one).
  matrix forward(const std::vector<Index>& token_ids, Index offset = 0) {
    return run(token_ids, 1, static_cast<Index>(token_ids.size()), false, offset);
  }
  /// Embeds integer token ids held by Eigen: a vector type ([L]; VectorXi, RowVectorXi,
  /// a Map of one) is one sequence, any other matrix is [B, L], one sequence per row, and
  /// gives [B * L, d] with row b * L + t for ids(b, t); the mask's k runs over those rows.
  template <class Derived>
  matrix forward(const Eigen::DenseBase<Derived>& token_ids, Index offset = 0) {
    static_assert(std::is_integral_v<typename Derived::Scalar>,
                  "posenc::embedding_layer: token ids must be integers");
    const bool batched = !Derived::IsVectorAtCompileTime;
    const Index batch = batched ? token_ids.rows() : 1;
    const Index len = batched ? token_ids.cols() : token_ids.size();
    std::vector<Index> ids(static_cast<std::size_t>(batch * len));
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < len; ++t)
        ids[static_cast<std::size_t>(b * len + t)] = static_cast<Index>(
            batched ? token_ids.derived().coeff(b, t) : token_ids.derived().coeff(t));
    return run(ids, batch, len, batched, offset);
  }

  /// Accumulates dL/dT (and dL/dW for learned positions) from dL/d(out), grad_output
  /// [rows, d], of the most recent forward(): through its dropout mask (replayed from
  /// the generator state it started from) and the scale s; the padding row gets nothing.
  /// Throws posenc::error before any forward() or when grad_output's shape differs.
  template <class Derived>
  void backward(const Eigen::MatrixBase<Derived>& grad_output) {
    const char* where = "embedding_layer::backward";
    detail::require(last_.recorded, where, "forward calls", 0, "backward needs a forward first");
    const Index rows = last_.batch * last_.len;
    detail::require(grad_output.rows() == rows, where, "grad_output.rows", grad_output.rows(),
                    "must equal the rows of the last forward (" + std::to_string(rows) + ")");
    detail::require(grad_output.cols() == dim(), where, "grad_output.cols", grad_output.cols(),
                    "must equal dim (" + std::to_string(dim()) + ")");
    matrix g = grad_output.template cast<Scalar>();
    if (last_.dropped) apply_dropout(g, last_.generator);
    if (auto* w = learned_positions())
      for (Index b = 0; b < last_.batch; ++b)
        w->backward(g.middleRows(b * last_.len, last_.len), last_.offset);
    g *= scale_;
    if (options_.padding_idx >= 0)
      for (Index r = 0; r < rows; ++r)
        if (last_.ids[static_cast<std::size_t>(r)] == options_.padding_idx) g.row(r).setZero();
    tokens_.backward(g, last_.ids);
  }

  /// Sets dL/dT and dL/dW to zero.
  void zero_grad() noexcept {
    tokens_.zero_grad();
    if (auto* w = learned_positions()) w->zero_grad();
  }
  /// Plain SGD on T and W (see learned_table::sgd_step); the padding row, whose gradient
  /// is zero, stays as it is.
  void sgd_step(double learning_rate) {
    tokens_.sgd_step(learning_rate);
    if (auto* w = learned_positions()) w->sgd_step(learning_rate);
  }

 private:
  // What backward() needs of the last forward(); the ids double as learned_table positions.
  struct record {
    bool recorded = false;
    std::vector<Index> ids;
    Index batch = 0, len = 0, offset = 0;
    bool dropped = false;
    random_generator generator{0};  // the state the mask was drawn from
  };

  static table_type seeded_table(Index vocab, Index dim, std::uint64_t seed,
                                 const embedding_options& options) {
    detail::require(vocab >= 1, "embedding_layer", "vocab", vocab, "must be >= 1");
    detail::require(dim >= 1, "embedding_layer", "dim", dim, "must be >= 1");
    return table_type(vocab, dim, seed, options.init_stddev);
  }

  // The positions' width, or -1 when there are none.
  Index position_dim() const noexcept {
    if (const auto* s = std::get_if<sinusoidal<Scalar>>(&positions_)) return s->dim();
    if (const auto* w = learned_positions()) return w->dim();
    return -1;
  }

  // P(offset + t, :) for t < len: [len, d], or an empty matrix without positions.
  matrix position_rows(Index len, Index offset) const {
    const char* where = "embedding_layer::forward";
    if (const auto* s = std::get_if<sinusoidal<Scalar>>(&positions_)) return s->table(len, offset);
    if (const auto* w = learned_positions()) {
      detail::require(offset >= 0 && offset <= w->max_len(), where, "offset", offset,
                      "must be in [0, max_len] with max_len = " + std::to_string(w->max_len()));
      detail::require(len <= w->max_len() - offset, where, "offset + len", offset + len,
                      "must be <= max_len = " + std::to_string(w->max_len()) +
                          " (positions past the learned table; no clamping)");
      return w->table(len, offset);
    }
    return matrix();
  }

  // out(k) = 0 when u_k < p, else out(k) / (1 - p), u_k the k-th uniform() of `gen`.
  void apply_dropout(matrix& out, random_generator& gen) const noexcept {
    Scalar* y = out.data();
    for (Index k = 0; k < out.size(); ++k)
      y[k] = gen.uniform() < options_.dropout ? Scalar(0) : y[k] * keep_scale_;
  }

  matrix run(std::vector<Index> ids, Index batch, Index len, bool batched, Index offset) {
    const char* where = "embedding_layer::forward";
    if (len > 0) detail::check_elements(where, "token_ids.size", batch * len, dim());
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < len; ++t) {
        const Index id = ids[static_cast<std::size_t>(b * len + t)];
        if (id >= 0 && id < vocab()) continue;
        const std::string name =
            batched ? "token_ids[" + std::to_string(b) + ", " + std::to_string(t) + "]"
                    : "token_ids[" + std::to_string(t) + "]";
        detail::fail(where, name, id,
                     "must be in [0, vocab) with vocab = " + std::to_string(vocab()));
      }
    const matrix pe = position_rows(len, offset);
    matrix out(batch * len, dim());
    const matrix& table = tokens_.weights();
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < len; ++t) {
        const Index r = b * len + t;
        const Index id = ids[static_cast<std::size_t>(r)];
        if (pe.size() == 0)
          out.row(r) = scale_ * table.row(id);
        else
          out.row(r) = scale_ * table.row(id) + pe.row(t);
      }
    last_.recorded = true;
    last_.ids = std::move(ids);
    last_.batch = batch;
    last_.len = len;
    last_.offset = offset;
    last_.dropped = training_ && options_.dropout > 0;
    last_.generator = generator_;
    if (last_.dropped) apply_dropout(out, generator_);
    return out;
  }

  table_type tokens_;
  position_encoding positions_;
  embedding_options options_;
  Scalar scale_;           // s, rounded once from double
  Scalar keep_scale_ = 1;  // 1 / (1 - p), rounded once from double
  random_generator generator_;
  bool training_ = true;
  record last_;
};

}  // namespace posenc
