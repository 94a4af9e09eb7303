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
/// A call runs in named steps: make_plan (the validated call, the policy's heads and the
/// keys and values they read: what any driver reuses), then prefill or decode on CPU
/// threads. Prefill splits the work into (batch, head, block of 128 query rows) units (Dao
/// et al. 2022, "FlashAttention"), each an online softmax over tiles of keys
/// (backend/flash.hpp: the portable tile kernel, and the lane-layout kernel of the tags
/// with packets for calls without a score or value term); causal tiles past a block's
/// last visible key are skipped. Calls with at most 8 query rows (decoding) instead split
/// the keys into fixed chunks of 1024 and merge the partial softmax states with a
/// log-sum-exp merge (Dao et al. 2023, "Flash-Decoding"; math/softmax.hpp):
///
///     M = max_c m_c      l = Σ_c l_c·exp(m_c − M)      O = Σ_c O_c·exp(m_c − M) / l
///
/// Threads (`flash_options::threads`: started per call, or a thread_pool's) take units from
/// a shared counter; every unit is computed the same way whichever thread runs it and
/// merges happen in a fixed order, so the output is bitwise identical for any thread count
/// and with or without a pool. The policy's head
/// objects are made once per (batch, head) and their const hooks (transform_query,
/// transform_keys, bias) are then called from several threads at once: a user policy
/// must keep them free of shared mutable state.
///
/// Position policies inside the tiles, by their traits (core/policy.hpp), whatever the
/// policy's type:
///   - bias_form linear_distance (alibi_policy) and distance_table (t5_bias_policy): the
///     bias is generated per tile from j − pos (slope·distance; a contiguous run of the
///     head's table); any other policy with only `has_bias` calls `head.bias(pos, j)` per
///     key;
///   - query/key transforms (rotary_policy, absolute_policy): applied in double as the
///     queries are loaded and once per head to the keys ("pre-rotation");
///   - clipped_embeddings (shaw_policy): fused: scale·q_i·a^K per clip bucket once per
///     block of rows, and the value term through per-bucket weight sums rescaled with the
///     running maximum;
///   - any other score or value term (transformer_xl_policy): not supported here — a
///     compile-time error says so; use multi_head_attention.
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

#include "../backend/flash.hpp"
#include "../core/attention_config.hpp"
#include "../core/backend.hpp"
#include "../core/cpu.hpp"
#include "../core/error.hpp"
#include "../core/policy.hpp"
#include "../core/thread_pool.hpp"
#include "../core/types.hpp"
#include "../core/view.hpp"
#include "../math/softmax.hpp"
#include "attention.hpp"
#include "merge.hpp"
#include "multi_head.hpp"

