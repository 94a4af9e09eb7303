#pragma once
/// \file
/// RoPE on the GPU: rotary_embedding<Scalar, backend::cuda> and multi_axis_rotary<Scalar,
/// backend::cuda>, the same classes as on the CPU for views that hold device pointers.
///
///     posenc::rotary_embedding<float, posenc::backend::cuda> rope(llama3_config, seq_len);
///     rope.apply_qk(posenc::view_bshd(q_dev, B, L, 32, 128),
///                   posenc::view_bshd(k_dev, B, L, 8, 128), offset, stream);
///
/// What is the same as on the CPU: the configuration and its validation (the same
/// posenc::error messages), every scaling (the frequencies are computed once, on the host, in
/// double), the pairings, partial rotary, offsets and position ids, GQA head counts, in place
/// and out of place, any strides, and float / double / Eigen::half / Eigen::bfloat16 storage
/// computed in real_type. What is on the device: the data, the cos/sin cache and, when given
/// with rope_positions::on_device(), the position ids.
///
/// Results, compared with the CPU (tests/cuda/test_cuda_rotary.cu):
/// - cached mode: the rows are those of the host's scalar-backend cache (libm per pair,
///   computed once and copied), and the rotation is math::rotate_pair_fused, the CPU packet
///   kernels' arithmetic: bit-identical to the host computing that expression from those
///   rows (the CPU SIMD caches build their rows by angle addition, equal or 1 ulp apart);
/// - on the fly (and cached rows past the cache): cos/sin in double by CUDA's libm (within 2
///   double ulp) rounded once: the float32 row equals the host's or differs by 1 ulp.
///
/// Every entry point takes a trailing cudaStream_t (default stream when omitted) and is
/// asynchronous, except that device position ids are checked: the call waits for the
/// kernel and throws posenc::error naming the first negative id (the kernel never uses it).
/// Host ids are copied to the device in the call. Not thread-safe (the cache grows in
/// apply, and the scratch buffers are members): one object per thread or stream.

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../backend/cuda/rotary.cuh"
#include "../../backend/cuda/runtime.cuh"
#include "../../core/backend.hpp"
#include "../../core/error.hpp"
#include "../../core/view.hpp"
#include "../rotary/multi_axis.hpp"
#include "../rotary/rotary.hpp"

namespace posenc {

/// RoPE on device memory; see the file comment and the CPU rotary_embedding.
template <class Scalar>
class rotary_embedding<Scalar, backend::cuda> {
  static_assert(is_storage_v<Scalar>,
                "posenc::rotary_embedding: Scalar must be float, double, Eigen::half or "
                "Eigen::bfloat16");

 public:
  using real_type = real_t<Scalar>;
  /// The host object that holds the configuration and computes the cached rows.
  using host_type = rotary_embedding<Scalar, backend::scalar>;

  explicit rotary_embedding(Index head_dim, Index rotary_dim = -1, double base = 10000.0,
                            rope_pairing pairing = rope_pairing::half, rope_options options = {})
      : host_(head_dim, rotary_dim, base, pairing, options) {
    init();
  }
  rotary_embedding(Index head_dim, rope_frequencies freqs, rope_pairing pairing,
                   rope_options options = {})
      : host_(head_dim, std::move(freqs), pairing, options) {
    init();
  }
  rotary_embedding(const rope_config& config, Index seq_len, rope_options options = {})
      : host_(config, seq_len, options) {
    init();
  }

  Index head_dim() const noexcept { return host_.head_dim(); }
  Index rotary_dim() const noexcept { return host_.rotary_dim(); }
  rope_pairing pairing() const noexcept { return host_.pairing(); }
  const rope_options& options() const noexcept { return host_.options(); }
  const rope_frequencies& frequencies() const noexcept { return host_.frequencies(); }
  /// Positions whose cos/sin rows are on the device (0 on the fly).
  Index cached_rows() const noexcept { return device_rows_; }

  /// Precomputes cos/sin for positions [0, min(max_len, cache_limit)) on the host and copies
  /// them to the device (cached mode; no-op on the fly).
  void reserve(Index max_len, cudaStream_t stream = nullptr) {
    host_.reserve(max_len);
    upload(stream);
  }

  // ---- [L, H, D] and [B, L, H, D] views of device memory ------------------------------

