#pragma once
/// \file
/// Flash attention on the GPU: posenc::flash_multi_head_attention's call for views of
/// device memory, with the position schemes computed inside the tiles, and the merge of
/// partial results (attention/merge.hpp) on the device.
///
///     posenc::cuda::flash_multi_head_attention(q, k, v, out, config, policy, options, stream);
///     posenc::cuda::flash_multi_head_attention(q, k, v, out, lse, config, ...);   // + lse
///     posenc::cuda::merge_attention_states(o_a, lse_a, o_b, lse_b, out, lse_out, stream);
///
///     q [B, Lq, H, d], k [B, Lk, H_kv, d], v [B, Lk, H_kv, dv], out [B, Lq, H, dv]: strided
///     views of device memory (view_bshd, view_bhsd, any strides), float, double,
///     Eigen::half or Eigen::bfloat16; lse [B, H, Lq] of real_t<T> (float for the 16-bit
///     types, FlashAttention's softmax_lse), device memory
///
/// The semantics are the CPU's (attention_config: scale, q_offset, causal, key_lengths,
/// boolean and additive masks; GQA / MQA; a row that sees no key gives zeros and lse -inf;
/// a NaN or +inf logit a NaN row), validated on the host with the CPU's posenc::error
/// messages, under this function's name.
///
/// Policies, by their traits (core/policy.hpp):
///   - no_position_policy (and absolute encodings, added to the inputs beforehand with
///     posenc::sinusoidal<T, backend::cuda> or cuda::embed): nothing in the kernel;
///   - bias_form linear_distance (alibi_policy, a user's learned slopes): the slopes of
///     every (batch, head) go to the device, the bias is generated per logit;
///   - t5_bias_policy: its [buckets, H] table goes to the device, the bucket of j − pos is
///     computed per logit (math's bucket function, the host's boundaries: the CPU's buckets
///     bit for bit); any other distance_table policy: its heads' tables, O(B·H·(Lq + Lk));
///   - cuda::rotary_policy (a rotary_embedding<T, backend::cuda>, any scaling, pairing,
///     partial rotary, xPos): q and k rotated as they are loaded, from the embedding's
///     device cos/sin rows;
///   - Shaw's clipped embeddings, Transformer-XL, generic hooks, and the CPU's
///     rotary_policy / absolute_policy: a compile-time error that says what to use.
///
/// Precision: arithmetic in real_t<T> (float for float, half and bfloat16; double for
/// double), each output rounded once; within float32 rounding of the CPU flash kernel
/// (tests/cuda/test_cuda_flash.cu states the bounds). Boolean and additive masks are
/// copied to the device per call and read per logit: the slow path.
///
/// Splits: a call with few (row block, batch, key head) units against many keys (a decode
/// step) splits the keys so that every SM has work (cuda::flash_options::splits: 0 chooses
/// from the SM count), each split's (out, lse) kept in stream-ordered scratch memory and
/// reduced by a second kernel. Every call is asynchronous on `stream` (scratch memory is
/// allocated and freed in stream order, cudaMallocAsync) and needs no synchronisation
/// unless the caller's host buffers change: what the call reads from host memory (masks,
/// slopes, tables) is copied before it returns.
///
/// Only for translation units compiled by nvcc (include <posenc/cuda.cuh>).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../../backend/cuda/flash.cuh"
#include "../../backend/cuda/runtime.cuh"
#include "../../core/attention_config.hpp"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/policy.hpp"
#include "../../core/types.hpp"
#include "../../core/view.hpp"
#include "../../encoding/cuda/rotary.cuh"
#include "../../encoding/t5_bias.hpp"
#include "../merge.hpp"
#include "../multi_head.hpp"

namespace posenc {
namespace cuda {

/// How a device flash call runs (never what it computes, beyond rounding).
struct flash_options {
  /// Key splits: 0 chooses from the SM count (split only when the call has too few units
  /// of work to fill the GPU); 1 never splits; n > 1 at most n splits of >= 32 keys.
  Index splits = 0;
};

/// RoPE inside the device flash kernel: queries at q_offset + i and keys at j rotated by a
/// device rotary_embedding (any configuration) as the tiles are loaded. The embedding is
/// not owned: it must outlive the calls, and its Scalar must be the attention's storage
/// type. Its cos/sin cache grows as apply() grows it (not thread-safe, as apply()).
template <class Scalar>
class rotary_policy : public policy_base {
 public:
  static constexpr bool transforms_keys = true;
  static constexpr bool keys_per_query_head = false;
  static constexpr bool transforms_queries = true;
  using embedding_type = rotary_embedding<Scalar, backend::cuda>;