namespace posenc {

/// How the tiled kernel runs a call (they never change the result).
struct flash_options {
  /// Worker threads: 1 runs on the calling thread; 0 uses std::thread::hardware_concurrency()
  /// (at most max_threads).
  /// A call starts no more threads than it has units of work (and allocates one workspace
  /// per started thread), so a large value costs nothing on a small problem.
  Index threads = 1;
  /// Threads started once and reused (core/thread_pool.hpp), or none: each call starts its
  /// own. With a pool a call runs on at most `threads` of the pool's threads (0: all of
  /// them); the pool is not owned and must outlive the calls that name it.
  thread_pool* pool = nullptr;
  /// The largest accepted `threads`: more is a posenc::error, not thousands of threads.
  static constexpr Index max_threads = thread_pool::max_threads;
};

/// The former name of flash_options.
using flash_config [[deprecated("use posenc::flash_options")]] = flash_options;

namespace detail {
namespace flash {

using namespace ::posenc::kernels::flash;  // the tile kernels this driver runs

/// The threads a call's passes run on: at most `threads`, the pool's where it has one.
struct thread_team {
  Index threads = 1;
  thread_pool* pool = nullptr;
  /// The same pool, at most n threads.
  thread_team at_most(Index n) const noexcept { return {std::min(threads, n), pool}; }
};

/// Runs f(unit, worker) for unit in [0, units) on up to `team.threads` threads (the caller
/// is worker 0): the pool's, or started here when there is none or it is busy with another
/// call. Units are taken in increasing order from a shared counter. If the system refuses
/// a thread, the ones already started and the caller share the units: the same work and
/// the same result, on fewer threads (never std::terminate on a joinable thread).
template <class F>
void parallel_for(Index units, const thread_team& team, F&& f) {
  const Index workers = std::max<Index>(1, std::min(team.threads, units));
  std::atomic<Index> next{0};
  auto work = [&](Index worker) {
    for (Index u = next.fetch_add(1); u < units; u = next.fetch_add(1)) f(u, worker);
  };
  if (workers == 1) {
    work(0);
    return;
  }
  if (team.pool && team.pool->try_run(workers, work)) return;
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

template <class Policy>
constexpr bool flash_takes() {
  constexpr position_bias form = bias_form_v<Policy>;
  return (!Policy::has_value_term && !Policy::has_score_term) ||
         form == position_bias::clipped_embeddings;
}

template <class Policy>
constexpr void check_flash_policy() {
  constexpr position_bias form = bias_form_v<Policy>;
  static_assert(!Policy::has_value_term || form == position_bias::clipped_embeddings,
                "posenc::flash_attention: this policy has a value term the tiled kernel "
                "cannot fuse (only clipped relative embeddings', as shaw_policy's, are); use "
                "posenc::multi_head_attention");
  static_assert(!Policy::has_score_term || form == position_bias::clipped_embeddings,
                "posenc::flash_attention: this policy has a score term the tiled kernel "
                "cannot fuse (transformer_xl_policy; transformer_xl_relative is reference-only); "
                "use posenc::multi_head_attention");
}

/// One validated call, planned: what does not depend on how it is run. The shape, scale
/// and mask (ci); one head context per (batch, query head), with the policy's head, the
/// data the tiles read from it, and where its keys and values are read; the transformed
/// key copies those read (Policy::transforms_keys); and whether the call takes the
/// split-key decode path. A driver (the CPU threads below, or another device's) runs the
/// plan's units; movable (the blocks point into the vectors' heap buffers, not into it).
template <class Policy, class Real, class TK, class TV>
struct plan {
  using tiles_type = tiles<Real>;
  call_info ci;
  Index group = 1;      ///< query heads per key head
  Index shaw_rows = 0;  ///< clipped embeddings: table rows (0: none)
  bool decode = false;  ///< at most decode_rows queries: the split-key decode path
  Index chunks = 0;     ///< decode: key chunks of decode_chunk keys
  /// decode: visit one KV group's heads at a time (each head's keys a stream of their
  /// own) rather than every head key by key; for head-major K/V ([B, H, L, d])
  bool heads_outer = false;
  std::vector<head_context<Policy, Real>> heads;  ///< b * heads + h
  std::vector<strided_view<TK, 2>> k_views;       ///< b * kv_heads + g (the blocks read them)
  std::vector<strided_view<TV, 2>> v_views;
  std::vector<row_matrix<Real>> k_copy;  ///< transformed keys, per key head or query head

  const attention_shape& shape() const noexcept { return ci.shape; }
  const head_context<Policy, Real>& head(Index u) const noexcept {
    return heads[static_cast<std::size_t>(u)];
  }
};

/// Whether several query rows read each key and value row: a GQA group's heads, or several
/// queries (else one query of MHA: one row per key row).
constexpr bool key_rows_shared(const attention_shape& s) noexcept {
  return s.len_q > 1 || s.heads > s.kv_heads;
}

/// Whether a call takes the split-key decode path: at most decode_rows queries over a long
/// cache (more than decode_chunk keys), or, with float rows on the x86 SIMD backends, over
/// a short one (from decode_min_keys keys) where several query rows share each key row (a
/// GQA group, several queries): decode's kernels read such a row once for all of them,
/// prefill's per-head products once per query head (up to 3.6x over 128-1024 keys on
/// AVX-512 and AVX2, docs/benchmarks.md). One query of MHA reads each row once either way and
/// stays on prefill there, as do the portable backend (its decode loops ran 0.57-0.75x
/// Eigen's products on one query of head-major GQA) and NEON (not measured). A function of the
/// backend and the shape alone: never of the thread count.
template <class Backend, class Real>
constexpr bool takes_decode(const attention_shape& s) noexcept {
  using T = tiles<Real>;
  constexpr bool short_caches =
      std::is_base_of_v<backend::avx2, Backend> && std::is_same_v<Real, float>;
  return s.len_q <= T::decode_rows &&
         (s.len_k > T::decode_chunk ||
          (short_caches && key_rows_shared(s) && s.len_k >= T::decode_min_keys));
}

/// Plans a validated call: the policy's heads, once per (batch, query head), with the
/// data the tiles read directly; the keys and values in working precision per (batch, key
/// head). Keys the policy transforms are a transformed copy (made on `threads` threads):
/// per key head, or per query head where the transform may differ between the heads of a
/// group (Policy::keys_per_query_head). Other inputs not read in place are converted a key
/// tile at a time inside the kernels (kv_block::tile), or, in decode, which reads each key
/// once, row by row as it visits them (kv_row_source): never as a whole copy, which would
/// cost more memory than the tiles by O(N·d) per key head (a 16-bit cache twice over in
/// float) and, in decode, more time than the attention.
template <class Backend, class Real, class Policy, class TK, class TV>
plan<Policy, Real, TK, TV> make_plan(const strided_view<TK, 4>& k, const strided_view<TV, 4>& v,
                                     const attention_shape& s, const attention_config& config,
                                     const Policy& policy, const thread_team& team) {
  using T = tiles<Real>;
  plan<Policy, Real, TK, TV> p;
  p.ci.shape = s;
  p.ci.scale = resolve_scale(config.scale, s.dim);
  p.ci.mask = &config.mask;
  p.group = s.heads / s.kv_heads;
  p.decode = takes_decode<Backend, Real>(s);
  p.chunks = (s.len_k + T::decode_chunk - 1) / T::decode_chunk;
  // Decode streams the rows in the order they lie: key by key across the heads where a
  // token's heads sit side by side ([B, L, H, d], a KV cache kept token by token), head by
  // head where each head's keys do ([B, H, L, d], PyTorch's past_key_values). The other
  // order reads one short run of every head's stream at once: head-major half and
  // bfloat16 caches decoded 1.4-1.5x slower so on Zen 4, d = 64 1.3x (docs/benchmarks.md).
  // Keys a policy transforms are read from a per-head copy: then the values' layout decides.
  const auto key_stride_shorter = [&](const auto& x) {
    return s.kv_heads > 1 && std::abs(x.stride(1)) < std::abs(x.stride(2));
  };
  p.heads_outer = key_stride_shorter(v) && (Policy::transforms_keys || key_stride_shorter(k));
  const Index bh = s.batch * s.heads, group = p.group;
  p.heads.resize(static_cast<std::size_t>(bh));
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h) {
      auto& hc = p.heads[static_cast<std::size_t>(b * s.heads + h)];
      hc.head = policy.head(b, h, s);
      hc.batch = b;
      hc.head_index = h;
      if constexpr (bias_form_v<Policy> == position_bias::distance_table) {
        const auto& by_rel = hc.head.bias_by_rel;
        hc.table_reversed.assign(by_rel.size() + 16, 0.0f);
        std::transform(by_rel.rbegin(), by_rel.rend(), hc.table_reversed.begin(),
                       [](double x) { return static_cast<float>(x * log2_e); });
      }
      if constexpr (clipped_v<Policy>) {
        hc.shaw_ak_t = hc.head.ak.transpose().template cast<Real>();
        hc.shaw_av = hc.head.av.template cast<Real>();
        p.shaw_rows = hc.head.clip.rows();
      }
    }

  constexpr bool transformed = Policy::transforms_keys;
  constexpr bool per_query_head = transformed && Policy::keys_per_query_head;
  p.k_views.reserve(static_cast<std::size_t>(s.batch * s.kv_heads));
  p.v_views.reserve(static_cast<std::size_t>(s.batch * s.kv_heads));
  for (Index u = 0; u < s.batch * s.kv_heads; ++u) {  // kv_source keeps their addresses
    p.k_views.push_back(slice_bh(k, u / s.kv_heads, u % s.kv_heads));
    p.v_views.push_back(slice_bh(v, u / s.kv_heads, u % s.kv_heads));
  }
  // copy c: query head c (per_query_head), else key head c, transformed by the head of
  // its group's first query head
  const Index copies = !transformed ? 0 : per_query_head ? bh : s.batch * s.kv_heads;
  p.k_copy.resize(static_cast<std::size_t>(copies));
  parallel_for(copies, team, [&](Index c, Index) {
    const Index u = per_query_head ? c : c / s.kv_heads * s.heads + c % s.kv_heads * group;
    const auto ks = slice_bh(k, u / s.heads, (u % s.heads) / group);
    dmatrix kd(ks.extent(0), ks.extent(1));
    for (Index r = 0; r < kd.rows(); ++r)
      for (Index col = 0; col < kd.cols(); ++col) kd(r, col) = to_real<double>(ks(r, col));
    p.heads[static_cast<std::size_t>(u)].head.transform_keys(kd);
    p.k_copy[static_cast<std::size_t>(c)] = kd.template cast<Real>();
  });
  for (Index u = 0; u < bh; ++u) {
    const auto kv = static_cast<std::size_t>(u / s.heads * s.kv_heads + (u % s.heads) / group);
    auto& hc = p.heads[static_cast<std::size_t>(u)];
    if constexpr (transformed) {
      const row_matrix<Real>& kc = p.k_copy[per_query_head ? static_cast<std::size_t>(u) : kv];
      hc.k.data = kc.data();
      hc.k.rows = kc.rows();
      hc.k.cols = kc.cols();
      hc.k.ld = kc.cols();
    } else {
      hc.k = kv_source<Backend, Real>(p.k_views[kv]);
    }
    hc.v = kv_source<Backend, Real>(p.v_views[kv]);
  }
  return p;
}

/// One workspace per worker, for blocks of up to `rows` query rows.
template <class Policy, class Real, class TK, class TV>
std::vector<workspace<Real>> make_workspaces(const plan<Policy, Real, TK, TV>& p, Index workers,
                                             Index rows = tiles<Real>::block_q) {
  std::vector<workspace<Real>> ws(static_cast<std::size_t>(workers));
  for (auto& w : ws) w.reserve(p.shape().dim, p.shape().dim_v, p.shaw_rows, rows);
  return ws;
}

/// Writes the log-sum-exp of rows [r0, r0 + nb) of a finished block (lse: null for none).
/// A linear-distance bias was generated shifted by a row constant (the row's largest bias is
/// 0: math::alibi_reference), which softmax ignores but the log-sum-exp must add back.
template <class Policy, class Real, class TL>
void write_lse(const head_context<Policy, Real>& hc, const call_info& ci, Index r0, Index nb,
               const workspace<Real>& w, const strided_view<TL, 3>* lse) noexcept {
  if (lse == nullptr) return;
  for (Index r = 0; r < nb; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    double x = math::log_sum_exp(w.m[ur], w.l[ur], w.lanes);
    if constexpr (bias_form_v<Policy> == position_bias::linear_distance) {
      const Index pos = ci.shape.q_offset + r0 + r, last = w.lim[ur] - 1;
      if (last >= 0)
        x -= hc.head.slope *
             static_cast<double>(pos - math::alibi_reference(pos, last, hc.head.symmetric));
    }
    (*lse)(hc.batch, hc.head_index, r0 + r) = static_cast<TL>(x);
  }
}

/// A row whose result the working precision may have got wrong where the reference's
/// double would not: (batch * heads + head, query row).
struct row_id {
  Index head_unit, row;
};

/// The rows every worker noted, in one list.
inline std::vector<row_id> join(const std::vector<std::vector<row_id>>& parts) {
  std::vector<row_id> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

/// True when row r of a finished block (query row i of `out`) shows that the working
/// precision overflowed: an infinite running maximum or a non-finite sum (a logit or a
/// partial dot product past float's range: inf - inf = NaN), no weight although keys are
/// visible (every logit overflowed to -inf), or a non-finite output (the weighted sum of
/// values overflowed). NaN inputs show the same signs; their recomputation gives NaN again,
/// as the reference does. Checked once per row after its block: O(dv), off the key loop.
template <class Real, class TO>
bool overflowed(const workspace<Real>& w, Index r, const strided_view<TO, 2>& out,
                Index i) noexcept {
  const auto ur = static_cast<std::size_t>(r);
  const double l = w.l[ur];
  if (!std::isfinite(l) || w.m[ur] == std::numeric_limits<Real>::infinity()) return true;
  if (l == 0.0) return w.lim[ur] > 0;
  for (Index c = 0; c < out.extent(1); ++c)
    if (!std::isfinite(to_real<double>(out(i, c)))) return true;
  return false;
}

/// Appends the rows of a finished block that overflowed (see overflowed) to `redo`.
template <class Real, class TO>
void note_overflows(const workspace<Real>& w, Index unit, Index r0, Index nb,
                    const strided_view<TO, 2>& out, std::vector<row_id>& redo) {
  if constexpr (!std::is_same_v<Real, double>)  // double is the reference's own precision
    for (Index r = 0; r < nb; ++r)
      if (overflowed(w, r, out, r0 + r)) redo.push_back({unit, r0 + r});
}

/// Prefill: units of (block of query rows, batch, head), the last blocks first (under a
/// causal mask they see the most keys), so the costly units start early; each unit is one
/// online softmax over its visible key tiles on the Backend's tile kernel.
template <class Backend, class Policy, class Real, class TK, class TV, class TQ, class TO, class TL>
std::vector<row_id> prefill(const plan<Policy, Real, TK, TV>& p, const strided_view<TQ, 4>& q,
                            const strided_view<TO, 4>& out, const strided_view<TL, 3>* lse,
                            const thread_team& team) {
  using T = tiles<Real>;
  const attention_shape& s = p.shape();
  const Index bh = s.batch * s.heads;
  const Index blocks = (s.len_q + T::block_q - 1) / T::block_q;
  // one workspace per thread that has a unit to run (parallel_for starts no more)
  const Index workers = std::max<Index>(1, std::min(team.threads, blocks * bh));
  std::vector<workspace<Real>> ws = make_workspaces(p, workers);
  std::vector<std::vector<row_id>> redo(static_cast<std::size_t>(workers));
  const Backend tag{};
  parallel_for(blocks * bh, team, [&](Index u, Index worker) {
    const Index blk = blocks - 1 - u / bh;
    const auto& hc = p.head(u % bh);
    workspace<Real>& w = ws[static_cast<std::size_t>(worker)];
    const Index r0 = blk * T::block_q, nb = std::min(T::block_q, s.len_q - r0);
    const Index max_lim =
        begin_block(hc, p.ci, slice_bh(q, hc.batch, hc.head_index), r0, nb, w, tag);
    // The block's query rows are read, and its output rows written, once each, in short
    // runs (one head's d values in every H·d row), which missed the cache. So during the
    // last key tile (split at a tile boundary: the same tiles, the same result), ask for
    // the output rows this unit will write and for the query rows of the unit this worker
    // is likely to take next (units go out in order to `workers` threads); earlier, K and
    // V would evict them from L2.
    const Index last_tile = std::max<Index>(0, max_lim - 1) / T::block_k * T::block_k;
    accumulate(hc, p.ci, r0, nb, Index(0), last_tile, w, tag);
    prefetch_rows<cache_hint::write>(slice_bh(out, hc.batch, hc.head_index), r0, nb);
    if (const Index un = u + workers; un < blocks * bh) {
      const auto& hn = p.head(un % bh);
      const Index rn = (blocks - 1 - un / bh) * T::block_q;
      prefetch_rows<cache_hint::read>(slice_bh(q, hn.batch, hn.head_index), rn, T::block_q);
    }
    accumulate(hc, p.ci, r0, nb, last_tile, max_lim, w, tag);
    const auto o = slice_bh(out, hc.batch, hc.head_index);
    finish_block(hc, r0, nb, w, o, tag);
    write_lse(hc, p.ci, r0, nb, w, lse);
    note_overflows(w, u % bh, r0, nb, o, redo[static_cast<std::size_t>(worker)]);
  });
  return join(redo);
}

/// Decode: the keys split into fixed chunks of decode_chunk, each chunk's partial softmax
/// state (m, l, O) computed for every head of a batch item, then the states of each
/// (batch, head) merged in chunk order (math/softmax.hpp), so the result does not depend
/// on the thread count.
template <class Backend, class Policy, class Real, class TK, class TV, class TQ, class TO, class TL>
std::vector<row_id> decode(const plan<Policy, Real, TK, TV>& p, const strided_view<TQ, 4>& q,
                           const strided_view<TO, 4>& out, const strided_view<TL, 3>* lse,
                           const thread_team& team) {
  using T = tiles<Real>;
  const attention_shape& s = p.shape();
  const Index bh = s.batch * s.heads;
  const Index chunks = p.chunks, nb = s.len_q;
  // one workspace set per thread that has a unit in either pass (parallel_for starts no
  // more): at most a unit per (batch, chunk, head)
  const Index units_by_chunk = s.batch * chunks;
  const Index workers = std::max<Index>(1, std::min(team.threads, units_by_chunk * s.heads));
  // the partial states (m, l, O) of every (batch, head, chunk), nb rows each from row
  // ((b · heads + h) · chunks + c) · nb: a few buffers sized up front (a call over a short
  // cache spent about a tenth of its time in malloc with a set of buffers per state)
  const Index states = bh * chunks * nb;
  std::vector<Real> part_m(static_cast<std::size_t>(states));
  std::vector<double> part_l(static_cast<std::size_t>(states));
  row_matrix<Real> part_o(states, s.dim_v), part_wb;
  if constexpr (clipped_v<Policy>) part_wb.resize(states, p.shaw_rows);
  // the query heads that read the same key rows: a GQA group, unless the policy transforms
  // the keys per query head
  const Index key_group =
      Policy::transforms_keys && Policy::keys_per_query_head ? Index(1) : p.group;
  // one query row per key row and per value row (MHA, one query): accumulate_one_query,
  // with two workspace sets of every head per thread (a segment's values are added while
  // the next segment's keys are read)
  const bool one_query = !key_rows_shared(s);
  // Otherwise a unit is (batch, chunk) over every head: the heads of one token lie side by
  // side in [B, L, H, d] buffers, so visiting the keys one by one across all heads
  // (accumulate_heads) streams whole rows of K and V (a head alone reads one short run per
  // 4 KiB-strided row, which the hardware prefetchers follow poorly). Where each KV group
  // is read alone anyway (p.heads_outer), a unit is (batch, chunk, KV group); where
  // (batch, chunk) units would leave threads idle (a short cache: one chunk), the heads
  // are cut into as many runs of whole KV groups as give each thread a unit. Units run in
  // the same order, and a head's state depends on its own rows only: the same bits. A
  // thread holds a workspace per head of its unit.
  Index groups_per_unit = p.heads_outer ? Index(1) : s.kv_heads;
  if (!p.heads_outer && units_by_chunk < team.threads) {
    const Index per_chunk =
        std::min(s.kv_heads, (team.threads + units_by_chunk - 1) / units_by_chunk);
    groups_per_unit = (s.kv_heads + per_chunk - 1) / per_chunk;
  }
  const Index unit_heads = one_query ? s.heads : groups_per_unit * p.group;
  std::vector<std::vector<workspace<Real>>> hws(static_cast<std::size_t>(workers));
  for (auto& wh : hws) wh = make_workspaces(p, (one_query ? 2 : 1) * unit_heads, T::decode_rows);
  const auto save_state = [&](const workspace<Real>& w, Index b, Index h, Index c) {
    const Index at = ((b * s.heads + h) * chunks + c) * nb;
    std::copy(w.m.begin(), w.m.begin() + nb, part_m.begin() + at);
    std::copy(w.l.begin(), w.l.begin() + nb, part_l.begin() + at);
    part_o.middleRows(at, nb) = w.o.topRows(nb);
    if constexpr (clipped_v<Policy>) part_wb.middleRows(at, nb) = w.wb.topRows(nb);
  };
  if (one_query) {
    // A unit is a run of chunks of one batch item, its segments (key_segment: a chunk of
    // every head, or with p.heads_outer of a few heads, span by span) read in one pipeline,
    // so that only the unit's first key tile and last value tile are read alone. One
    // thread takes every chunk in one run; several take a chunk a unit, which they share
    // out as they go (runs of about chunks / 4, two units per thread, ran 0.90-0.99x at
    // two threads head-major: docs/benchmarks-history.md). The segments' results do not
    // depend on the runs (accumulate_one_query).
    const Index run = team.threads <= 1 ? chunks : Index(1);
    const Index runs = (chunks + run - 1) / run;
    const Index units = s.batch * runs;
    // Head-major, a few heads at a time, key by key across them: the K and V rows of two
    // heads are four ascending streams, which Zen 3 reads faster than two (1.05-1.23x from
    // memory, where four heads' eight streams ran 0.84-0.94x and eight heads' 0.6-0.7x:
    // docs/benchmarks.md, the roofline's streams likewise) and Zen 4 slower (one head
    // 1.06-1.37x): the CPU tuning's decode_one_query_heads, read once per call.
    const Index tuned_heads = cpu::tuning().decode_one_query_heads.load(std::memory_order_relaxed);
    const Index span = p.heads_outer ? std::clamp(tuned_heads, Index(1), s.heads) : s.heads;
    parallel_for(units, team, [&](Index u, Index worker) {
      const Index b = u / runs, c0 = (u % runs) * run, c1 = std::min(chunks, c0 + run);
      const head_context<Policy, Real>* hb = &p.head(b * s.heads);
      workspace<Real>* wh = hws[static_cast<std::size_t>(worker)].data();
      // segments in order: chunk by chunk over every head, or span heads at a time over the
      // chunks; each segment begun takes the workspace set the pending one does not hold
      Index next_h = 0, next_c = c0, set = 0;
      const auto begin_next = [&](key_segment<Policy, Real>& seg) {
        while (next_c < c1 && next_h < s.heads) {
          const Index h0 = next_h, c = next_c, k0 = c * T::decode_chunk;
          const Index count = std::min(span, s.heads - h0);
          if (++next_c == c1 && p.heads_outer) {
            next_c = c0;
            next_h += count;
          }
          seg.hcs = hb + h0;
          seg.ws = wh + set * s.heads + h0;
          seg.h0 = h0;
          seg.count = count;
          seg.kbeg = k0;
          seg.kend = k0;
          seg.tag = c;
          for (Index i = 0; i < count; ++i) {
            const Index lim = begin_block(hb[h0 + i], p.ci, slice_bh(q, b, h0 + i), 0, nb,
                                          seg.ws[i], backend::scalar{});
            seg.kend = std::max(seg.kend, std::min(k0 + T::decode_chunk, lim));
          }
          if (seg.kend > seg.kbeg) {
            set ^= 1;
            return true;
          }
          for (Index i = 0; i < count; ++i) save_state(seg.ws[i], b, h0 + i, c);  // no key
        }
        return false;
      };
      const auto save_done = [&](const key_segment<Policy, Real>& seg) {
        for (Index i = 0; i < seg.count; ++i) save_state(seg.ws[i], b, seg.h0 + i, seg.tag);
      };
      kv_row_source<Backend, Policy, Real, TK> kr(hb, &head_context<Policy, Real>::k);
      kv_row_source<Backend, Policy, Real, TV> vr(hb, &head_context<Policy, Real>::v);
      accumulate_one_query<Policy, Real>(kr, vr, p.ci, begin_next, save_done);
    });
  } else {
    const Index cuts = (s.heads + unit_heads - 1) / unit_heads;  // units per (batch, chunk)
    // row pointers for accumulate_heads, per worker
    std::vector<head_rows<Real>> rows(static_cast<std::size_t>(workers),
                                      head_rows<Real>(s.heads * nb));
    parallel_for(units_by_chunk * cuts, team, [&](Index u, Index worker) {
      const Index b = u / (chunks * cuts), c = u / cuts % chunks, h0 = u % cuts * unit_heads;
      const Index count = std::min(unit_heads, s.heads - h0), k0 = c * T::decode_chunk;
      const head_context<Policy, Real>* hb = &p.head(b * s.heads);
      // the unit's heads' workspaces: head h0 + i's is wh[i]
      workspace<Real>* wh = hws[static_cast<std::size_t>(worker)].data();
      Index k_end = k0;
      // The portable kernel's rows (the lane kernels take blocks of more than decode_rows
      // rows only): begin_block with the scalar tag says so.
      for (Index h = h0; h < h0 + count; ++h) {
        const Index lim =
            begin_block(hb[h], p.ci, slice_bh(q, b, h), 0, nb, wh[h - h0], backend::scalar{});
        k_end = std::max(k_end, std::min(k0 + T::decode_chunk, lim));
      }
      // the unit's heads key by key (every head, a run of KV groups, or one); the mask's
      // limits do not depend on the head
      if (k0 < k_end) {
        kv_row_source<Backend, Policy, Real, TK> kr(hb + h0, &head_context<Policy, Real>::k);
        kv_row_source<Backend, Policy, Real, TV> vr(hb + h0, &head_context<Policy, Real>::v);
        accumulate_heads(hb + h0, kr, vr, count, key_group, p.group, p.ci, nb, k0, k_end, wh,
                         rows[static_cast<std::size_t>(worker)]);
      }
      for (Index h = h0; h < h0 + count; ++h) save_state(wh[h - h0], b, h, c);
    });
  }
  // the merge needs a block's row state only (nb <= decode_rows rows, no tiles): sized so,
  // a call allocates and touches kilobytes here, not a prefill workspace per thread
  std::vector<workspace<Real>> ws = make_workspaces(p, workers, T::decode_rows);
  std::vector<std::vector<row_id>> redo(static_cast<std::size_t>(workers));
  const Backend tag{};
  // The merge reads bh * chunks states of nb x dim_v values: below about 128k values one
  // thread merges them in about the time a second thread takes to start and join (35 us
  // on Zen 4), so a call starts threads once, not twice. The states are merged the same
  // way on any thread.
  const thread_team merge_team =
      bh * chunks * nb * s.dim_v < (Index(1) << 17) ? team.at_most(1) : team;
  parallel_for(bh, merge_team, [&](Index u, Index worker) {
    const auto& hc = p.head(u);
    workspace<Real>& w = ws[static_cast<std::size_t>(worker)];
    w.o.topRows(nb).setZero();
    if constexpr (clipped_v<Policy>) w.wb.topRows(nb).setZero();
    for (Index r = 0; r < nb; ++r) {
      const std::size_t ur = static_cast<std::size_t>(r);
      Real mx = -std::numeric_limits<Real>::infinity();
      const auto state = [&](Index c) { return (u * chunks + c) * nb + r; };
      for (Index c = 0; c < chunks; ++c) {
        const auto at = static_cast<std::size_t>(state(c));
        if (part_l[at] > 0) mx = std::max(mx, part_m[at]);
      }
      double l = 0.0;
      for (Index c = 0; c < chunks; ++c) {
        const Index at = state(c);
        const double lc = part_l[static_cast<std::size_t>(at)];
        if (std::isnan(lc)) l = lc;  // a NaN logit in any chunk: NaN row
        if (!(lc > 0)) continue;
        const Real f = math::rescale(part_m[static_cast<std::size_t>(at)], mx);
        l += lc * static_cast<double>(f);
        w.o.row(r) += f * part_o.row(at);
        if constexpr (clipped_v<Policy>) w.wb.row(r) += f * part_wb.row(at);
      }
      w.l[ur] = l;
      w.m[ur] = mx;
      w.lim[ur] = ::posenc::detail::visible_limit(*p.ci.mask, hc.batch, s.q_offset + r, s.len_k);
    }
    w.lanes = false;  // the merged states are in base e, as the portable kernel keeps them
    const auto o = slice_bh(out, hc.batch, hc.head_index);
    finish_block(hc, 0, nb, w, o, tag);
    write_lse(hc, p.ci, 0, nb, w, lse);
    note_overflows(w, u, Index(0), nb, o, redo[static_cast<std::size_t>(worker)]);
  });
  return join(redo);
}

/// Recomputes the rows `redo` in double, the reference's precision, on the portable
/// kernel: the same policy, mask and key range, one row at a time. Only rows the working
/// precision overflowed get here (see overflowed), so the fast path keeps its speed and a
/// finite input never becomes a silent NaN.
template <class Policy, class TQ, class TK, class TV, class TO, class TL>
void recompute_in_double(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                         const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                         const attention_shape& s, const attention_config& config,
                         const Policy& policy, const thread_team& team,
                         const strided_view<TL, 3>* lse, const std::vector<row_id>& redo) {
  const auto p = make_plan<backend::scalar, double>(k, v, s, config, policy, team);
  const Index rows = static_cast<Index>(redo.size());
  // full-size workspaces: the key tiles converted to double (kv_block::tile) live in them
  std::vector<workspace<double>> ws =
      make_workspaces(p, std::max<Index>(1, std::min(team.threads, rows)));
  const backend::scalar tag{};
  parallel_for(rows, team, [&](Index n, Index worker) {
    const row_id& id = redo[static_cast<std::size_t>(n)];
    const auto& hc = p.head(id.head_unit);
    workspace<double>& w = ws[static_cast<std::size_t>(worker)];
    const Index lim =
        begin_block(hc, p.ci, slice_bh(q, hc.batch, hc.head_index), id.row, 1, w, tag);
    accumulate(hc, p.ci, id.row, 1, Index(0), lim, w, tag);
    finish_block(hc, id.row, 1, w, slice_bh(out, hc.batch, hc.head_index), tag);
    write_lse(hc, p.ci, id.row, 1, w, lse);
  });
}

/// The whole multi-head call, after validation: plan, then decode or prefill.
template <class Backend, class Policy, class TQ, class TK, class TV, class TO, class TL = float>
void run(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k, const strided_view<TV, 4>& v,
         const strided_view<TO, 4>& out, const attention_shape& s, const attention_config& config,
         const Policy& policy, thread_team team, const strided_view<TL, 3>* lse = nullptr) {
  using Real = real_t<std::remove_cv_t<TQ>>;
  if (s.batch == 0 || s.len_q == 0) return;
  if (s.dim_v == 0 && lse == nullptr) return;
  if (team.threads == 0)  // every thread of the pool, or one per hardware thread
    team.threads =
        team.pool ? team.pool->size() : detail::hardware_threads(flash_options::max_threads);
  std::vector<row_id> redo;
  {
    const auto p = make_plan<Backend, Real>(k, v, s, config, policy, team);
    redo =
        p.decode ? decode<Backend>(p, q, out, lse, team) : prefill<Backend>(p, q, out, lse, team);
  }
  if (!redo.empty()) recompute_in_double(q, k, v, out, s, config, policy, team, lse, redo);
}

/// The public calls' validation (the same messages with or without lse), then run().
template <class Backend, class TQ, class TK, class TV, class TO, class TL, class Policy>
void checked_run(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                 const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                 const strided_view<TL, 3>* lse, const attention_config& config,
                 const Policy& policy, const flash_options& options) {
  static_assert(!std::is_const_v<TO> && !std::is_const_v<TL>,
                "posenc::flash_multi_head_attention: out and lse must be writable");
  static_assert(std::is_same_v<std::remove_cv_t<TQ>, std::remove_cv_t<TK>> &&
                    std::is_same_v<std::remove_cv_t<TQ>, std::remove_cv_t<TV>>,
                "posenc::flash_multi_head_attention: q, k and v must have the same scalar type");
  check_flash_policy<Policy>();
  const char* where = "flash_multi_head_attention";
  require(options.threads >= 0 && options.threads <= flash_options::max_threads, where, "threads",
          options.threads, "must be in [0, 1024] (0 = hardware concurrency)");
  const attention_shape s = multi_head_shape(q, k, v, out, config, where);
  check_attention(s, config, policy, where);
  check_no_overlap(where, "out", out, "q", q);
  check_no_overlap(where, "out", out, "k", k);
  check_no_overlap(where, "out", out, "v", v);
  if (lse) {
    check_lse_view(*lse, s.batch, s.heads, s.len_q, where, "lse");
    check_no_overlap(where, "lse", *lse, "q", q);
    check_no_overlap(where, "lse", *lse, "k", k);
    check_no_overlap(where, "lse", *lse, "v", v);
    check_no_overlap(where, "lse", *lse, "out", out);
  }
  run<Backend>(q, k, v, out, s, config, policy, thread_team{options.threads, options.pool}, lse);
}

}  // namespace flash
}  // namespace detail

/// Whether the tiled kernel takes a policy: any but one with a score or value term other
/// than clipped relative embeddings (transformer_xl_policy is reference-only).
template <class Policy>
inline constexpr bool flash_supports_v = detail::flash::flash_takes<Policy>();

/// Tiled multi-head batched attention over strided views (shapes in the file comment):
/// the reference multi_head_attention's results, computed block by block.
///
/// \param config scale (0 = 1/sqrt(d)), query offset, mask
/// \param policy position scheme: no_position_policy, alibi_policy, t5_bias_policy,
///        rotary_policy, absolute_policy, shaw_policy, or any policy whose terms the
///        tiles can take (core/policy.hpp)
/// \param options threads, and a thread_pool to run them on (results do not depend on it)
/// \throws posenc::error on mismatched shapes, an output that shares memory with an
///         input, bad scale, mask, policy or thread count
template <class Backend = default_backend, class TQ, class TK, class TV, class TO,
          class Policy = no_position_policy>
void flash_multi_head_attention(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                                const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                                const attention_config& config = {},
                                const Policy& policy = Policy{},
                                const flash_options& options = {}) {
  detail::flash::checked_run<Backend>(
      q, k, v, out, static_cast<const strided_view<float, 3>*>(nullptr), config, policy, options);
}

/// As above, and also writes each query row's log-sum-exp of its logits, lse(b, h, i) =
/// log Σ_j exp(logit_ij) (natural log over the visible keys; -inf for a row that sees no key,
/// NaN for a NaN row), into `lse` [B, H, Lq] (float or double; view_bhs). With it, results
/// over disjoint key ranges merge exactly (merge_attention_states, attention/merge.hpp).
/// \throws posenc::error as above, and for lse extents other than [B, H, Lq] or an lse that
///         shares memory with an input or out
template <class Backend = default_backend, class TQ, class TK, class TV, class TO, class TL,
          class Policy = no_position_policy>
void flash_multi_head_attention(const strided_view<TQ, 4>& q, const strided_view<TK, 4>& k,
                                const strided_view<TV, 4>& v, const strided_view<TO, 4>& out,
                                const strided_view<TL, 3>& lse, const attention_config& config = {},
                                const Policy& policy = Policy{},
                                const flash_options& options = {}) {
  detail::flash::checked_run<Backend>(q, k, v, out, &lse, config, policy, options);
}

/// Tiled multi-head attention for one sequence with the heads packed along the columns:
/// q [Lq, H·d], k [Lk, H_kv·d], v [Lk, H_kv·dv] (head-major columns). Returns [Lq, H·dv].
/// Matrices, maps, blocks and Refs are read where they are (either storage order); only
/// an expression without storage is evaluated first.
template <class Backend = default_backend, class DQ, class DK, class DV,
          class Policy = no_position_policy>
attention_matrix<detail::scalar_of<DQ>> flash_multi_head_attention(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    Index heads, Index kv_heads, const attention_config& config = {},
    const Policy& policy = Policy{}, const flash_options& options = {}) {
  return detail::packed_heads_call(
      q, k, v, heads, kv_heads, "flash_multi_head_attention",
      [&](const auto& qv, const auto& kv, const auto& vv, const auto& ov) {
        flash_multi_head_attention<Backend>(qv, kv, vv, ov, config, policy, options);
      });
}

/// Tiled single-head attention: q [Lq, d], k [Lk, d], v [Lk, dv] (one token per row),
/// returns [Lq, dv]. As posenc::attention (a per-head policy must be narrowed to one head,
/// e.g. `alibi.only_head(h)`), computed by the tiled kernel.
template <class Backend = default_backend, class DQ, class DK, class DV,
          class Policy = no_position_policy>
attention_matrix<detail::scalar_of<DQ>> flash_attention(const Eigen::MatrixBase<DQ>& q,
                                                        const Eigen::MatrixBase<DK>& k,
                                                        const Eigen::MatrixBase<DV>& v,
                                                        const attention_config& config = {},
                                                        const Policy& policy = Policy{},
                                                        const flash_options& options = {}) {
  detail::require(k.cols() == q.cols(), "flash_attention", "k.cols()", k.cols(),
                  "must equal q.cols() (the head dim d)");
  return flash_multi_head_attention<Backend>(q, k, v, 1, 1, config, policy, options);
}

}  // namespace posenc
