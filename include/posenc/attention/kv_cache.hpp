#pragma once
/// \file
/// A key/value cache for autoregressive decoding.
///
/// Keys and values are appended token by token (or a chunk at a time, for chunked
/// prefill); `attend` runs causal attention of the newest queries over everything cached,
/// with the query offset set so that query i of the chunk sits at position
/// size() - n + i. Decoding token by token therefore gives exactly the rows of one full
/// causal pass over the whole sequence (tested).
///
///     storage  keys [size, H_kv, d]   values [size, H_kv, dv]   row-major, contiguous
///
/// Keys are cached as given: a rotary model rotates them (at their absolute positions)
/// before appending, and rotates each query at its position before attending.

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "../core/attention_config.hpp"
#include "../core/backend.hpp"
#include "../core/error.hpp"
#include "../core/limits.hpp"
#include "../core/policy.hpp"
#include "../core/view.hpp"
#include "multi_head.hpp"

namespace posenc {

/// Growing K/V storage for one sequence with H_kv key/value heads.
template <class Scalar>
class kv_cache {
 public:
  /// An empty cache for `kv_heads` heads of key dim `dim` and value dim `dim_v`;
  /// `reserve_tokens` preallocates.
  kv_cache(Index kv_heads, Index dim, Index dim_v, Index reserve_tokens = 0)
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
    keys_.reserve(static_cast<std::size_t>(reserve_tokens * kv_heads * dim));
    values_.reserve(static_cast<std::size_t>(reserve_tokens * kv_heads * dim_v));
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
    size_ += k.rows();
    undo.keep();
  }

  /// Number of cached tokens.
  Index size() const noexcept { return size_; }
  Index kv_heads() const noexcept { return kv_heads_; }
  Index dim() const noexcept { return dim_; }
  Index dim_v() const noexcept { return dim_v_; }
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
  /// cache (which must already hold them): query i at position size() - n + i.
  /// `config.q_offset` and `config.mask.causal` are set by the cache. Returns [n, H·dv].
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
    config.q_offset = size_ - q.rows();
    config.mask.causal = true;
    const matrix_input<DQ> qi(q);
    attention_matrix<Scalar> out(q.rows(), heads * dim_v_);
    multi_head_attention(packed_heads(qi.view(), heads), keys(), values(),
                         view_shd(out.data(), out.rows(), heads, dim_v_), config, policy);
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

  Index kv_heads_, dim_, dim_v_;
  Index size_ = 0;
  std::vector<Scalar> keys_, values_;
};

}  // namespace posenc