  explicit rotary_policy(embedding_type& rope) noexcept : rope_(&rope) {}

  embedding_type& embedding() const noexcept { return *rope_; }

  void check(const attention_shape& s) const {
    detail::require(s.dim == rope_->head_dim(), "rotary_policy", "dim", s.dim,
                    "must equal the rotary embedding's head_dim");
  }
  // the hooks are the kernel's; the host never calls them
  struct head_type : head_base {};
  head_type head(Index /*batch*/, Index /*head*/, const attention_shape& /*shape*/) const {
    return {};
  }

 private:
  embedding_type* rope_;
};

namespace flash_detail {

template <class Policy>
struct is_device_rotary : std::false_type {};
template <class Scalar>
struct is_device_rotary<rotary_policy<Scalar>> : std::true_type {};

template <class Policy>
constexpr void check_device_policy() {
  constexpr position_bias form = bias_form_v<Policy>;
  static_assert(form == position_bias::none || form == position_bias::linear_distance ||
                    form == position_bias::distance_table,
                "posenc::cuda::flash_multi_head_attention: this policy's bias, score or value "
                "terms have no device form (Shaw's clipped embeddings, Transformer-XL and "
                "generic hooks run on the CPU: posenc::flash_multi_head_attention or "
                "posenc::multi_head_attention)");
  static_assert(
      (!Policy::transforms_queries && !Policy::transforms_keys) || is_device_rotary<Policy>::value,
      "posenc::cuda::flash_multi_head_attention: query and key transforms run in the "
      "kernel only as posenc::cuda::rotary_policy (a rotary_embedding<T, "
      "backend::cuda>); add absolute encodings to the inputs first "
      "(posenc::sinusoidal<T, backend::cuda>, posenc::cuda::embed)");
}

template <class T, int R>
void strides_of(const strided_view<T, R>& v, Index* out) {
  for (int a = 0; a < R; ++a) out[a] = v.stride(a);
}

/// SM count, shared memory per block (opt-in) and compute capability of the current device.
inline void device_limits(int& sms, int& shared_optin, int& sm_major) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
        "cudaDeviceGetAttribute(multiprocessor count)");
  check(cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
        "cudaDeviceGetAttribute(shared memory per block, opt-in)");
  check(cudaDeviceGetAttribute(&sm_major, cudaDevAttrComputeCapabilityMajor, dev),
        "cudaDeviceGetAttribute(compute capability)");
}

/// Keys per split for `units` (row block, batch, key head) units over len_k keys.
inline Index split_keys(Index units, Index len_k, Index requested, int sms) {
  constexpr Index tile = kernels::mma_tiles::keys;  // a multiple of either kernel's tile
  const Index max_splits = std::max<Index>(1, (len_k + tile - 1) / tile);
  Index splits = requested;
  if (splits == 0) {
    // enough blocks for two waves on every SM, each split at least 256 keys
    const Index want = (2 * Index(sms) + units - 1) / std::max<Index>(units, 1);
    splits = std::min(want, std::max<Index>(1, len_k / 256));
  }
  splits = std::clamp<Index>(splits, 1, std::min<Index>(max_splits, 1024));
  const Index per = (len_k + splits - 1) / splits;
  return std::max<Index>(tile, (per + tile - 1) / tile * tile);
}

/// The validated call, then the launch.
template <class T, class Policy, class TQ, class TK, class TV>
void run(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k, const strided_view<TV, 4>& v,
         const strided_view<T, 4>& out, const strided_view<real_t<T>, 3>* lse,
         const attention_config& config, const Policy& policy, const flash_options& options,
         cudaStream_t stream, const char* where) {
  using Acc = real_t<T>;
  using F = kernels::flash_tiles;
  static_assert(std::is_same_v<std::remove_cv_t<TQ>, T> &&
                    std::is_same_v<std::remove_cv_t<TK>, T> &&
                    std::is_same_v<std::remove_cv_t<TV>, T> && !std::is_const_v<T>,
                "posenc::cuda::flash_multi_head_attention: q, k, v and a writable out must have "
                "the same scalar type");
  check_device_policy<Policy>();
  const attention_shape s = ::posenc::detail::multi_head_shape(q, k, v, out, config, where);
  ::posenc::detail::check_attention(s, config, policy, where);
  ::posenc::detail::require(options.splits >= 0, where, "options.splits", options.splits,
                            "must be >= 0 (0 chooses from the SM count)");
  ::posenc::detail::require(s.dim <= F::max_dim, where, "dim", s.dim,
                            "must be <= 256 on the CUDA backend");
  ::posenc::detail::require(s.dim_v <= F::max_dim, where, "dim_v", s.dim_v,
                            "must be <= 256 on the CUDA backend");
  ::posenc::detail::check_no_overlap(where, "out", out, "q", q);
  ::posenc::detail::check_no_overlap(where, "out", out, "k", k);
  ::posenc::detail::check_no_overlap(where, "out", out, "v", v);
  if (lse) {
    ::posenc::detail::check_lse_view(*lse, s.batch, s.heads, s.len_q, where, "lse");
    ::posenc::detail::check_no_overlap(where, "lse", *lse, "q", q);
    ::posenc::detail::check_no_overlap(where, "lse", *lse, "k", k);
    ::posenc::detail::check_no_overlap(where, "lse", *lse, "v", v);
    ::posenc::detail::check_no_overlap(where, "lse", *lse, "out", out);
  }
  if (s.batch == 0 || s.len_q == 0) return;

  int sms = 1, shared_optin = 48 * 1024, sm_major = 0;
  device_limits(sms, shared_optin, sm_major);
  const std::size_t shared = kernels::flash_shared_bytes<Acc>(s.dim, s.dim_v);
  ::posenc::detail::require(shared <= static_cast<std::size_t>(shared_optin), where, "dim", s.dim,
                            "with dim_v = " + std::to_string(s.dim_v) + ", the tiles need " +
                                std::to_string(shared) +
                                " bytes of shared memory; this device has " +
                                std::to_string(shared_optin) + " per block");

  kernels::flash_args<T, Acc> a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out.data();
  strides_of(q, a.q_stride);
  strides_of(k, a.k_stride);
  strides_of(v, a.v_stride);
  strides_of(out, a.out_stride);
  a.batch = s.batch;
  a.heads = s.heads;
  a.kv_heads = s.kv_heads;
  a.len_q = s.len_q;
  a.len_k = s.len_k;
  a.dim = s.dim;
  a.dim_v = s.dim_v;
  a.q_offset = s.q_offset;
  a.sm_major = sm_major;
  a.scale = static_cast<Acc>(::posenc::detail::resolve_scale(config.scale, s.dim));
  const attention_mask& mask = config.mask;
  a.causal = mask.causal;

  // host data the kernels read, in stream-ordered scratch memory
  stream_buffer<Index> key_lengths;
  if (!mask.key_lengths.empty()) {
    key_lengths = stream_buffer<Index>(mask.key_lengths.data(), s.batch, stream);
    a.key_lengths = key_lengths.data();
  }
  stream_buffer<unsigned char> allowed;
  if (mask.allowed.size() != 0) {
    std::vector<unsigned char> h(static_cast<std::size_t>(mask.allowed.size()));
    for (Index e = 0; e < mask.allowed.size(); ++e)
      h[static_cast<std::size_t>(e)] = mask.allowed.data()[e] ? 1 : 0;
    allowed = stream_buffer<unsigned char>(h.data(), mask.allowed.size(), stream);
    a.allowed = allowed.data();
  }
  stream_buffer<Acc> additive;
  if (mask.additive.size() != 0) {
    const row_matrix<Acc> h = mask.additive.template cast<Acc>();
    additive = stream_buffer<Acc>(h.data(), h.size(), stream);
    a.additive = additive.data();
  }
  constexpr position_bias form = bias_form_v<Policy>;
  const Index bh = s.batch * s.heads;
  stream_buffer<Acc> bias_values;
  stream_buffer<unsigned char> symmetric;
  if constexpr (form == position_bias::linear_distance) {
    std::vector<Acc> slopes(static_cast<std::size_t>(bh));
    std::vector<unsigned char> sym(static_cast<std::size_t>(bh));
    for (Index b = 0; b < s.batch; ++b)
      for (Index h = 0; h < s.heads; ++h) {
        const auto head = policy.head(b, h, s);
        slopes[static_cast<std::size_t>(b * s.heads + h)] = static_cast<Acc>(head.slope);
        sym[static_cast<std::size_t>(b * s.heads + h)] = head.symmetric ? 1 : 0;
      }
    bias_values = stream_buffer<Acc>(slopes.data(), bh, stream);
    symmetric = stream_buffer<unsigned char>(sym.data(), bh, stream);
    a.bias = kernels::flash_bias::linear_distance;
    a.slopes = bias_values.data();
    a.symmetric = symmetric.data();
  } else if constexpr (std::is_same_v<Policy, t5_bias_policy>) {
    const t5_bucket_config& c = policy.config();
    const Index nb = c.num_buckets;
    std::vector<Acc> table(static_cast<std::size_t>(s.heads * nb));
    for (Index h = 0; h < s.heads; ++h)
      for (Index bucket = 0; bucket < nb; ++bucket)
        table[static_cast<std::size_t>(h * nb + bucket)] =
            static_cast<Acc>(policy.table()(bucket, h));
    bias_values = stream_buffer<Acc>(table.data(), s.heads * nb, stream);
    a.bias = kernels::flash_bias::t5;
    a.t5_table = bias_values.data();
    a.t5 = kernels::make_t5_bucket_params(c.num_buckets, c.max_distance, c.bidirectional);
  } else if constexpr (form == position_bias::distance_table) {
    // every head's table over the same distances j - pos
    std::vector<Acc> tables;
    for (Index b = 0; b < s.batch; ++b)
      for (Index h = 0; h < s.heads; ++h) {
        const auto head = policy.head(b, h, s);
        const Index n = static_cast<Index>(head.bias_by_rel.size());
        if (b == 0 && h == 0) {
          a.rel_min = head.rel_min;
          a.table_len = n;
          tables.reserve(static_cast<std::size_t>(bh * n));
        }
        ::posenc::detail::require(
            head.rel_min == a.rel_min && n == a.table_len, where, "policy rel_min", head.rel_min,
            "every head's distance table must cover the same distances (that of head 0)");
        for (double x : head.bias_by_rel) tables.push_back(static_cast<Acc>(x));
      }
    bias_values = stream_buffer<Acc>(tables.data(), static_cast<Index>(tables.size()), stream);
    a.bias = kernels::flash_bias::distance_table;
    a.tables = bias_values.data();
  }
  if constexpr (is_device_rotary<Policy>::value) {
    static_assert(
        std::is_same_v<typename Policy::embedding_type, rotary_embedding<T, backend::cuda>>,
        "posenc::cuda::flash_multi_head_attention: the rotary_policy's embedding must "
        "have the attention's storage type");
    const Index max_pos = std::max(s.len_k - 1, s.q_offset + s.len_q - 1);
    a.rope = policy.embedding().device_angles(max_pos, stream);
  }

  const Index group = s.heads / s.kv_heads;
  const Index block_rows = kernels::flash_rows(a);
  a.row_blocks = (group * s.len_q + block_rows - 1) / block_rows;
  stream_buffer<Acc> part_out, part_lse;
  if (lse) {
    a.lse = lse->data();
    strides_of(*lse, a.lse_stride);
  }
  a.split_keys = std::max<Index>(F::keys, s.len_k);
  if (s.len_k > 0) {
    a.split_keys = split_keys(a.row_blocks * s.batch * s.kv_heads, s.len_k, options.splits, sms);
    a.splits = (s.len_k + a.split_keys - 1) / a.split_keys;
  }
  if (a.splits > 1) {
    const Index rows = bh * s.len_q;
    part_out = stream_buffer<Acc>(a.splits * rows * s.dim_v, stream);
    part_lse = stream_buffer<Acc>(a.splits * rows, stream);
    a.part_out = part_out.data();
    a.part_lse = part_lse.data();
  }
  kernels::flash_forward(backend::cuda{}, a, stream);
}

}  // namespace flash_detail