  void apply(const strided_view<Scalar, 3>& x, rope_positions positions = {},
             rope_role role = rope_role::query, cudaStream_t stream = nullptr) {
    apply(as_heads(x), positions, role, stream);
  }
  void apply(const strided_view<const Scalar, 3>& in, const strided_view<Scalar, 3>& out,
             rope_positions positions = {}, rope_role role = rope_role::query,
             cudaStream_t stream = nullptr) {
    apply(as_heads(in), as_heads(out), positions, role, stream);
  }
  void apply(const heads_view<Scalar>& x, rope_positions positions = {},
             rope_role role = rope_role::query, cudaStream_t stream = nullptr) {
    const job jobs[1] = {{x, x, role}};
    run(jobs, 1, positions, false, stream, "rotary_embedding::apply");
  }
  void apply(const heads_view<const Scalar>& in, const heads_view<Scalar>& out,
             rope_positions positions = {}, rope_role role = rope_role::query,
             cudaStream_t stream = nullptr) {
    const job jobs[1] = {{in, out, role}};
    run(jobs, 1, positions, false, stream, "rotary_embedding::apply");
  }
  /// Rotates by -angle in place (see the CPU invert()).
  void invert(const heads_view<Scalar>& x, rope_positions positions = {},
              rope_role role = rope_role::query, cudaStream_t stream = nullptr) {
    const job jobs[1] = {{x, x, role}};
    run(jobs, 1, positions, true, stream, "rotary_embedding::invert");
  }

  /// q [B, L, Hq, D] and k [B, L, Hk, D] in place in one launch.
  void apply_qk(const heads_view<Scalar>& q, const heads_view<Scalar>& k,
                rope_positions positions = {}, cudaStream_t stream = nullptr) {
    const job jobs[2] = {{q, q, rope_role::query}, {k, k, rope_role::key}};
    run(jobs, 2, positions, false, stream, "rotary_embedding::apply_qk");
  }
  void apply_qk(const heads_view<const Scalar>& q_in, const heads_view<Scalar>& q_out,
                const heads_view<const Scalar>& k_in, const heads_view<Scalar>& k_out,
                rope_positions positions = {}, cudaStream_t stream = nullptr) {
    const job jobs[2] = {{q_in, q_out, rope_role::query}, {k_in, k_out, rope_role::key}};
    run(jobs, 2, positions, false, stream, "rotary_embedding::apply_qk");
  }
  void apply_qk(const strided_view<Scalar, 3>& q, const strided_view<Scalar, 3>& k,
                rope_positions positions = {}, cudaStream_t stream = nullptr) {
    apply_qk(as_heads(q), as_heads(k), positions, stream);
  }

  /// Where a kernel that rotates as it loads (cuda::flash_multi_head_attention) finds the
  /// angles: the pairing, and the cos/sin rows on the device, grown first as apply() grows
  /// them for positions up to max_pos (cached mode; -1: as they are), and past them the
  /// frequencies the rows are computed from. Only the angle fields are set.
  kernels::rope_device_args<Scalar, real_type> device_angles(Index max_pos,
                                                             cudaStream_t stream = nullptr) {
    if (options().cache == rope_cache_mode::cached && max_pos >= 0) {
      const Index want = std::min(max_pos, options().cache_limit - 1);
      if (want >= host_.cache().size()) {
        // geometric growth: amortised O(1) rows per decoded token
        host_.reserve(
            std::min(options().cache_limit, std::max(want + 1, 2 * host_.cache().size())));
        upload(stream);
      }
    }
    const rope_frequencies& f = frequencies();
    kernels::rope_device_args<Scalar, real_type> a;
    a.head_dim = head_dim();
    a.pairs = rotary_dim() / 2;
    a.pair_step = pairing() == rope_pairing::half ? 1 : 2;
    a.pair_offset = pairing() == rope_pairing::half ? a.pairs : 1;
    if (options().cache == rope_cache_mode::cached) {
      a.cache_cos_q = rows_[0].data();
      a.cache_sin_q = rows_[1].data();
      a.cache_cos_k = f.has_xpos() ? rows_[2].data() : a.cache_cos_q;
      a.cache_sin_k = f.has_xpos() ? rows_[3].data() : a.cache_sin_q;
      a.cache_rows = device_rows_;
    }
    a.inv_freq = inv_freq_.data();
    a.attention_factor = f.attention_factor;
    a.xpos_scale_base = f.xpos_scale_base;
    a.xpos_gamma = f.xpos_gamma;
    a.float32_reference = options().precision == rope_precision::float32_reference;
    return a;
  }

