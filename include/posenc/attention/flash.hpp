#pragma once
/// \file
/// Fast tiled (flash-style) attention on the CPU: the same results as the reference
/// attention (attention.hpp, multi_head.hpp) within float32 rounding, without ever
/// forming the [Lq, Lk] logits, on any number of threads.
///
///     out = softmax(Q·Kᵀ·scale + bias + mask) · V
///
///     q   [B, Lq, H,    d ]   (posenc::heads_view: view_bshd / view_bhsd / view_shd)
///     k   [B, Lk, H_kv, d ]
///     v   [B, Lk, H_kv, dv]
///     out [B, Lq, H,    dv]   query i at position q_offset + i, key j at position j
///
/// Semantics are the reference's: scale (0 = 1/sqrt(d)), causal with query offset,
/// padding (key_lengths), boolean and additive masks, grouped/multi-query heads, and a
/// row that sees no key gives zeros; a NaN or +inf logit gives a NaN row. Float,
/// Eigen::half and Eigen::bfloat16 storage compute in float32 (running sums in double);
/// double storage computes in double.
///
/// Work is split into (batch, head, block of 128 query rows) units (Dao et al. 2022,
/// "FlashAttention"), each an online softmax over tiles of keys (backend/scalar/flash.hpp;
/// the avx2, avx512 and neon tags have a lane-layout tile kernel for plain, RoPE,
/// absolute, ALiBi and T5 calls, backend/simd/flash.hpp); causal tiles past a block's
/// last visible key are skipped. Calls with at most 8 query rows (decoding) instead split
/// the keys into fixed chunks of 1024 and merge the partial softmax results with a
/// log-sum-exp merge (Dao et al. 2023, "Flash-Decoding"):
///
///     M = max_c m_c      l = Σ_c l_c·exp(m_c − M)      O = Σ_c O_c·exp(m_c − M) / l
///
/// Threads (`flash_config::threads`, std::thread) take units from a shared counter; every
/// unit is computed the same way whichever thread runs it and merges happen in a fixed
/// order, so the output is bitwise identical for any thread count. The policy's head
/// objects are made once per (batch, head) and their const hooks (transform_query,
/// transform_keys, bias) are then called from several threads at once: a user policy
/// must keep them free of shared mutable state.
///
/// Position policies (policy.hpp) inside the tiles:
///   - alibi_policy and t5_bias_policy: the bias is generated per tile from j − pos
///     (ALiBi: m·(j − pos) or −m·|j − pos|; T5: a contiguous run of the head's bucket
///     lookup); any other policy with only `has_bias` calls `head.bias(pos, j)` per key;
///   - query/key transforms (rotary_policy, absolute_policy): applied in double as the
///     queries are loaded and once per head to the keys ("pre-rotation");
///   - shaw_relative: fused: scale·q_i·a^K per clip bucket once per block of rows, and the
///     value term through per-bucket weight sums rescaled with the running maximum;
///   - transformer_xl_relative (and any other policy with a score or value term): not
///     supported here — a compile-time error says so; use multi_head_attention.
///
/// Extra memory: O(threads · 512 · (d + dv + 128)) for the tiles (decode: H times 8 rows
/// per thread), plus a transformed key copy per (batch, key head) where the policy
/// transforms the keys (per query head where the transform may differ between the heads
/// of a group: Policy::keys_per_query_head): O(B · H_kv · Lk · d). Inputs that are not
/// contiguous rows of the working type (16-bit storage, strided views) are never copied
/// whole: a prefill converts each key tile's rows into the tile buffers as it visits them,
/// a decode each row in registers (or in a one-row buffer).

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "../backend/scalar/flash.hpp"
#include "../backend/simd/flash.hpp"
#include "../backend/simd/lowp.hpp"
#include "../core/backend.hpp"
#include "../core/error.hpp"
#include "../core/view.hpp"
#include "../encoding/alibi.hpp"
#include "../encoding/shaw.hpp"
#include "../encoding/t5_bias.hpp"
#include "attention.hpp"
#include "mask.hpp"
#include "multi_head.hpp"
#include "policy.hpp"