/// Flash attention over device views (the file comment): the CPU call's semantics and
/// messages, asynchronous on `stream`.
/// \throws posenc::error on the CPU's validation failures, d or dv above 256, shared memory
///         the device lacks, or a CUDA error
template <class TQ, class TK, class TV, class T, class Policy = no_position_policy>
void flash_multi_head_attention(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                                const strided_view<TV, 4>& v, const strided_view<T, 4>& out,
                                const attention_config& config = {},
                                const Policy& policy = Policy{}, const flash_options& options = {},
                                cudaStream_t stream = nullptr) {
  flash_detail::run<T>(q, k, v, out, static_cast<const strided_view<real_t<T>, 3>*>(nullptr),
                       config, policy, options, stream, "cuda::flash_multi_head_attention");
}

/// As above, and each row's log-sum-exp into lse [B, H, Lq] (real_t<T>, device memory):
/// natural log over the visible keys, -inf for a row that sees no key, NaN for a NaN row.
template <class TQ, class TK, class TV, class T, class Policy = no_position_policy>
void flash_multi_head_attention(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                                const strided_view<TV, 4>& v, const strided_view<T, 4>& out,
                                const strided_view<real_t<T>, 3>& lse,
                                const attention_config& config = {},
                                const Policy& policy = Policy{}, const flash_options& options = {},
                                cudaStream_t stream = nullptr) {
  flash_detail::run<T>(q, k, v, out, &lse, config, policy, options, stream,
                       "cuda::flash_multi_head_attention");
}