 private:
  using job = detail::rope_job<Scalar>;

  void init() {
    const Index pairs = rotary_dim() / 2;
    detail::require(pairs <= kernels::rope_device_max_pairs<real_type>(), "rotary_embedding",
                    "rotary_dim", rotary_dim(),
                    "the CUDA kernel holds a token's cos/sin rows in 48 KiB of shared memory: at "
                    "most " +
                        std::to_string(2 * kernels::rope_device_max_pairs<real_type>()) +
                        " for this type");
    inv_freq_ = cuda::device_buffer<double>(pairs);
    cuda::copy_to_device(inv_freq_.data(), frequencies().inv_freq.data(), pairs);
    upload(nullptr);
  }

  /// Copies the host cache's rows to the device when it holds more than the device.
  void upload(cudaStream_t stream) {
    const auto& c = host_.cache();
    if (c.size() <= device_rows_) return;
    const Index values = c.size() * c.pairs();
    const bool xpos = frequencies().has_xpos();
    for (int t = 0; t < (xpos ? 4 : 2); ++t) {
      cuda::device_buffer<real_type> fresh(values);
      const real_type* src = t == 0   ? c.cos(0, rope_role::query)
                             : t == 1 ? c.sin(0, rope_role::query)
                             : t == 2 ? c.cos(0, rope_role::key)
                                      : c.sin(0, rope_role::key);
      cuda::copy_to_device(fresh.data(), src, values, stream);
      rows_[t] = std::move(fresh);
    }
    device_rows_ = c.size();
  }

  static kernels::rope_device_tensor<Scalar> tensor(const job& jb) {
    kernels::rope_device_tensor<Scalar> t;
    t.in = jb.in.data();
    t.out = jb.out.data();
    for (int a = 0; a < 4; ++a) {
      t.in_stride[a] = jb.in.stride(a);
      t.out_stride[a] = jb.out.stride(a);
    }
    t.heads = jb.in.extent(2);
    t.key = jb.role == rope_role::key;
    return t;
  }

  void run(const job* jobs, int count, const rope_positions& positions, bool inverse,
           cudaStream_t stream, const char* where) {
    const Index max_pos =
        detail::validate_rope_jobs(head_dim(), jobs, count, positions, true, where);
    const Index batch = jobs[0].in.extent(0), seq = jobs[0].in.extent(1);
    Index heads = 0;  // of all jobs: with none there is nothing to rotate, whatever seq says
    for (int j = 0; j < count; ++j) heads += jobs[j].in.extent(2);
    if (max_pos < 0 || batch == 0 || seq == 0 || heads == 0) return;
    // host-known positions grow the cache as on the CPU; device ids use what it holds,
    // and their other rows are computed on the fly
    kernels::rope_device_args<Scalar, real_type> a =
        device_angles(max_pos == std::numeric_limits<Index>::max() ? -1 : max_pos, stream);
    for (int j = 0; j < count; ++j) a.tensor[j] = tensor(jobs[j]);
    a.tensors = count;
    a.batch = batch;
    a.seq = seq;
    a.inverse = inverse;
    a.offset = positions.has_ids() ? 0 : positions.offset();
    if (positions.has_ids()) {
      a.ids_count = positions.count();
      if (positions.on_device()) {
        a.ids = positions.ids();
      } else {
        ids_.resize(std::max(ids_.size(), positions.count()));
        cuda::copy_to_device(ids_.data(), positions.ids(), positions.count(), stream);
        a.ids = ids_.data();
      }
    }
    const bool check = positions.on_device() && positions.count() > 0;
    if (check) {
      flag_.arm(stream);
      a.bad_id = flag_.device();
    }
    kernels::rope_rotate(backend::cuda{}, a, stream);
    if (check) report(positions, stream, where, "position_ids[");
  }

  /// Throws posenc::error for the first negative device id the kernel met.
  void report(const rope_positions& positions, cudaStream_t stream, const char* where,
              const char* name) {
    const Index bad = flag_.first_bad(stream);
    if (bad < 0) return;
    Index value = 0;
    cuda::copy_to_host(&value, positions.ids() + bad, 1, stream);
    detail::fail(where, name + std::to_string(bad) + "]", value,
                 "must be >= 0 (device ids: that token was left unrotated)");
  }