namespace posenc {

/// Execution settings of the tiled kernel (they never change the result).
struct flash_config {
  /// Worker threads: 1 runs on the calling thread; 0 uses std::thread::hardware_concurrency().
  Index threads = 1;
};

namespace detail {
namespace flash {

/// Runs f(unit, worker) for unit in [0, units) on up to `threads` threads (the caller is
/// worker 0). Units are taken in increasing order from a shared counter. If the system
/// refuses a thread, the ones already started and the caller share the units: the same
/// work and the same result, on fewer threads (never std::terminate on a joinable thread).
template <class F>
void parallel_for(Index units, Index threads, F&& f) {
  const Index workers = std::max<Index>(1, std::min(threads, units));
  std::atomic<Index> next{0};
  auto work = [&](Index worker) {
    for (Index u = next.fetch_add(1); u < units; u = next.fetch_add(1)) f(u, worker);
  };
  if (workers == 1) {
    work(0);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(workers - 1));
  for (Index w = 1; w < workers; ++w) {
    try {
      pool.emplace_back(work, w);
    } catch (const std::system_error&) {
      break;
    }
  }
  work(0);
  for (auto& t : pool) t.join();
}

/// True when x is contiguous rows of Real, which the kernel reads where they are.
template <class Real, class T>
bool reads_in_place(const strided_view<T, 2>& x) noexcept {
  if constexpr (std::is_same_v<std::remove_cv_t<T>, Real>)
    return x.stride(1) == 1 && x.stride(0) >= x.extent(1) && x.data() != nullptr;
  else
    return false;
}

/// The innermost vector of x at the leading indices, in working precision, into dst:
/// packets of Backend where it has unit stride (half and bfloat16 widen exactly;
/// simd::widen), else value by value.
template <class Backend, class Real, class T, int Rank, class... I>
void convert_vector(const strided_view<T, Rank>& x, Real* dst, I... leading) noexcept {
  const Index n = x.extent(Rank - 1);
  if constexpr (std::is_same_v<Real, float>) {
    if (x.inner_contiguous()) {
      simd::widen<Backend, std::remove_cv_t<T>>(x.vector_ptr(leading...), n, dst);
      return;
    }
  }
  for (Index c = 0; c < n; ++c) dst[c] = to_real<Real>(x(leading..., c));
}

/// kv_block::convert for a [keys, dim] view of T at `source`: rows [j0, j0 + n) into dst
/// (row stride ldd) by convert_vector (exact).
template <class Backend, class Real, class T>
void convert_rows(const void* source, Index j0, Index n, Real* dst, Index ldd) noexcept {
  const auto& x = *static_cast<const strided_view<T, 2>*>(source);
  for (Index j = 0; j < n; ++j) convert_vector<Backend>(x, dst + j * ldd, j0 + j);
}

/// Working-precision keys or values of one head: a map of the caller's memory when it
/// reads in place, else x's rows converted tile by tile as the kernels visit them
/// (kv_block::tile); x must outlive the block.
template <class Backend, class Real, class T>
kv_block<Real> kv_source(const strided_view<T, 2>& x) noexcept {
  kv_block<Real> blk;
  blk.rows = x.extent(0);
  blk.cols = x.extent(1);
  if constexpr (std::is_same_v<std::remove_cv_t<T>, Real>) {
    if (reads_in_place<Real>(x)) {
      blk.data = x.data();
      blk.ld = x.stride(0);
      return blk;
    }
  }
  blk.convert = &convert_rows<Backend, Real, T>;
  blk.source = &x;
  return blk;
}

/// Decode's keys (or values), row by row, for accumulate_heads: dot(h, j, q) and
/// axpy(h, j, a, o) take row j of query head h's block (hcs[h].*block) where it is; a
/// block that converts (kv_block::convert: 16-bit or strided storage of T) is read
/// straight from the caller's row, widened in registers, when the backend has packet
/// loads for T and the rows have unit stride, else converted into a one-row buffer as it
/// is visited (the query heads of a group, visited in turn, share the conversion). Every
/// path ends in the same float kernel (simd::dot / simd::axpy with packets, Eigen's
/// without), so 16-bit and strided inputs give exactly the float result of the same values.
template <class Backend, class Policy, class Real, class T>
struct kv_row_source {
  using value_type = std::remove_cv_t<T>;
  using view = strided_view<T, 2>;  // what kv_source gave a converting block as its source
  static constexpr bool packet_rows = simd::has_widening_ops_v<Backend, Real>;
  static constexpr bool packet_storage =
      packet_rows && simd::has_widening_ops_v<Backend, value_type>;
  using crow = Eigen::Map<const Eigen::Matrix<Real, 1, Eigen::Dynamic>>;

