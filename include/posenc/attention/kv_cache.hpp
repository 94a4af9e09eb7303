#pragma once
/// \file
/// A key/value cache for autoregressive decoding.
///
/// Keys and values are appended token by token (or a chunk at a time, for chunked
/// prefill); `attend` runs causal attention of the newest queries over everything cached,
/// with the query offset set so that query i of the chunk sits at position
/// size() - n + i, and `step` appends and attends in one call.
///
///     storage  keys [size, H_kv, d]   values [size, H_kv, dv]   row-major, contiguous
///
/// Kernel (kv_cache_options::kernel): by default the tiled kernel of flash.hpp, which
/// takes the split-key decode path for up to 8 new queries (Flash-Decoding) and the tiled
/// prefill for longer chunks; its result equals the reference kernel's within flash.hpp's
/// bound (float storage: relative 2e-6; double: 1e-14). kv_cache_kernel::reference runs
/// the exact reference kernel (multi_head.hpp) instead, for checking: token-by-token
/// decoding then gives the rows of one full causal pass to rounding (1e-14 in double:
/// Eigen's products block differently for another number of keys). A policy the tiled kernel
/// cannot take (transformer_xl_policy's score term) always runs on the reference kernel.
///
/// Rotary models (set_rotary): keys are rotated once, as they are appended, at their
/// absolute positions size(), size() + 1, ... and stored rotated (as inference engines do);
/// each query is rotated at its position before attending. A Llama decode step is then
/// project, cache.step(q, k, v, heads), done. Without set_rotary, keys are cached as given.

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/allocator.hpp"
#include "../core/attention_config.hpp"
#include "../core/backend.hpp"
#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/policy.hpp"
#include "../core/view.hpp"
#include "../encoding/rotary/rotary.hpp"
#include "flash.hpp"
#include "multi_head.hpp"

namespace posenc {

/// Which kernel a kv_cache's attend and step run (never what the cache stores).
enum class kv_cache_kernel {
  flash,     ///< the tiled kernel (flash.hpp): split-key decode, tiled prefill; the default
  reference  ///< the exact reference kernel (multi_head.hpp), for checking
};

/// How a kv_cache attends.
struct kv_cache_options {
  kv_cache_kernel kernel = kv_cache_kernel::flash;
  /// Threads of the tiled kernel, and the thread_pool they run on (flash.pool; not owned:
  /// it must outlive the calls). The output does not depend on them.
  flash_options flash{};
};

/// Growing K/V storage for one sequence with H_kv key/value heads.
template <class Scalar>
class kv_cache {
 public:
  /// An empty cache for `kv_heads` heads of key dim `dim` and value dim `dim_v`;
  /// `reserve_tokens` preallocates.
  kv_cache(Index kv_heads, Index dim, Index dim_v, Index reserve_tokens = 0,
           const kv_cache_options& options = {})
      : kv_heads_(kv_heads), dim_(dim), dim_v_(dim_v) {
    detail::require(kv_heads >= 1, "kv_cache", "kv_heads", kv_heads, "must be >= 1");
    detail::require(dim >= 1, "kv_cache", "dim", dim, "must be >= 1");
    detail::require(dim_v >= 1, "kv_cache", "dim_v", dim_v, "must be >= 1");
    detail::require(reserve_tokens >= 0, "kv_cache", "reserve_tokens", reserve_tokens,
                    "must be >= 0");
    detail::check_heads_limit("kv_cache", "kv_heads", kv_heads);
    detail::check_dim_limit("kv_cache", "dim", dim);
    detail::check_dim_limit("kv_cache", "dim_v", dim_v);
    detail::check_elements("kv_cache", "reserve_tokens", reserve_tokens,
                           kv_heads * std::max(dim, dim_v));
    set_options(options);
    keys_.reserve(static_cast<std::size_t>(reserve_tokens * kv_heads * dim));
    values_.reserve(static_cast<std::size_t>(reserve_tokens * kv_heads * dim_v));
  }

  /// The kernel and threads of attend and step.
  const kv_cache_options& options() const noexcept { return options_; }
  /// Throws posenc::error naming `kernel` or `flash.threads` when out of range.
  void set_options(const kv_cache_options& options) {
    detail::require(
        options.kernel == kv_cache_kernel::flash || options.kernel == kv_cache_kernel::reference,
        "kv_cache", "kernel", static_cast<int>(options.kernel), "unknown kernel");
    detail::require(
        options.flash.threads >= 0 && options.flash.threads <= flash_options::max_threads,
        "kv_cache", "flash.threads", options.flash.threads,
        "must be in [0, flash_options::max_threads]");
    options_ = options;
  }