  host_type host_;
  Index device_rows_ = 0;
  cuda::device_buffer<real_type> rows_[4];  // cos_q, sin_q, cos_k, sin_k (xPos)
  cuda::device_buffer<double> inv_freq_;
  cuda::device_buffer<Index> ids_;
  cuda::error_flag flag_;
};

/// Multi-axis RoPE (M-RoPE, 2D axial) on device memory: the CPU class's configuration and
/// validation; positions are an [axes, N] matrix, on the host (Eigen, copied in the call)
/// or on the device (apply_device: row-major [axes, N] Index, checked on the device).
template <class Scalar>
class multi_axis_rotary<Scalar, backend::cuda> {
 public:
  using host_type = multi_axis_rotary<Scalar, backend::scalar>;

  multi_axis_rotary(Index head_dim, std::vector<double> inv_freq, std::vector<Index> axis_of_pair,
                    Index axes, rope_pairing pairing = rope_pairing::half,
                    double attention_factor = 1.0)
      : host_(head_dim, std::move(inv_freq), std::move(axis_of_pair), axes, pairing,
              attention_factor) {
    const Index pairs = rotary_dim() / 2;
    detail::require(pairs <= kernels::rope_device_max_pairs<Scalar>(), "multi_axis_rotary",
                    "rotary_dim", rotary_dim(),
                    "the CUDA kernel holds a token's cos/sin rows in 48 KiB of shared memory");
    inv_freq_ = cuda::device_buffer<double>(pairs);
    cuda::copy_to_device(inv_freq_.data(), host_.inv_freq().data(), pairs);
    axis_of_pair_ = cuda::device_buffer<Index>(pairs);
    cuda::copy_to_device(axis_of_pair_.data(), host_.axis_of_pair().data(), pairs);
  }
  /// From a CPU object's configuration (e.g. posenc::qwen2_vl_mrope<Scalar>(...)).
  explicit multi_axis_rotary(const host_type& host)
      : multi_axis_rotary(host.head_dim(), host.inv_freq(), host.axis_of_pair(), host.axes(),
                          host.pairing(), host.attention_factor()) {}

  Index head_dim() const noexcept { return host_.head_dim(); }
  Index rotary_dim() const noexcept { return host_.rotary_dim(); }
  Index axes() const noexcept { return host_.axes(); }
  rope_pairing pairing() const noexcept { return host_.pairing(); }

  /// In place on [B, L, H, D], host positions [axes, L] or [axes, B*L].
  void apply(const heads_view<Scalar>& x, const Eigen::Ref<const rope_axis_positions>& positions,
             cudaStream_t stream = nullptr) {
    run(x, heads_view<Scalar>(), host_positions(x, positions, "multi_axis_rotary::apply", stream),
        positions.cols(), false, stream, "multi_axis_rotary::apply");
  }
  /// In place on q [B, L, Hq, D] and k [B, L, Hk, D], host positions.
  void apply_qk(const heads_view<Scalar>& q, const heads_view<Scalar>& k,
                const Eigen::Ref<const rope_axis_positions>& positions,
                cudaStream_t stream = nullptr) {
    check_qk(q, k, "multi_axis_rotary::apply_qk");
    run(q, k, host_positions(q, positions, "multi_axis_rotary::apply_qk", stream), positions.cols(),
        false, stream, "multi_axis_rotary::apply_qk");
  }
  /// In place on q and k (k may be an empty view), device positions: `count` columns of a
  /// row-major [axes, count] Index matrix at `positions` (count = L or B*L).
  void apply_device(const heads_view<Scalar>& q, const heads_view<Scalar>& k,
                    const Index* positions, Index count, cudaStream_t stream = nullptr) {
    const char* where = "multi_axis_rotary::apply_device";
    if (k.data() != nullptr) check_qk(q, k, where);
    check_views(q, k, count, where);
    detail::require(count == 0 || positions != nullptr, where, "positions", "nullptr",
                    "non-empty positions need memory");
    run(q, k, positions, count, true, stream, where);
  }