  kv_row_source(const head_context<Policy, Real>* heads,
                kv_block<Real> head_context<Policy, Real>::*blk)
      : hcs(heads), block(blk), n((heads->*blk).cols) {
    const kv_block<Real>& b0 = heads->*blk;  // every head's block is alike (one call's layout)
    widen_in_registers = packet_storage && !b0.data && source(b0).inner_contiguous();
    if (!b0.data && !widen_in_registers) buf.resize(static_cast<std::size_t>(n));
  }

  /// q · row j of head h (q: cols values).
  Real dot(Index h, Index j, const Real* q) noexcept {
    if constexpr (packet_storage)
      if (widen_in_registers) return simd::dot<Backend>(q, stored_row(h, j), n);
    const Real* r = row(h, j);
    if constexpr (packet_rows)
      return simd::dot<Backend>(q, r, n);
    else
      return crow(q, n).dot(crow(r, n));
  }
  /// o += a · row j of head h.
  void axpy(Index h, Index j, Real a, Real* o) noexcept {
    if constexpr (packet_storage)
      if (widen_in_registers) return simd::axpy<Backend>(a, stored_row(h, j), n, o);
    const Real* r = row(h, j);
    if constexpr (packet_rows)
      simd::axpy<Backend>(a, r, n, o);
    else
      Eigen::Map<Eigen::Matrix<Real, 1, Eigen::Dynamic>>(o, n).noalias() += a * crow(r, n);
  }
  void prefetch(Index h, Index j) const noexcept {
    const kv_block<Real>& b = hcs[h].*block;
    if (b.data)
      prefetch_row(b.row(j), n);
    else if (source(b).inner_contiguous())
      prefetch_row(source(b).vector_ptr(j), n);
  }

 private:
  const head_context<Policy, Real>* hcs;
  kv_block<Real> head_context<Policy, Real>::*block;
  Index n;
  bool widen_in_registers = false;
  std::vector<Real> buf;  // one converted row
  const void* last_source = nullptr;
  Index last_j = -1;

  static const view& source(const kv_block<Real>& b) noexcept {
    return *static_cast<const view*>(b.source);
  }
  const value_type* stored_row(Index h, Index j) const noexcept {
    return source(hcs[h].*block).vector_ptr(j);
  }
  const Real* row(Index h, Index j) noexcept {
    const kv_block<Real>& b = hcs[h].*block;
    if (b.data) return b.row(j);
    if (b.source != last_source || j != last_j) {
      b.tile(j, 1, buf.data(), n);
      last_source = b.source;
      last_j = j;
    }
    return buf.data();
  }
};

template <class Policy>
constexpr void check_flash_policy() {
  static_assert(!Policy::has_value_term || is_shaw<Policy>::value,
                "posenc::flash_attention: this policy has a value term the tiled kernel "
                "cannot fuse (only shaw_relative's is); use posenc::multi_head_attention");
  static_assert(!Policy::has_score_term || is_shaw<Policy>::value,
                "posenc::flash_attention: this policy has a score term the tiled kernel "
                "cannot fuse (transformer_xl_relative is reference-only); use "
                "posenc::multi_head_attention");
}

/// The whole multi-head call, after validation.
template <class Backend, class Policy, class TQ, class TK, class TV, class TO>
void run(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k, const strided_view<TV, 4>& v,
         const strided_view<TO, 4>& out, const attention_shape& s, const attention_options& opt,
         const Policy& policy, Index threads) {
  using Real = real_t<std::remove_cv_t<TQ>>;
  using T = tiles<Real>;
  if (s.batch == 0 || s.len_q == 0 || s.dim_v == 0) return;
  if (threads == 0) threads = std::max<Index>(1, std::thread::hardware_concurrency());
  const Index group = s.heads / s.kv_heads, bh = s.batch * s.heads;

  call_info ci;
  ci.shape = s;
  ci.scale = resolve_scale(opt.scale, s.dim);
  ci.mask = &opt.mask;

  // Heads of the policy, once per (batch, query head).
  std::vector<head_context<Policy, Real>> heads(static_cast<std::size_t>(bh));
  Index shaw_rows = 0;
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h) {
      auto& hc = heads[static_cast<std::size_t>(b * s.heads + h)];
      hc.head = policy.head(b, h, s);
      hc.batch = b;
      hc.head_index = h;
      if constexpr (std::is_same_v<Policy, t5_bias_policy>) {
        const auto& by_rel = hc.head.bias_by_rel;
        hc.t5_reversed.assign(by_rel.size() + 16, 0.0f);
        std::transform(by_rel.rbegin(), by_rel.rend(), hc.t5_reversed.begin(),
                       [](double x) { return static_cast<float>(x * log2_e); });
      }
      if constexpr (is_shaw<Policy>::value) {
        hc.shaw_ak_t = hc.head.ak.transpose().template cast<Real>();
        hc.shaw_av = hc.head.av.template cast<Real>();
        shaw_rows = hc.head.clip.rows();
      }
    }