  /// Rotary position embedding inside the cache: from now on appended keys are rotated at
  /// their absolute positions (size(), size() + 1, ...) and stored rotated, and attend
  /// rotates each query at its position. Any rotary_embedding (its scalar converted: same
  /// frequencies, pairing and options) or rope_config (frequencies for `seq_len`: dynamic
  /// NTK and LongRoPE depend on it). Only on an empty cache, so that every stored key is
  /// rotated the same way. Throws posenc::error naming `head_dim` when it is not the
  /// cache's dim, or `size()` when the cache is not empty.
  template <class S, class B>
  void set_rotary(const rotary_embedding<S, B>& rope) {
    set_rotary_checked(rotary_embedding<Scalar>(rope.head_dim(), rope.frequencies(), rope.pairing(),
                                                rope.options()));
  }
  void set_rotary(const rope_config& config, Index seq_len, rope_options options = {}) {
    set_rotary_checked(rotary_embedding<Scalar>(config, seq_len, options));
  }
  /// Keys as given from now on (only on an empty cache).
  void clear_rotary() {
    detail::require(size_ == 0, "kv_cache::clear_rotary", "size()", size_, "must be 0");
    rope_.reset();
  }
  /// Whether keys are rotated as they are appended.
  bool has_rotary() const noexcept { return rope_.has_value(); }
  /// The cache's rotary embedding (has_rotary() must be true).
  const rotary_embedding<Scalar>& rotary() const {
    detail::require(rope_.has_value(), "kv_cache::rotary", "has_rotary()", 0, "must be true");
    return *rope_;
  }

  /// Appends n tokens: k [n, H_kv·d], v [n, H_kv·dv] (heads packed along the columns).
  /// A call that throws (bad shapes; std::bad_alloc) leaves the cache unchanged.
  template <class DK, class DV>
  void append(const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v) {
    detail::require(k.cols() == kv_heads_ * dim_, "kv_cache::append", "k.cols()", k.cols(),
                    "must equal kv_heads * dim");
    detail::require(v.cols() == kv_heads_ * dim_v_, "kv_cache::append", "v.cols()", v.cols(),
                    "must equal kv_heads * dim_v");
    detail::require(v.rows() == k.rows(), "kv_cache::append", "v.rows()", v.rows(),
                    "must equal k.rows()");
    const rollback undo(*this);
    for (Index r = 0; r < k.rows(); ++r) {
      for (Index c = 0; c < k.cols(); ++c) keys_.push_back(static_cast<Scalar>(k(r, c)));
      for (Index c = 0; c < v.cols(); ++c) values_.push_back(static_cast<Scalar>(v(r, c)));
    }
    // stored rotated: each key is rotated once, at its absolute position
    if (rope_ && k.rows() > 0)
      rope_->apply(view_bshd(keys_.data() + size_ * kv_heads_ * dim_, 1, k.rows(), kv_heads_, dim_),
                   rope_positions(size_), rope_role::key);
    size_ += k.rows();
    undo.keep();
  }

  /// Number of cached tokens.
  Index size() const noexcept { return size_; }
  Index kv_heads() const noexcept { return kv_heads_; }
  Index dim() const noexcept { return dim_; }
  Index dim_v() const noexcept { return dim_v_; }
  /// Keeps the first `tokens` cached tokens and forgets the rest (keeps the allocation):
  /// rolls back rejected draft tokens of speculative decoding, or a step to redo. Throws
  /// posenc::error naming `tokens` unless 0 <= tokens <= size().
  void truncate(Index tokens) {
    detail::require(tokens >= 0 && tokens <= size_, "kv_cache::truncate", "tokens", tokens,
                    "must be in [0, size() = " + std::to_string(size_) + "]");
    keys_.resize(static_cast<std::size_t>(tokens * kv_heads_ * dim_));
    values_.resize(static_cast<std::size_t>(tokens * kv_heads_ * dim_v_));
    size_ = tokens;
  }
  /// Forgets every token (keeps the allocation).
  void clear() noexcept {
    keys_.clear();
    values_.clear();
    size_ = 0;
  }

  /// Cached keys as a [1, size, H_kv, d] view (valid until the next append).
  heads_view<const Scalar> keys() const {
    return view_bshd(size_ ? keys_.data() : nullptr, 1, size_, kv_heads_, dim_);
  }
  /// Cached values as a [1, size, H_kv, dv] view (valid until the next append).
  heads_view<const Scalar> values() const {
    return view_bshd(size_ ? values_.data() : nullptr, 1, size_, kv_heads_, dim_v_);
  }

