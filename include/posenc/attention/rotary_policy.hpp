#pragma once
/// \file
/// Rotary position embeddings inside the attention kernel: a position policy that rotates
/// every query row at its absolute position q_offset + i and every key row at position j
/// (Su et al. 2021, RoFormer), so RoPE attention is one call:
///
///     logit_ij = scale · (R(q_offset + i) q_i) · (R(j) k_j)
///
/// Any rotary configuration works (pairing, partial rotary, every scaling: the
/// rotary_embedding decides; its attention factor and xPos scales apply as usual).
/// The rotation runs in double on the kernel's working copies; the inputs are untouched.
/// Backward: the transposed rotation (rotary_embedding::invert) maps dq', dk' to dq, dk.
///
///     posenc::rotary_policy rope(128);                          // plain RoPE, head dim 128
///     posenc::rotary_policy scaled(cfg, /*seq_len=*/32768);     // a rope_config
///     posenc::rotary_policy same(my_rotary_embedding_float);    // any rotary_embedding
///     auto out = posenc::attention(q, k, v, opt, scaled);

#include <Eigen/Core>
#include <memory>
#include <type_traits>
#include <utility>

#include "../core/error.hpp"
#include "../core/policy.hpp"
#include "../encoding/rotary/rotary.hpp"

namespace posenc {

/// RoPE applied to Q and K inside the kernel. Copies share one rotary_embedding (its
/// cos/sin cache grows on demand): use one policy per thread.
class rotary_policy : public policy_base {
 public:
  static constexpr bool transforms_keys = true;
  static constexpr bool keys_per_query_head = false;  // head() ignores the head index
  static constexpr bool transforms_queries = true;

  /// Takes a double-precision rotary embedding (any configuration).
  explicit rotary_policy(rotary_embedding<double> rope)
      : rope_(std::make_shared<rotary_embedding<double>>(std::move(rope))) {}

  /// The same rotation as `rope` (a rotary embedding of any scalar and CPU backend): its
  /// frequencies, attention factor, xPos, pairing and options, computed in double.
  template <
      class Scalar, class Backend,
      std::enable_if_t<!std::is_same_v<Scalar, double> || !std::is_same_v<Backend, default_backend>,
                       int> = 0>
  explicit rotary_policy(const rotary_embedding<Scalar, Backend>& rope)
      : rotary_policy(rotary_embedding<double>(rope.head_dim(), rope.frequencies(), rope.pairing(),
                                               rope.options())) {}

  /// From a configuration (any scaling), as rotary_embedding(config, seq_len) builds it:
  /// `seq_len` is the length the frequencies are for (dynamic NTK and LongRoPE depend on it;
  /// 0 = within the original context). Throws posenc::error naming the invalid field.
  explicit rotary_policy(const rope_config& config, Index seq_len = 0, rope_options options = {})
      : rotary_policy(rotary_embedding<double>(config, seq_len, options)) {}

  /// Plain RoPE: head dim D, rotary dim r (-1 = D), base, pairing half (Hugging Face).
  explicit rotary_policy(Index head_dim, double base = 10000.0, Index rotary_dim = -1)
      : rotary_policy(rotary_embedding<double>(head_dim, rotary_dim, base)) {}

  const rotary_embedding<double>& embedding() const noexcept { return *rope_; }

  /// The call's head dim must be the embedding's; reserves cos/sin for the positions the
  /// call can meet, up to the embedding's cache_limit (positions past it, e.g. a far query
  /// offset, are computed on the fly rather than allocating a table up to the offset).
  void check(const attention_shape& s) const {
    detail::require(s.dim == rope_->head_dim(), "rotary_policy", "dim", s.dim,
                    "must equal the rotary embedding's head_dim");
    rope_->reserve(std::min(rope_->options().cache_limit, std::max(s.len_k, s.q_offset + s.len_q)));
  }

  struct head_type : head_base {
    rotary_embedding<double>* rope = nullptr;
    void transform_keys(Eigen::Ref<dmatrix> k) const { rope->apply(k, Index(0), rope_role::key); }
    void transform_query(Index pos, Eigen::Ref<drow> q) const {
      rope->apply(q, pos, rope_role::query);
    }
    template <class Grad>
    void backward_query(Index pos, Eigen::Ref<drow> dq, Grad& /*grad*/) const {
      rope->invert(dq, pos, rope_role::query);
    }
    template <class Grad>
    void backward_keys(Eigen::Ref<dmatrix> dk, Grad& /*grad*/) const {
      rope->invert(dk, Index(0), rope_role::key);
    }
  };
  head_type head(Index /*batch*/, Index /*head*/, const attention_shape& /*shape*/) const {
    head_type t;
    t.rope = rope_.get();
    return t;
  }

 private:
  std::shared_ptr<rotary_embedding<double>> rope_;
};

}  // namespace posenc