  // Keys and values in working precision, per (batch, key head). Keys the policy
  // transforms are a transformed copy: per key head, or per query head where the
  // transform may differ between the heads of a group (Policy::keys_per_query_head).
  // Other inputs not read in place are converted a key tile at a time inside the kernels
  // (kv_block::tile), or, in decode, which reads each key once, row by row as it visits
  // them (kv_row_source): never as a whole copy, which would cost more memory than the
  // tiles by O(N·d) per key head (a 16-bit cache twice over in float) and, in decode, more
  // time than the attention.
  constexpr bool transformed = Policy::transforms_keys;
  constexpr bool per_query_head = transformed && Policy::keys_per_query_head;
  std::vector<strided_view<TK, 2>> k_views;
  std::vector<strided_view<TV, 2>> v_views;
  k_views.reserve(static_cast<std::size_t>(s.batch * s.kv_heads));
  v_views.reserve(static_cast<std::size_t>(s.batch * s.kv_heads));
  for (Index u = 0; u < s.batch * s.kv_heads; ++u) {  // kv_source keeps their addresses
    k_views.push_back(slice_bh(k, u / s.kv_heads, u % s.kv_heads));
    v_views.push_back(slice_bh(v, u / s.kv_heads, u % s.kv_heads));
  }
  // copy c: query head c (per_query_head), else key head c, transformed by the head of
  // its group's first query head
  const Index copies = !transformed ? 0 : per_query_head ? bh : s.batch * s.kv_heads;
  std::vector<rmat<Real>> k_copy(static_cast<std::size_t>(copies));
  parallel_for(copies, threads, [&](Index c, Index) {
    const Index u = per_query_head ? c : c / s.kv_heads * s.heads + c % s.kv_heads * group;
    const auto ks = slice_bh(k, u / s.heads, (u % s.heads) / group);
    dmatrix kd(ks.extent(0), ks.extent(1));
    for (Index r = 0; r < kd.rows(); ++r)
      for (Index col = 0; col < kd.cols(); ++col) kd(r, col) = to_real<double>(ks(r, col));
    heads[static_cast<std::size_t>(u)].head.transform_keys(kd);
    k_copy[static_cast<std::size_t>(c)] = kd.template cast<Real>();
  });
  for (Index u = 0; u < bh; ++u) {
    const auto kv = static_cast<std::size_t>(u / s.heads * s.kv_heads + (u % s.heads) / group);
    auto& hc = heads[static_cast<std::size_t>(u)];
    if constexpr (transformed) {
      const rmat<Real>& kc = k_copy[per_query_head ? static_cast<std::size_t>(u) : kv];
      hc.k.data = kc.data();
      hc.k.rows = kc.rows();
      hc.k.cols = kc.cols();
      hc.k.ld = kc.cols();
    } else {
      hc.k = kv_source<Backend, Real>(k_views[kv]);
    }
    hc.v = kv_source<Backend, Real>(v_views[kv]);
  }

