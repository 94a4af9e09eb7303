#pragma once
/// \file
/// Position biases materialised on the device, for users who feed another attention
/// kernel (cuDNN, a FlashAttention build with a bias input, their own):
///
///     alibi_bias(policy, out [H, Lq, Lk])           out(h,i,j) = -m_h·(q_offset + i - j)
///                                                   (or -m_h·|q_offset + i - j|, symmetric)
///     t5_buckets(config, out [Lq, Lk])              out(i,j) = bucket(j - (q_offset + i))
///     t5_bias(config, table [B, H], out [H, Lq, Lk]) out(h,i,j) = table(bucket(...), h)
///
/// Every output is a caller-owned device view (strides in elements, any layout: [H, Lq, Lk]
/// contiguous, a padded slice of a larger buffer, [Lq, H, Lk] memory through permuted
/// strides); the T5 table is a device view too. Each call is asynchronous on `stream`
/// (the default stream when omitted) and allocates nothing.
///
/// The values are those of the CPU: ALiBi equals materialize_bias(alibi_policy) (slopes
/// taken from the policy, which computed them on the host), T5 equals t5_buckets() and
/// materialize_bias(t5_bias_policy), each rounded once to the output type (float, double,
/// Eigen::half, Eigen::bfloat16; bucket indices int32 or Index). Host arguments are
/// validated as the CPU validates them, with the same messages under this function's name
/// (posenc::cuda::alibi_bias, ...), before anything is launched.
///
/// Only for translation units compiled by nvcc.

#include <cuda_runtime.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "../../backend/cuda/bias.cuh"
#include "../../backend/cuda/runtime.cuh"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/policy.hpp"
#include "../../core/types.hpp"
#include "../../core/view.hpp"
#include "../alibi.hpp"
#include "../t5_bias.hpp"