/// merge_attention_states (attention/merge.hpp) on device views, asynchronous on `stream`:
/// out may be o_a or o_b itself and lse_out lse_a or lse_b. Arithmetic in double when an
/// output or lse is double, else float.
template <class TA, class LA, class TB, class LB, class TO, class LO>
void merge_attention_states(const strided_view<TA, 4>& o_a, const strided_view<LA, 3>& lse_a,
                            const strided_view<TB, 4>& o_b, const strided_view<LB, 3>& lse_b,
                            const strided_view<TO, 4>& out, const strided_view<LO, 3>& lse_out,
                            cudaStream_t stream = nullptr) {
  static_assert(!std::is_const_v<TO> && !std::is_const_v<LO>,
                "posenc::cuda::merge_attention_states: out and lse_out must be writable");
  const char* where = "cuda::merge_attention_states";
  ::posenc::detail::check_merge(o_a, lse_a, o_b, lse_b, out, lse_out, where);
  ::posenc::detail::check_no_overlap(where, "out", out, "o_a", o_a, true);
  ::posenc::detail::check_no_overlap(where, "out", out, "o_b", o_b, true);
  ::posenc::detail::check_no_overlap(where, "out", out, "lse_a", lse_a);
  ::posenc::detail::check_no_overlap(where, "out", out, "lse_b", lse_b);
  ::posenc::detail::check_no_overlap(where, "lse_out", lse_out, "lse_a", lse_a, true);
  ::posenc::detail::check_no_overlap(where, "lse_out", lse_out, "lse_b", lse_b, true);
  ::posenc::detail::check_no_overlap(where, "lse_out", lse_out, "o_a", o_a);
  ::posenc::detail::check_no_overlap(where, "lse_out", lse_out, "o_b", o_b);
  kernels::merge_args<std::remove_cv_t<TA>, std::remove_cv_t<TB>, TO, std::remove_cv_t<LA>,
                      std::remove_cv_t<LB>, LO>
      a;
  a.o_a = o_a.data();
  a.o_b = o_b.data();
  a.out = out.data();
  a.lse_a = lse_a.data();
  a.lse_b = lse_b.data();
  a.lse_out = lse_out.data();
  flash_detail::strides_of(o_a, a.oa_stride);
  flash_detail::strides_of(o_b, a.ob_stride);
  flash_detail::strides_of(out, a.out_stride);
  flash_detail::strides_of(lse_a, a.la_stride);
  flash_detail::strides_of(lse_b, a.lb_stride);
  flash_detail::strides_of(lse_out, a.lo_stride);
  a.batch = o_a.extent(0);
  a.len = o_a.extent(1);
  a.heads = o_a.extent(2);
  a.dim_v = o_a.extent(3);
  constexpr bool wide = std::is_same_v<real_t<TO>, double> || std::is_same_v<LO, double>;
  kernels::merge_states<std::conditional_t<wide, double, float>>(backend::cuda{}, a, stream);
}

}  // namespace cuda
}  // namespace posenc