  const Index workers = std::max<Index>(1, threads);
  std::vector<workspace<Real>> ws(static_cast<std::size_t>(workers));
  for (auto& w : ws) w.reserve(s.dim, s.dim_v, shaw_rows);
  const Backend tag{};

  if (s.len_q <= T::decode_rows && s.len_k > T::decode_chunk) {
    // Decode: split the keys into fixed chunks, then merge the partial softmax results.
    const Index chunks = (s.len_k + T::decode_chunk - 1) / T::decode_chunk;
    const Index nb = s.len_q;
    struct partial {
      std::vector<Real> m;
      std::vector<double> l;
      rmat<Real> o, wb;
    };
    std::vector<partial> parts(static_cast<std::size_t>(bh * chunks));
    for (partial& p : parts) {  // sized up front: the workers only copy into them
      p.m.resize(static_cast<std::size_t>(nb));
      p.l.resize(static_cast<std::size_t>(nb));
      p.o.resize(nb, s.dim_v);
      if constexpr (is_shaw<Policy>::value) p.wb.resize(nb, shaw_rows);
    }
    // A unit is (batch, chunk) over every head: the heads of one token lie side by side
    // in [B, L, H, d] buffers, so visiting the keys one by one across all heads
    // (accumulate_heads) streams whole rows of K and V (a head alone reads one short run
    // per 4 KiB-strided row, which the hardware prefetchers follow poorly).
    std::vector<std::vector<workspace<Real>>> hws(static_cast<std::size_t>(workers));
    for (auto& wh : hws) {
      wh.resize(static_cast<std::size_t>(s.heads));
      for (auto& w : wh) w.reserve(s.dim, s.dim_v, shaw_rows, T::decode_rows);
    }
    parallel_for(s.batch * chunks, threads, [&](Index u, Index worker) {
      const Index b = u / chunks, k0 = (u % chunks) * T::decode_chunk;
      const head_context<Policy, Real>* hb = &heads[static_cast<std::size_t>(b * s.heads)];
      auto& wh = hws[static_cast<std::size_t>(worker)];
      Index k_end = k0;
      // The portable kernel's rows (the lane kernels take blocks of more than decode_rows
      // rows only): begin_block with the scalar tag says so.
      for (Index h = 0; h < s.heads; ++h) {
        const Index lim = begin_block(hb[h], ci, slice_bh(q, b, h), 0, nb,
                                      wh[static_cast<std::size_t>(h)], backend::scalar{});
        k_end = std::max(k_end, std::min(k0 + T::decode_chunk, lim));
      }
      // every head of the batch, key by key (the mask's limits do not depend on the head)
      kv_row_source<Backend, Policy, Real, TK> kr(hb, &head_context<Policy, Real>::k);
      kv_row_source<Backend, Policy, Real, TV> vr(hb, &head_context<Policy, Real>::v);
      if (k0 < k_end) accumulate_heads(hb, kr, vr, s.heads, ci, nb, k0, k_end, wh.data());
      for (Index h = 0; h < s.heads; ++h) {
        const workspace<Real>& w = wh[static_cast<std::size_t>(h)];
        partial& p = parts[static_cast<std::size_t>((b * s.heads + h) * chunks + u % chunks)];
        std::copy(w.m.begin(), w.m.begin() + nb, p.m.begin());
        std::copy(w.l.begin(), w.l.begin() + nb, p.l.begin());
        p.o = w.o.topRows(nb);
        if constexpr (is_shaw<Policy>::value) p.wb = w.wb.topRows(nb);
      }
    });
    parallel_for(bh, threads, [&](Index u, Index worker) {
      const auto& hc = heads[static_cast<std::size_t>(u)];
      workspace<Real>& w = ws[static_cast<std::size_t>(worker)];
      w.o.topRows(nb).setZero();
      if constexpr (is_shaw<Policy>::value) w.wb.topRows(nb).setZero();
      for (Index r = 0; r < nb; ++r) {
        const std::size_t ur = static_cast<std::size_t>(r);
        Real mx = -std::numeric_limits<Real>::infinity();
        for (Index c = 0; c < chunks; ++c)
          if (parts[static_cast<std::size_t>(u * chunks + c)].l[ur] > 0)
            mx = std::max(mx, parts[static_cast<std::size_t>(u * chunks + c)].m[ur]);
        double l = 0.0;
        for (Index c = 0; c < chunks; ++c) {
          const partial& p = parts[static_cast<std::size_t>(u * chunks + c)];
          if (std::isnan(p.l[ur])) l = p.l[ur];  // a NaN logit in any chunk: NaN row
          if (!(p.l[ur] > 0)) continue;
          const Real f = std::exp(p.m[ur] - mx);
          l += p.l[ur] * static_cast<double>(f);
          w.o.row(r) += f * p.o.row(r);
          if constexpr (is_shaw<Policy>::value) w.wb.row(r) += f * p.wb.row(r);
        }
        w.l[ur] = l;
      }
      finish_block(hc, 0, nb, w, slice_bh(out, hc.batch, hc.head_index), tag);
    });
    return;
  }