namespace posenc {
namespace cuda {

/// Helpers of this file (not named detail: posenc::detail stays visible from posenc::cuda).
namespace bias_detail {

/// Throws unless `out` addresses distinct elements: each axis of extent > 1, taken by
/// increasing |stride|, must step over the whole span of the axes inside it. Device
/// threads write the elements concurrently, so a view that repeats an element (a zero
/// stride, interleaved axes) would race.
template <class T, int R>
void check_distinct_elements(const char* where, const strided_view<T, R>& out) {
  if (out.empty()) return;
  std::array<std::pair<Index, Index>, R> axes{};  // (|stride|, extent), by |stride|
  int n = 0;
  for (int a = 0; a < R; ++a) {
    if (out.extent(a) <= 1) continue;
    std::pair<Index, Index> x{out.stride(a) < 0 ? -out.stride(a) : out.stride(a), out.extent(a)};
    int k = n++;
    for (; k > 0 && x < axes[k - 1]; --k) axes[k] = axes[k - 1];  // insertion (R <= 4)
    axes[k] = x;
  }
  Index span = 1;  // elements covered by the axes inside the current one
  for (int a = 0; a < n; ++a) {
    posenc::detail::require(
        axes[a].first >= span, where, "out strides", axes[a].first,
        "must address distinct elements (each axis's |stride| at least the span of the "
        "axes inside it): device threads write them concurrently");
    span = axes[a].first * axes[a].second;
  }
}

/// The output of an [H, Lq, Lk] view, for the kernels.
template <class T>
kernels::bias_output<T> output_of(const strided_view<T, 3>& out) {
  kernels::bias_output<T> o;
  o.data = out.data();
  o.heads = out.extent(0);
  o.len_q = out.extent(1);
  o.len_k = out.extent(2);
  o.stride_h = out.stride(0);
  o.stride_q = out.stride(1);
  o.stride_k = out.stride(2);
  return o;
}

inline attention_shape shape_of(Index heads, Index len_q, Index len_k, Index q_offset) {
  attention_shape s;
  s.heads = heads;
  s.len_q = len_q;
  s.len_k = len_k;
  s.dim = 1;
  s.q_offset = q_offset;
  return s;
}

inline kernels::t5_bucket_params params_of(const t5_bucket_config& c) {
  return kernels::make_t5_bucket_params(c.num_buckets, c.max_distance, c.bidirectional);
}

}  // namespace bias_detail

/// ALiBi biases [H, Lq, Lk] into the device view `out`: out(h, i, j) = -m_h·(pos_i - j)
/// (causal form) or -m_h·|pos_i - j| (symmetric), pos_i = q_offset + i, with the policy's
/// slopes (paper slopes for any head count, alibi_policy::from_max_bias, or explicit) and
/// form. For KV-cache decoding pass the cached length as q_offset (Lq new queries against
/// Lk = q_offset + Lq keys). Equal to materialize_bias(policy, 0, h, shape) rounded once to T.
/// Throws posenc::error (nothing launched) unless out.extent(0) == policy.heads(),
/// q_offset >= 0 and q_offset + Lq is representable, and out's elements are distinct.
template <class T>
void alibi_bias(const alibi_policy& policy, const strided_view<T, 3>& out, Index q_offset = 0,
                cudaStream_t stream = nullptr) {
  static_assert(is_storage_v<T>,
                "posenc::cuda::alibi_bias: T must be float, double, "
                "Eigen::half or Eigen::bfloat16");
  constexpr const char* where = "cuda::alibi_bias";
  const attention_shape s =
      bias_detail::shape_of(out.extent(0), out.extent(1), out.extent(2), q_offset);
  posenc::detail::check_positions(s, where);
  policy.check(s);
  bias_detail::check_distinct_elements(where, out);
  kernels::alibi_bias_args<T> a;
  a.out = bias_detail::output_of(out);
  a.slopes = policy.slopes().data();
  a.q_offset = q_offset;
  a.symmetric = policy.form() == alibi_form::symmetric;
  kernels::alibi_bias(backend::cuda{}, a, stream);
}

/// alibi_bias() into a contiguous [policy.heads(), len_q, len_k] device buffer.
template <class T>
void alibi_bias(const alibi_policy& policy, T* out, Index len_q, Index len_k, Index q_offset = 0,
                cudaStream_t stream = nullptr) {
  posenc::detail::check_positions(bias_detail::shape_of(policy.heads(), len_q, len_k, q_offset),
                                  "cuda::alibi_bias");
  alibi_bias(policy, strided_view<T, 3>::contiguous(out, {policy.heads(), len_q, len_k}), q_offset,
             stream);
}

/// T5 bucket indices [Lq, Lk] into the device view `out` (I = std::int32_t or Index):
/// out(i, j) = bucket(j - (q_offset + i)), as t5_buckets(Lq, Lk, config, q_offset).
/// Throws posenc::error (nothing launched) for a bad config, a negative or overflowing
/// q_offset, int32 indices with num_buckets > 2^31 - 1, or repeated output elements.
template <class I>
void t5_buckets(const t5_bucket_config& config, const strided_view<I, 2>& out, Index q_offset = 0,
                cudaStream_t stream = nullptr) {
  static_assert(std::is_same_v<I, std::int32_t> || std::is_same_v<I, Index>,
                "posenc::cuda::t5_buckets: indices are std::int32_t or posenc::Index");
  constexpr const char* where = "cuda::t5_buckets";
  config.check(where);
  posenc::detail::check_positions(bias_detail::shape_of(1, out.extent(0), out.extent(1), q_offset),
                                  where);
  if constexpr (std::is_same_v<I, std::int32_t>)
    posenc::detail::require(config.num_buckets <= std::numeric_limits<std::int32_t>::max(), where,
                            "num_buckets", config.num_buckets,
                            "must be <= 2147483647 for int32 bucket indices");
  bias_detail::check_distinct_elements(where, out);
  kernels::t5_buckets_args<I> a;
  a.out.data = out.data();
  a.out.heads = 1;
  a.out.len_q = out.extent(0);
  a.out.len_k = out.extent(1);
  a.out.stride_q = out.stride(0);
  a.out.stride_k = out.stride(1);
  a.bucket = bias_detail::params_of(config);
  a.q_offset = q_offset;
  kernels::t5_buckets(backend::cuda{}, a, stream);
}

/// T5 biases [H, Lq, Lk] into the device view `out` from the device table [num_buckets, H]
/// (row = bucket, column = head, any strides; float, double, half or bfloat16):
/// out(h, i, j) = table(bucket(j - (q_offset + i)), h), as materialize_bias(
/// t5_bias_policy(table, config), 0, h, shape) rounded once to T. T5 applies it unscaled.
/// Throws posenc::error (nothing launched) as t5_bias_policy and materialize_bias do (bad
/// config, table rows != num_buckets, no column, out.extent(0) != table columns, bad
/// q_offset), when out shares memory with the table, or repeats an element.
template <class T, class Table>
void t5_bias(const t5_bucket_config& config, const strided_view<Table, 2>& table,
             const strided_view<T, 3>& out, Index q_offset = 0, cudaStream_t stream = nullptr) {
  static_assert(is_storage_v<T> && is_storage_v<std::remove_const_t<Table>>,
                "posenc::cuda::t5_bias: the table and the output must be float, double, "
                "Eigen::half or Eigen::bfloat16");
  constexpr const char* where = "cuda::t5_bias";
  config.check(where);
  posenc::detail::require(table.extent(0) == config.num_buckets, where, "table.rows()",
                          table.extent(0), "must equal num_buckets");
  posenc::detail::require(table.extent(1) >= 1, where, "table.cols()", table.extent(1),
                          "must be >= 1 (one column per head)");
  posenc::detail::check_positions(
      bias_detail::shape_of(out.extent(0), out.extent(1), out.extent(2), q_offset), where);
  posenc::detail::require(out.extent(0) == table.extent(1), where, "heads", out.extent(0),
                          "must equal table.cols()");
  posenc::detail::check_no_overlap(where, "out", out, "table", table);
  bias_detail::check_distinct_elements(where, out);
  kernels::t5_bias_args<T, std::remove_const_t<Table>> a;
  a.out = bias_detail::output_of(out);
  a.table = table.data();
  a.table_stride_b = table.stride(0);
  a.table_stride_h = table.stride(1);
  a.bucket = bias_detail::params_of(config);
  a.q_offset = q_offset;
  kernels::t5_bias(backend::cuda{}, a, stream);
}

}  // namespace cuda
}  // namespace posenc