  /// Causal attention of the newest n = q.rows() tokens' queries q [n, H·d] over the
  /// cache (which must already hold them): query i at position size() - n + i, rotated
  /// there first when has_rotary(). `config.q_offset` and `config.mask.causal` are set by
  /// the cache. Runs options().kernel (see the file comment). Returns [n, H·dv].
  /// With has_rotary() the policy must not transform queries or keys itself (a second
  /// rotation): that is a posenc::error naming `policy`.
  template <class DQ, class Policy = no_position_policy>
  attention_matrix<Scalar> attend(const Eigen::MatrixBase<DQ>& q, Index heads,
                                  attention_config config = {},
                                  const Policy& policy = Policy{}) const {
    static_assert(std::is_same_v<typename DQ::Scalar, Scalar>,
                  "posenc::kv_cache::attend: q must have the cache's scalar type");
    detail::require(heads >= 1, "kv_cache::attend", "heads", heads, "must be >= 1");
    detail::require(q.cols() == heads * dim_, "kv_cache::attend", "q.cols()", q.cols(),
                    "must equal heads * dim");
    detail::require(q.rows() <= size_, "kv_cache::attend", "q.rows()", q.rows(),
                    "must not exceed the cached tokens (append the new keys first)");
    if constexpr (Policy::transforms_queries || Policy::transforms_keys)
      detail::require(!rope_, "kv_cache::attend", "policy", "a query/key transform",
                      "must not be combined with the cache's own rotary embedding (set_rotary)");
    config.q_offset = size_ - q.rows();
    config.mask.causal = true;
    attention_matrix<Scalar> out(q.rows(), heads * dim_v_);
    const auto out_view = view_shd(out.data(), out.rows(), heads, dim_v_);
    if (rope_) {
      attention_matrix<Scalar> qr = q;
      if (qr.rows() > 0)
        rope_->apply(view_shd(qr.data(), qr.rows(), heads, dim_), rope_positions(config.q_offset),
                     rope_role::query);
      run(view_shd(static_cast<const Scalar*>(qr.data()), qr.rows(), heads, dim_), out_view, config,
          policy);
    } else {
      const matrix_input<DQ> qi(q);
      run(packed_heads(qi.view(), heads), out_view, config, policy);
    }
    return out;
  }

  /// Appends k, v for n new tokens, then attends their queries q [n, H·d] (see attend).
  /// Atomic: a call that throws (any argument attend, the config or the policy rejects)
  /// leaves the cache as it was, so a decode loop can catch, fix and retry.
  template <class DQ, class DK, class DV, class Policy = no_position_policy>
  attention_matrix<Scalar> step(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                                const Eigen::MatrixBase<DV>& v, Index heads,
                                const attention_config& config = {},
                                const Policy& policy = Policy{}) {
    detail::require(q.rows() == k.rows(), "kv_cache::step", "q.rows()", q.rows(),
                    "must equal k.rows()");
    // Validate the query before touching the cache, so a bad call leaves it unchanged.
    detail::require(heads >= 1, "kv_cache::step", "heads", heads, "must be >= 1");
    detail::require(q.cols() == heads * dim_, "kv_cache::step", "q.cols()", q.cols(),
                    "must equal heads * dim");
    const rollback undo(*this);
    append(k, v);
    attention_matrix<Scalar> out = attend(q, heads, config, policy);
    undo.keep();
    return out;
  }

 private:
  /// Restores the cache's size on scope exit unless keep() was called: the strong
  /// guarantee for append and step (shrinking keeps the earlier rows as they were).
  class rollback {
   public:
    explicit rollback(kv_cache& c) noexcept
        : c_(c), size_(c.size_), keys_(c.keys_.size()), values_(c.values_.size()) {}
    rollback(const rollback&) = delete;
    rollback& operator=(const rollback&) = delete;
    ~rollback() {
      if (kept_) return;
      c_.keys_.resize(keys_);
      c_.values_.resize(values_);
      c_.size_ = size_;
    }
    void keep() const noexcept { kept_ = true; }

   private:
    kv_cache& c_;
    Index size_;
    std::size_t keys_, values_;
    mutable bool kept_ = false;
  };

  void set_rotary_checked(rotary_embedding<Scalar> rope) {
    detail::require(rope.head_dim() == dim_, "kv_cache::set_rotary", "head_dim", rope.head_dim(),
                    "must equal the cache's dim = " + std::to_string(dim_));
    detail::require(size_ == 0, "kv_cache::set_rotary", "size()", size_,
                    "must be 0 (every cached key is rotated the same way)");
    rope_.emplace(std::move(rope));
  }

  /// The chosen kernel over the cached keys and values.
  template <class Policy>
  void run(const heads_view<const Scalar>& q, const heads_view<Scalar>& out,
           const attention_config& config, const Policy& policy) const {
    if constexpr (flash_supports_v<Policy>) {
      if (options_.kernel == kv_cache_kernel::flash) {
        flash_multi_head_attention(q, keys(), values(), out, config, policy, options_.flash);
        return;
      }
    }
    multi_head_attention(q, keys(), values(), out, config, policy);
  }

  Index kv_heads_, dim_, dim_v_;
  Index size_ = 0;
  // huge pages where the OS gives them: decode reads every row once, page after page
  std::vector<Scalar, huge_page_allocator<Scalar>> keys_, values_;
  kv_cache_options options_{};
  // mutable: its cos/sin memo grows on demand when a const attend rotates a query
  mutable std::optional<rotary_embedding<Scalar>> rope_;
};

}  // namespace posenc