 private:
  static void check_qk(const heads_view<Scalar>& q, const heads_view<Scalar>& k,
                       const char* where) {
    detail::require(k.extent(0) == q.extent(0), where, "k.batch", k.extent(0),
                    "must equal q.batch = " + std::to_string(q.extent(0)));
    detail::require(k.extent(1) == q.extent(1), where, "k.seq", k.extent(1),
                    "must equal q.seq = " + std::to_string(q.extent(1)));
    detail::check_no_overlap(where, "k", k, "q", q);
  }

  void check_views(const heads_view<Scalar>& q, const heads_view<Scalar>& k, Index n,
                   const char* where) const {
    const Index batch = q.extent(0), seq = q.extent(1);
    detail::require(q.extent(3) == head_dim(), where, "dim", q.extent(3),
                    "must equal head_dim = " + std::to_string(head_dim()));
    if (k.data() != nullptr)
      detail::require(k.extent(3) == head_dim(), where, "k.dim", k.extent(3),
                      "must equal head_dim = " + std::to_string(head_dim()));
    detail::require(n == seq || n == batch * seq, where, "positions.cols()", n,
                    "must equal seq = " + std::to_string(seq) +
                        " or batch * seq = " + std::to_string(batch * seq));
  }

  /// Validates host positions as the CPU does and copies them to the device.
  const Index* host_positions(const heads_view<Scalar>& x,
                              const Eigen::Ref<const rope_axis_positions>& positions,
                              const char* where, cudaStream_t stream) {
    detail::require(positions.rows() == axes(), where, "positions.rows()", positions.rows(),
                    "must equal axes = " + std::to_string(axes()));
    check_views(x, heads_view<Scalar>(), positions.cols(), where);
    for (Index r = 0; r < positions.rows(); ++r)
      for (Index l = 0; l < positions.cols(); ++l)
        if (positions(r, l) < 0)
          detail::fail(where, "positions(" + std::to_string(r) + ", " + std::to_string(l) + ")",
                       positions(r, l), "must be >= 0");
    const rope_axis_positions dense = positions;  // row-major, contiguous
    ids_.resize(std::max(ids_.size(), dense.size()));
    cuda::copy_to_device(ids_.data(), dense.data(), dense.size(), stream);
    return ids_.data();
  }

  void run(const heads_view<Scalar>& q, const heads_view<Scalar>& k, const Index* ids, Index n,
           bool check, cudaStream_t stream, const char* where) {
    if (q.extent(0) == 0 || q.extent(1) == 0) return;
    kernels::rope_device_args<Scalar, Scalar> a;
    a.tensors = 0;
    for (const heads_view<Scalar>* v : {&q, &k}) {
      if (v->data() == nullptr) continue;  // apply(): q only
      kernels::rope_device_tensor<Scalar>& t = a.tensor[a.tensors++];
      t.in = v->data();
      t.out = v->data();
      for (int d = 0; d < 4; ++d) t.in_stride[d] = t.out_stride[d] = v->stride(d);
      t.heads = v->extent(2);
    }
    a.batch = q.extent(0);
    a.seq = q.extent(1);
    a.head_dim = head_dim();
    a.pairs = rotary_dim() / 2;
    a.pair_step = pairing() == rope_pairing::half ? 1 : 2;
    a.pair_offset = pairing() == rope_pairing::half ? a.pairs : 1;
    a.ids = ids;
    a.ids_count = n;
    a.axes = axes();
    a.axis_of_pair = axis_of_pair_.data();
    a.inv_freq = inv_freq_.data();
    a.attention_factor = host_.attention_factor();
    if (check) {
      flag_.arm(stream);
      a.bad_id = flag_.device();
    }
    kernels::rope_rotate(backend::cuda{}, a, stream);
    if (!check) return;
    const Index bad = flag_.first_bad(stream);
    if (bad < 0) return;
    Index value = 0;
    cuda::copy_to_host(&value, ids + bad, 1, stream);
    detail::fail(where,
                 "positions(" + std::to_string(bad / n) + ", " + std::to_string(bad % n) + ")",
                 value, "must be >= 0 (device positions: that token was left unrotated)");
  }

  host_type host_;
  cuda::device_buffer<double> inv_freq_;
  cuda::device_buffer<Index> axis_of_pair_;
  cuda::device_buffer<Index> ids_;
  cuda::error_flag flag_;
};

}  // namespace posenc