  // Prefill: units of (block of query rows, batch, head), the last blocks first (under a
  // causal mask they see the most keys), so the costly units start early.
  const Index blocks = (s.len_q + T::block_q - 1) / T::block_q;
  parallel_for(blocks * bh, threads, [&](Index u, Index worker) {
    const Index blk = blocks - 1 - u / bh;
    const auto& hc = heads[static_cast<std::size_t>(u % bh)];
    workspace<Real>& w = ws[static_cast<std::size_t>(worker)];
    const Index r0 = blk * T::block_q, nb = std::min(T::block_q, s.len_q - r0);
    const Index max_lim = begin_block(hc, ci, slice_bh(q, hc.batch, hc.head_index), r0, nb, w, tag);
    // The block's query rows are read, and its output rows written, once each, in short
    // runs (one head's d values in every H·d row): they missed the cache and took 8-10 % of
    // a 512-query attention (perf, AVX2). So during the last key tile (split at a tile
    // boundary: the same tiles, the same result), ask for the output rows this unit will
    // write and for the query rows of the unit this worker is likely to take next (units
    // go out in order to `workers` threads); earlier, K and V would evict them from L2.
    const Index last_tile = std::max<Index>(0, max_lim - 1) / T::block_k * T::block_k;
    accumulate(hc, ci, r0, nb, Index(0), last_tile, w, tag);
    prefetch_rows<cache_hint::write>(slice_bh(out, hc.batch, hc.head_index), r0, nb);
    if (const Index un = u + workers; un < blocks * bh) {
      const auto& hn = heads[static_cast<std::size_t>(un % bh)];
      const Index rn = (blocks - 1 - un / bh) * T::block_q;
      prefetch_rows<cache_hint::read>(slice_bh(q, hn.batch, hn.head_index), rn, T::block_q);
    }
    accumulate(hc, ci, r0, nb, last_tile, max_lim, w, tag);
    finish_block(hc, r0, nb, w, slice_bh(out, hc.batch, hc.head_index), tag);
  });
}

}  // namespace flash
}  // namespace detail

/// Tiled multi-head batched attention over strided views (shapes in the file comment):
/// the reference multi_head_attention's results, computed block by block.
///
/// \param opt scale (0 = 1/sqrt(d)), query offset, mask
/// \param policy position scheme: no_position, alibi_policy, t5_bias_policy,
///        rotary_policy, absolute_policy, shaw_relative, or any bias/transform-only policy
/// \param cfg threads (results do not depend on it)
/// \throws posenc::error on mismatched shapes, bad scale, mask, policy or thread count
template <class Backend = default_backend, class TQ, class TK, class TV, class TO,
          class Policy = no_position>
void flash_multi_head_attention(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                                const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                                const attention_options& opt = {}, const Policy& policy = Policy{},
                                const flash_config& cfg = {}) {
  static_assert(!std::is_const_v<TO>, "posenc::flash_multi_head_attention: out must be writable");
  static_assert(std::is_same_v<std::remove_cv_t<TQ>, std::remove_cv_t<TK>> &&
                    std::is_same_v<std::remove_cv_t<TQ>, std::remove_cv_t<TV>>,
                "posenc::flash_multi_head_attention: q, k and v must have the same scalar type");
  detail::flash::check_flash_policy<Policy>();
  const char* where = "flash_multi_head_attention";
  detail::require(cfg.threads >= 0, where, "threads", cfg.threads,
                  "must be >= 0 (0 = hardware concurrency)");
  const attention_shape s = detail::multi_head_shape(q, k, v, out, opt, where);
  detail::check_attention(s, opt, policy, where);
  detail::flash::run<Backend>(q, k, v, out, s, opt, policy, cfg.threads);
}

/// Tiled multi-head attention for one sequence with the heads packed along the columns:
/// q [Lq, H·d], k [Lk, H_kv·d], v [Lk, H_kv·dv] (row-major, head-major columns).
/// Returns [Lq, H·dv]. Inputs that are row-major with unit inner stride are not copied.
template <class Backend = default_backend, class DQ, class DK, class DV, class Policy = no_position>
attention_matrix<detail::scalar_of<DQ>> flash_multi_head_attention(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    Index heads, Index kv_heads, const attention_options& opt = {}, const Policy& policy = Policy{},
    const flash_config& cfg = {}) {
  using Scalar = detail::scalar_of<DQ>;
  static_assert(std::is_same_v<Scalar, detail::scalar_of<DK>> &&
                    std::is_same_v<Scalar, detail::scalar_of<DV>>,
                "posenc::flash_multi_head_attention: q, k and v must have the same scalar type");
  const char* where = "flash_multi_head_attention";
  detail::require(heads >= 1, where, "heads", heads, "must be >= 1");
  detail::require(kv_heads >= 1, where, "kv_heads", kv_heads, "must be >= 1");
  detail::require(q.cols() % heads == 0, where, "q.cols()", q.cols(), "must be divisible by heads");
  detail::require(k.cols() % kv_heads == 0, where, "k.cols()", k.cols(),
                  "must be divisible by kv_heads");
  detail::require(v.cols() % kv_heads == 0, where, "v.cols()", v.cols(),
                  "must be divisible by kv_heads");
  detail::require(k.rows() == v.rows(), where, "v.rows()", v.rows(), "must equal k.rows()");
  using cref = Eigen::Ref<const attention_matrix<Scalar>>;
  const cref qe(q), ke(k), ve(v);
  const Index d = q.cols() / heads, dv = v.cols() / kv_heads;
  attention_matrix<Scalar> out(q.rows(), heads * dv);
  const auto qv = strided_view<const Scalar, 4>(qe.data(), {1, qe.rows(), heads, d},
                                                {0, qe.outerStride(), d, 1});
  const auto kv =
      strided_view<const Scalar, 4>(ke.data(), {1, ke.rows(), kv_heads, k.cols() / kv_heads},
                                    {0, ke.outerStride(), k.cols() / kv_heads, 1});
  const auto vv = strided_view<const Scalar, 4>(ve.data(), {1, ve.rows(), kv_heads, dv},
                                                {0, ve.outerStride(), dv, 1});
  auto ov = view_shd(out.data(), out.rows(), heads, dv);
  flash_multi_head_attention<Backend>(qv, kv, vv, ov, opt, policy, cfg);
  return out;
}

/// Tiled single-head attention: q [Lq, d], k [Lk, d], v [Lk, dv] (row-major, one token
/// per row), returns [Lq, dv]. As posenc::attention (a per-head policy must be narrowed
/// to one head, e.g. `alibi.only_head(h)`), computed by the tiled kernel.
template <class Backend = default_backend, class DQ, class DK, class DV, class Policy = no_position>
attention_matrix<detail::scalar_of<DQ>> flash_attention(const Eigen::MatrixBase<DQ>& q,
                                                        const Eigen::MatrixBase<DK>& k,
                                                        const Eigen::MatrixBase<DV>& v,
                                                        const attention_options& opt = {},
                                                        const Policy& policy = Policy{},
                                                        const flash_config& cfg = {}) {
  detail::require(k.cols() == q.cols(), "flash_attention", "k.cols()", k.cols(),
                  "must equal q.cols() (the head dim d)");
  return flash_multi_head_attention<Backend>(q, k, v, 1, 1, opt, policy, cfg);
}

}  // namespace posenc
