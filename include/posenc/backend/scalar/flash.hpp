#pragma once
/// \file
/// The portable tiled (flash-style) attention kernel: one block of query rows against a
/// range of keys, with an online softmax (Milakov & Gimelshein 2018, "Online normalizer
/// calculation for softmax"; Dao et al. 2022, "FlashAttention").
///
/// For a block of rows R and keys visited in tiles J of `block_k` keys:
///
///     S     = (scale·Q_R) · K_Jᵀ  (+ scale·Shaw score)  + bias  + mask   [|R|, |J|]
///     m'    = max(m, rowmax S)                       running maximum
///     P     = exp(S − m')                            masked keys give exactly 0
///     l     = l·exp(m − m') + rowsum P               running sum (double)
///     O     = O·exp(m − m') + P · V_J                rescaled accumulators
///     out   = O / l      (zeros when the row saw no key: l = 0)
///
/// so the [Lq, Lk] logits never exist: the working set is O(block_q·(d + dv + block_k)).
/// The two block products are Eigen GEMMs on row-major maps, so the instruction set comes
/// from the compiler flags (Eigen's own AVX-512 / AVX2 / NEON / SSE kernels); exp is
/// Eigen's vectorised `exp`. This overload takes `backend::scalar const&`, so a backend
/// tag serves with it every call its own lane-layout kernel (backend/simd/flash.hpp)
/// does not take: double, Shaw, general biases, boolean and additive masks, decode.
///
/// The kernels know positions only through the policy's traits (core/policy.hpp): a bias
/// linear in the distance (ALiBi), a table by distance (T5) and clipped relative
/// embeddings (Shaw) are generated here from the head's data; any other bias calls the
/// head's hook per logit. A new position scheme with one of those forms needs no edit
/// here.
///
/// Not for direct inclusion: use posenc/backend/flash.hpp.

#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../config.hpp"
#include "../../core/attention_config.hpp"
#include "../../core/backend.hpp"
#include "../../core/policy.hpp"
#include "../../core/types.hpp"
#include "../../core/view.hpp"
#include "../../math/alibi.hpp"
#include "../../math/softmax.hpp"

namespace posenc {
namespace kernels {
namespace flash {

/// Read-only row-major map with a row stride (keys or values of one head).
template <class Real>
using cmap = Eigen::Map<const row_matrix<Real>, 0, Eigen::OuterStride<>>;

/// True when Policy's score and value terms are Shaw et al.'s clipped relative embeddings.
template <class Policy>
inline constexpr bool clipped_v = bias_form_v<Policy> == position_bias::clipped_embeddings;

/// Tile sizes: block_q query rows per work unit, block_k keys per inner step.
/// A float tile S is 128 x 256 x 4 B = 128 KiB (L2-resident with the K and V tiles).
template <class Real>
struct tiles {
  static constexpr Index block_q = 128;
  static constexpr Index block_k = std::is_same_v<Real, float> ? 256 : 128;
  /// Calls with at most this many query rows take the split-key decode path (over a short
  /// cache only where several rows share each key row: detail::flash::takes_decode).
  static constexpr Index decode_rows = 8;
  /// Keys per decode chunk: fixed (never derived from the thread count), so a call's
  /// result does not depend on how many threads ran it.
  static constexpr Index decode_chunk = 1024;
  /// The fewest keys a short-cache call takes decode from (takes_decode): below, decode's
  /// per-call set-up cost more than prefill (0.72-0.90x at 16 and 64 keys).
  static constexpr Index decode_min_keys = 128;
};

/// What a prefetch asks for: reading soon (into L1), writing, or reading later (into the
/// outer caches only, for more data than L1 holds).
enum class cache_hint { read, write, read_later };

/// Asks for the cache lines of n values at p: decode reads each K and V row once; the
/// prefill loop, a block's query and output rows and the SIMD kernel the next key tile.
template <cache_hint Hint = cache_hint::read, class Real>
inline void prefetch_row(const Real* p, Index n) noexcept {
  const char* b = reinterpret_cast<const char*>(p);
  for (Index off = 0; off < n * static_cast<Index>(sizeof(Real)); off += 64) {
    if constexpr (Hint == cache_hint::write)
      POSENC_PREFETCH_WRITE(b + off);
    else if constexpr (Hint == cache_hint::read_later)
      POSENC_PREFETCH_L2(b + off);
    else
      POSENC_PREFETCH(b + off);
  }
  POSENC_PREFETCH_KEEP(b);  // else GCC may delete calls to this as dead (config.hpp)
}

/// Keys (or values) of one head in working precision: a row-major block, inner stride 1,
/// read in place (`data`); or, for inputs that are not (16-bit storage, a strided last
/// axis), the caller's rows, which `convert` writes in working precision tile by tile
/// (tile()), so a prefill holds one converted tile per worker, never a whole copy.
template <class Real>
struct kv_block {
  const Real* data = nullptr;
  Index rows = 0, cols = 0, ld = 0;
  /// Rows [j0, j0 + n) of `source` into dst (row stride ldd), exactly; set where data is null.
  void (*convert)(const void* source, Index j0, Index n, Real* dst, Index ldd) = nullptr;
  const void* source = nullptr;

  const Real* row(Index j) const noexcept { return data + j * ld; }
  cmap<Real> block(Index j0, Index n) const noexcept {
    return cmap<Real>(row(j0), n, cols, Eigen::OuterStride<>(ld));
  }
  /// Rows [j0, j0 + n) as a block of their own (row 0 = key j0): in place, or converted
  /// into buf (n x cols, row stride ldb).
  kv_block tile(Index j0, Index n, Real* buf, Index ldb) const noexcept {
    kv_block t;
    t.rows = n;
    t.cols = cols;
    if (data) {
      t.data = row(j0);
      t.ld = ld;
    } else {
      convert(source, j0, n, buf, ldb);
      t.data = buf;
      t.ld = ldb;
    }
    return t;
  }
  /// Asks for rows [j0, j0 + n) in the outer caches (not L1, which a whole key tile would
  /// flush); rows read through the converter are left to the hardware.
  void prefetch(Index j0, Index n) const noexcept {
    if (!data) return;
    for (Index j = j0; j < j0 + n; ++j) prefetch_row<cache_hint::read_later>(row(j), cols);
  }
};

/// log2(e): the SIMD lane kernel computes its softmax in base 2 (backend/simd/flash.hpp).
inline constexpr double log2_e = 1.4426950408889634074;

/// What one (batch, head) contributes to its tiles: its policy head, its keys and
/// values, and the policy data the tiles read directly (the head's slope, distance table
/// or clipped embeddings, per its bias_form).
template <class Policy, class Real>
struct head_context {
  typename Policy::head_type head;
  Index batch = 0, head_index = 0;
  kv_block<Real> k, v;
  row_matrix<Real> shaw_ak_t;  ///< clipped embeddings: a^K transposed [d, rows]
  row_matrix<Real> shaw_av;    ///< clipped embeddings: a^V [rows, dv]
  /// Distance table, for the SIMD lane kernel: bias_by_rel times log2(e) (its logits are
  /// base 2) in float, reversed (entry t is bias_by_rel[size - 1 - t]) so that the
  /// consecutive query rows of a vector read consecutive entries, then 16 zeros (the
  /// widest vector) for its padding rows.
  std::vector<float> table_reversed;
};

/// Per-thread buffers of one block of query rows.
template <class Real>
struct workspace {
  row_matrix<Real> q;      ///< [block_q, d]: scale · transformed queries
  row_matrix<Real> s;      ///< [block_q, block_k]: logits, then probabilities
  row_matrix<Real> o;      ///< [block_q, dv]: unnormalised outputs
  row_matrix<Real> qa;     ///< Shaw: scale · q_i . a^K_r, [block_q, rows]
  row_matrix<Real> wb;     ///< Shaw: per-bucket weight sums, [block_q, rows]
  std::vector<Real> m;     ///< running maxima
  std::vector<double> l;   ///< running sums
  std::vector<Index> lim;  ///< visible key limit per row
  drow row;                ///< one query row in double (query transforms)
  // One query row per SIMD lane (backend/simd/flash.hpp), transposed:
  row_matrix<Real> qt;  ///< [d, block_q]: q of the block
  row_matrix<Real> st;  ///< [block_k, block_q]: logits, then probabilities
  row_matrix<Real> ot;  ///< [dv, block_q]: unnormalised outputs
  row_matrix<Real> vt;  ///< [block_k, dv + 16]: the key tile's rows of V, copied
  row_matrix<Real> kt;  ///< [block_k, d]: the key tile's rows of K, converted (kv_block::tile)
  bool lanes = false;   ///< the current block uses the transposed buffers

  /// Sizes the buffers for blocks of up to `bq` query rows.
  void reserve(Index d, Index dv, Index shaw_rows, Index bq = tiles<Real>::block_q) {
    const Index bk = tiles<Real>::block_k;
    q.resize(bq, d);
    s.resize(bq, bk);
    o.resize(bq, dv);
    qa.resize(bq, shaw_rows);
    wb.resize(bq, shaw_rows);
    m.resize(static_cast<std::size_t>(bq));
    l.resize(static_cast<std::size_t>(bq));
    lim.resize(static_cast<std::size_t>(bq));
    row.resize(d);
    if (bq <= tiles<Real>::decode_rows) return;  // decode's per-head rows: no tiles
    kt.resize(bk, d);
    vt.resize(bk, dv + 16);
    // rows 16 floats longer than a block: 512-byte strides would put the rows of a
    // column of vectors in 8 of L1's 64 sets and evict each other
    qt.resize(d, bq + 16);
    st.resize(bk, bq + 16);
    ot.resize(dv, bq + 16);
  }
};

/// Everything a block needs besides its head: shapes, scale, mask.
struct call_info {
  attention_shape shape;
  double scale = 1.0;
  const attention_mask* mask = nullptr;
};

/// Loads query rows [r0, r0 + nb) of one head into ws.q (scaled, transformed) and resets
/// their running statistics; returns the largest visible key limit of the block. Shared by
/// every kernel's begin_block, which then sets up its own accumulators.
template <class Policy, class Real, class TQ>
Index load_block(const head_context<Policy, Real>& hc, const call_info& ci,
                 const strided_view<TQ, 2>& q, Index r0, Index nb, workspace<Real>& ws) noexcept {
  const Index d = ci.shape.dim;
  Index max_lim = 0;
  for (Index r = 0; r < nb; ++r) {
    const Index i = r0 + r, pos = ci.shape.q_offset + i;
    if constexpr (Policy::transforms_queries) {
      for (Index c = 0; c < d; ++c) ws.row(c) = to_real<double>(q(i, c));
      hc.head.transform_query(pos, ws.row);
      for (Index c = 0; c < d; ++c) ws.q(r, c) = static_cast<Real>(ws.row(c) * ci.scale);
    } else if (q.inner_contiguous()) {  // unit stride: a loop the compiler vectorises
      const TQ* src = q.vector_ptr(i);
      Real* dst = ws.q.row(r).data();
      for (Index c = 0; c < d; ++c) dst[c] = static_cast<Real>(to_real<double>(src[c]) * ci.scale);
    } else {
      for (Index c = 0; c < d; ++c)
        ws.q(r, c) = static_cast<Real>(to_real<double>(q(i, c)) * ci.scale);
    }
    const Index lim = ::posenc::detail::visible_limit(*ci.mask, hc.batch, pos, ci.shape.len_k);
    ws.lim[static_cast<std::size_t>(r)] = lim;
    max_lim = std::max(max_lim, lim);
    ws.m[static_cast<std::size_t>(r)] = -std::numeric_limits<Real>::infinity();
    ws.l[static_cast<std::size_t>(r)] = 0.0;
  }
  return max_lim;
}

/// Loads a block (load_block) and clears its accumulators.
template <class Policy, class Real, class TQ>
Index begin_block(const head_context<Policy, Real>& hc, const call_info& ci,
                  const strided_view<TQ, 2>& q, Index r0, Index nb, workspace<Real>& ws,
                  backend::scalar const&) noexcept {
  POSENC_KERNEL_TRACE("flash_tiles", "scalar");
  ws.lanes = false;
  const Index max_lim = load_block(hc, ci, q, r0, nb, ws);
  ws.o.topRows(nb).setZero();
  if constexpr (clipped_v<Policy>) {
    ws.qa.topRows(nb).noalias() = ws.q.topRows(nb) * hc.shaw_ak_t;
    ws.wb.topRows(nb).setZero();
  }
  return max_lim;
}

/// Adds the position bias and the elementwise masks to the visible logits s[0, n) of
/// query row i (position pos) against keys j0 .. j0 + n.
template <class Policy, class Real>
inline void bias_and_mask(const head_context<Policy, Real>& hc, const call_info& ci,
                          const workspace<Real>& ws, Index r, Index i, Index pos, Index j0, Index n,
                          Real* s) noexcept {
  constexpr position_bias form = bias_form_v<Policy>;
  if constexpr (form == position_bias::clipped_embeddings) {
    const auto& clip = hc.head.clip;
    const Real* qa = ws.qa.row(r).data();
    for (Index c = 0; c < n; ++c) s[c] += qa[clip.row(j0 + c - pos)];
  }
  if constexpr (form == position_bias::linear_distance) {
    // Shifted by a row constant (softmax is unchanged) so that the row's largest bias is
    // 0 (math::alibi_reference): float logits stay small where the weights are, however
    // far pos is from the keys. Integer distances are exact in float below 2^24.
    const Real m = static_cast<Real>(hc.head.slope);
    const Index last = ws.lim[static_cast<std::size_t>(r)] - 1;
    const Real base = static_cast<Real>(math::alibi_reference(pos, last, hc.head.symmetric) - j0);
    for (Index c = 0; c < n; ++c) s[c] -= m * std::abs(base - static_cast<Real>(c));
  } else if constexpr (form == position_bias::distance_table) {
    // The bias depends on j - pos only: one contiguous run of the head's table.
    const double* tb = hc.head.bias_by_rel.data() + (j0 - pos - hc.head.rel_min);
    for (Index c = 0; c < n; ++c) s[c] += static_cast<Real>(tb[c]);
  } else if constexpr (Policy::has_bias) {
    for (Index c = 0; c < n; ++c) s[c] += static_cast<Real>(hc.head.bias(pos, j0 + c));
  }
  const attention_mask& mask = *ci.mask;
  if (mask.allowed.size() != 0) {
    const bool* al = mask.allowed.row(i).data() + j0;
    for (Index c = 0; c < n; ++c)
      if (!al[c]) s[c] = -std::numeric_limits<Real>::infinity();
  }
  if (mask.additive.size() != 0) {
    const double* ad = mask.additive.row(i).data() + j0;
    for (Index c = 0; c < n; ++c) s[c] += static_cast<Real>(ad[c]);
  }
}

/// The online-softmax step of row r (query i = r0 + r) for the logits srow = ws.s.row(r)
/// of keys [j0, j0 + nk) (kend: the end of the visited range): adds the bias and masks,
/// rescales the row's maximum, sum and accumulators, and leaves the unnormalised
/// probabilities in srow (0 past the row's visible limit).
template <class Policy, class Real>
inline void softmax_step(const head_context<Policy, Real>& hc, const call_info& ci, Index r0,
                         Index r, Index j0, Index nk, Index kend, workspace<Real>& ws) noexcept {
  constexpr Real neg_inf = -std::numeric_limits<Real>::infinity();
  using row_array = Eigen::Map<Eigen::Array<Real, 1, Eigen::Dynamic>>;
  const Index i = r0 + r, pos = ci.shape.q_offset + i;
  const std::size_t ur = static_cast<std::size_t>(r);
  Real* srow = ws.s.row(r).data();
  const Index n = std::clamp<Index>(std::min(ws.lim[ur], kend) - j0, 0, nk);
  if (n == 0) {
    std::fill(srow, srow + nk, Real(0));
    return;
  }
  bias_and_mask(hc, ci, ws, r, i, pos, j0, n, srow);
  row_array a(srow, n);
  const Real mx = a.template maxCoeff<Eigen::PropagateNaN>();
  if (mx == neg_inf || std::isnan(mx)) {  // every key masked, or a NaN logit
    // A NaN logit makes the whole row NaN, as in the reference (the NaN sum marks it
    // and survives every later rescale); a masked tile adds nothing.
    if (std::isnan(mx)) ws.l[ur] = std::numeric_limits<double>::quiet_NaN();
    std::fill(srow, srow + nk, Real(0));
    return;
  }
  const Real m_old = ws.m[ur];
  const Real m_new = std::max(m_old, mx);
  a = (a - m_new).exp();  // exp(-inf) = 0 at masked keys
  std::fill(srow + n, srow + nk, Real(0));
  if (m_new != m_old) {
    const Real alpha = math::rescale(m_old, m_new);  // 0 on the row's first visible tile
    ws.l[ur] *= static_cast<double>(alpha);
    ws.o.row(r) *= alpha;
    if constexpr (clipped_v<Policy>) ws.wb.row(r) *= alpha;
    ws.m[ur] = m_new;
  }
  ws.l[ur] += static_cast<double>(a.sum());
  if constexpr (clipped_v<Policy>) {
    const auto& clip = hc.head.clip;
    Real* wb = ws.wb.row(r).data();
    for (Index c = 0; c < n; ++c) wb[clip.row(j0 + c - pos)] += srow[c];
  }
}

/// Visits keys [kbeg, kend) for the rows of ws (loaded by begin_block), updating the
/// running maxima, sums and accumulators. Tiles past every row's visible limit are
/// skipped (causal block skipping); within a tile, keys past a row's limit get P = 0.
template <class Policy, class Real>
void accumulate(const head_context<Policy, Real>& hc, const call_info& ci, Index r0, Index nb,
                Index kbeg, Index kend, workspace<Real>& ws, backend::scalar const&) noexcept {
  constexpr Index bk = tiles<Real>::block_k;
  for (Index j0 = kbeg; j0 < kend; j0 += bk) {
    const Index nk = std::min(bk, kend - j0);
    const kv_block<Real> kt = hc.k.tile(j0, nk, ws.kt.data(), ws.kt.cols());
    const kv_block<Real> vt = hc.v.tile(j0, nk, ws.vt.data(), ws.vt.cols());
    auto s = ws.s.topLeftCorner(nb, nk);
    s.noalias() = ws.q.topRows(nb) * kt.block(0, nk).transpose();
    for (Index r = 0; r < nb; ++r) softmax_step(hc, ci, r0, r, j0, nk, kend, ws);
    ws.o.topRows(nb).noalias() += s * vt.block(0, nk);
  }
}

/// prefetch_row over rows [r0, r0 + n) of a [rows, dim] view with unit inner stride
/// (other views are left alone).
template <cache_hint Hint, class T>
inline void prefetch_rows(const strided_view<T, 2>& x, Index r0, Index n) noexcept {
  if (!x.inner_contiguous()) return;
  for (Index r = std::max<Index>(r0, 0); r < std::min(r0 + n, x.extent(0)); ++r)
    prefetch_row<Hint>(x.vector_ptr(r), x.extent(1));
}

/// Asks for the cache line at p, to be read soon (paced_rows' default).
struct read_line {
  void operator()(const char* p) const noexcept {
    POSENC_PREFETCH(p);
    POSENC_PREFETCH_KEEP(p);  // else GCC may delete the calls as dead (config.hpp)
  }
};

/// Asks for the lines of a few runs of rows in step with a kernel's passes (the hook of
/// simd::dot_block_runs, called with step = 0, 1, ..., steps - 1): `keys` rows per run,
/// run r's key c at first[r] + c · stride bytes, `lines` cache lines each; key c's rows
/// (one per run, side by side) over steps [c · per_key, (c + 1) · per_key), per_key =
/// steps / keys, line l of them at the first of those steps whose share reaches it
/// (l · per_key < (part + 1) · lines), so the misses go out evenly with the kernel's
/// reads. Counters, not divisions, find a step's lines: the hook runs every 16 FMAs, and
/// the three integer divisions per run per step that found them before held the dot
/// kernel's issue (60 % of its samples on the instructions after them, Intel Xeon; without
/// them one query's GQA decode ran 1.30-1.45x on float rows, 1.8-2.1x on half and bfloat16,
/// the same bits). ask(p) asks for the line at p (a prefetch; tests record it).
template <std::size_t MaxRuns, class Ask = read_line>
class paced_rows {
 public:
  paced_rows(const char* const* first, int runs, Index stride, int keys, Index lines,
             Ask ask = Ask{}) noexcept
      : ask_(ask), runs_(runs), keys_(keys), stride_(stride), lines_(lines) {
    assert(runs >= 0 && static_cast<std::size_t>(runs) <= MaxRuns);  // the caller's runs
    for (int r = 0; r < runs; ++r) at_[r] = first[r];
  }
  void operator()(int, int steps) noexcept {
    if (key_ >= keys_) return;
    if (per_key_ == 0) {
      per_key_ = steps / keys_;
      if (per_key_ == 0) {  // fewer steps than keys: every row at once
        while (key_ < keys_) {
          ask(0, lines_);
          next_key();
        }
        return;
      }
    }
    const Index upto = (part_ + 1) * lines_;
    Index l = line_;
    while (l * per_key_ < upto) ++l;
    ask(line_, l);
    line_ = l;
    if (++part_ == per_key_) next_key();  // the key's rows asked for
  }

 private:
  Ask ask_;
  const char* at_[MaxRuns];  // each run's current key row
  int runs_, keys_;
  Index stride_, lines_;
  int key_ = 0, part_ = 0, per_key_ = 0;
  Index line_ = 0;

  void next_key() noexcept {
    part_ = 0;
    line_ = 0;
    ++key_;
    for (int r = 0; r < runs_; ++r) at_[r] += stride_;
  }
  void ask(Index l0, Index l1) noexcept {
    for (Index l = l0; l < l1; ++l)
      for (int r = 0; r < runs_; ++r) ask_(at_[r] + 64 * l);
  }
};

/// The key that accumulate_heads' dot pass over a tile of nk keys reads y-th (y < nk), where
/// it takes the dots in `runs` runs of dot_keys / runs keys (KRows::dot_runs): the first
/// runs · span keys (span = nk / dot_keys · dot_keys / runs) as blocks of dot_keys, block b
/// keys [r · span + b · run, r · span + (b + 1) · run) of each run r in turn (run =
/// dot_keys / runs), then the rest in order. The order in which a value pass asks for the
/// next tile's key rows (KRows::next_keys_in_value_pass).
constexpr Index run_order_key(Index y, Index nk, Index dot_keys, Index runs) noexcept {
  const Index run = dot_keys / runs, span = nk / dot_keys * run;
  if (y >= runs * span) return y;
  const Index within = y % dot_keys;
  return within / run * span + y / dot_keys * run + within % run;
}

/// Decode (a few query rows, r0 = 0): keys [kbeg, kend) for `count` heads at once, each
/// head's rows loaded in ws[h] by begin_block; ks.dot_block(h, j, n, q, m, s) takes the
/// dots of m query rows with key rows j .. j + n of head h (ks.dot(h, j, q): one query row
/// with one key row), vs.axpy_block(...) adds a block
/// of value rows of head h, weighted, to m output rows (wherever and in whatever
/// storage the rows are: kv_row_source), and ks.prefetch(h, j) asks for one ahead. Keys
/// outer, heads inner: K and V of a [keys, heads, d] buffer are then read as one forward
/// stream of whole rows, where one head at a time reads 512 bytes of every 4 KiB row
/// (d = 128, 8 heads), an access pattern the hardware prefetchers follow at about half
/// the bandwidth. One query row per key and value row (MHA, one query) reads a tile's
/// keys beside the tile before it's values (accumulate_one_query), asking for rows 1 KiB
/// ahead over a token-major cache and, head-major, as far ahead as the CPU tuning says
/// (cpu::settings::decode_stream_prefetch: 2 KiB on Zen 5 and Intel; KRows::dot_axpy).
/// A GQA group's block kernels prefetch 64 keys on where each head's rows lie back to
/// back (head-major K/V: 1.24-1.40x at one thread; AVX2's value blocks the next block, a
/// few rows before each of the kernel's passes: VRows::spread_value_prefetch; on Intel,
/// taking the dots in runs (AVX-512 four, AVX2 two), each key's value row a share at a
/// time beside its key row: VRows::values_with_key_runs; on Zen 5 each run's key rows
/// too, 2 KiB on in the run: KRows::run_prefetch_rows; on Zen 4 the next tile's key rows
/// into L2 during each value pass: KRows::next_keys_in_value_pass), 8 keys on over a token-major
/// cache of 16-bit rows, and
/// not over token-major float rows (0.70-0.99x, every hint landing in L1: KRows::
/// block_prefetch_keys). GCC had deleted every one of these prefetches until
/// 2026-11-28 (config.hpp), so the distances and streams tried before that date
/// measured no prefetch at all (docs/benchmarks-history.md). The same steps as
/// accumulate with dot products and row updates instead of GEMMs, so sums run in another
/// order (results agree within rounding, and do not depend on the thread count).
/// The row pointers accumulate_heads works through (per thread, sized for count · nb
/// rows, so that nothing is allocated per call of it): query, score (= probability) and
/// output rows of every head's block, head-major, and the current key block's pointers.
template <class Real>
struct head_rows {
  std::vector<const Real*> q, p, block_p;  // block_p: p at the current value block's key
  // s: the score rows (p's memory), block_s: at a key block
  std::vector<Real*> o, s, block_s;
  explicit head_rows(Index rows = 0)
      : q(static_cast<std::size_t>(rows)),
        p(static_cast<std::size_t>(rows)),
        block_p(static_cast<std::size_t>(rows)),
        o(static_cast<std::size_t>(rows)),
        s(static_cast<std::size_t>(rows)),
        block_s(static_cast<std::size_t>(rows)) {}
};

/// A run of keys [kbeg, kend) of heads [h0, h0 + count) that decode's one-query MHA path
/// (accumulate_one_query) reads as one softmax state per head: one chunk of every head
/// of a token (token-major K/V), or of a few heads (head-major: two, one on Zen 4 and Zen 5,
/// cpu::settings::decode_one_query_heads; fewer where the heads run out). hcs[i] and
/// ws[i] are head h0 + i's context and workspace (loaded by begin_block); h0 indexes the
/// row sources.
template <class Policy, class Real>
struct key_segment {
  const head_context<Policy, Real>* hcs = nullptr;
  workspace<Real>* ws = nullptr;
  Index h0 = 0, count = 0, kbeg = 0, kend = 0;
  Index tag = 0;  ///< the caller's (which partial state the segment fills)
};

/// Decode with one query row per key row and per value row (MHA, one query): each
/// segment's tiles in turn, tile t's dot products taken in the pass that adds tile t - 1's
/// value rows, key by key across the segment's heads, each key row's packets loaded beside
/// a value row's (KRows::dot_axpy), so K and V are read as two streams side by side, as
/// the read roofline reads them. Tile by tile (a pass over K, then one over V) each pass
/// was one stream, which the hardware prefetchers of Zen 3 bring in at about 0.75x the
/// rate of two: 1.1-1.5x from memory (docs/benchmarks.md, issue 27). The pipeline runs
/// on across segments (next(seg) begins the next one into seg, false when none is left;
/// done(seg) is called once its last values are in): a segment's first dots beside the last
/// values of the segment before it, so only the first tile's keys and the last tile's
/// values of all the segments a thread is given are read as one stream (within a chunk of
/// 1024 keys they were a quarter of its bytes). Each tile's softmax step runs once its
/// dots are taken and before the next tile's pass adds its values, and each output value
/// takes its rows in key order, one FMA each: the bits of the tile-by-tile order, whatever
/// the segments' order. The scores of the tile being read are row 0 of ws[i].s (where
/// softmax_step works); the probabilities of the tile before it wait in row 1 (decode's
/// workspaces hold decode_rows rows), so a segment's workspaces must not be begun again
/// before it is done. Software prefetch 16 keys ahead lost (0.85-0.90x, Zen 3); 1 KiB
/// ahead in the stream pays over a token-major cache, and over head-major rows on Zen 5
/// (whose hardware prefetchers alone left a core at about half its read roofline) and
/// Intel, 2 KiB ahead (cpu::settings::decode_stream_prefetch; KRows::dot_axpy).
template <class Policy, class Real, class KRows, class VRows, class Next, class Done>
POSENC_NOINLINE void accumulate_one_query(KRows& ks, VRows& vs, const call_info& ci, Next&& next,
                                          Done&& done) noexcept {
  static_assert(tiles<Real>::decode_rows >= 2, "the pending probabilities need a second row");
  constexpr Index bk = tiles<Real>::block_k;
  constexpr Index dot_run = 4;  // keys per dot_rows call (one head alone)
  key_segment<Policy, Real> cur, pend;
  bool more = next(cur);
  Index j0 = cur.kbeg, jp = 0, np = 0;  // [jp, jp + np): pend's tile whose values wait
  for (;;) {
    const Index nk = more ? std::min(bk, cur.kend - j0) : 0;
    const Index both = std::min(nk, np);
    // keys [0, both): a key of each tile per head, its key and value rows read side by side
    // (head-major segments of a few heads: decode_one_query_heads, fewer at the end)
    const Index paired = std::min(cur.count, pend.count);
    if (cur.count == 1 && pend.count == 1) {
      // one head at a time: the run's query and output rows held in registers where the
      // rows allow (KRows::dot_axpy_rows), the bits of the key-by-key loop below
      ks.dot_axpy_rows(cur.h0, j0, static_cast<int>(both), cur.ws[0].q.row(0).data(), vs, pend.h0,
                       jp, pend.ws[0].s.row(1).data(), pend.ws[0].o.row(0).data(),
                       cur.ws[0].s.row(0).data());
    } else {
      for (Index c = 0; c < both; ++c) {
        for (Index i = 0; i < paired; ++i)
          cur.ws[i].s(0, c) =
              ks.dot_axpy(cur.h0 + i, j0 + c, cur.ws[i].q.row(0).data(), vs, pend.h0 + i, jp + c,
                          pend.ws[i].s(1, c), pend.ws[i].o.row(0).data());
        for (Index i = paired; i < cur.count; ++i)
          cur.ws[i].s(0, c) = ks.dot(cur.h0 + i, j0 + c, cur.ws[i].q.row(0).data());
        for (Index i = paired; i < pend.count; ++i)
          vs.axpy(pend.h0 + i, jp + c, pend.ws[i].s(1, c), pend.ws[i].o.row(0).data());
      }
    }
    // the first tile's dots, or the last tile's values, alone
    if (cur.count == 1) {  // one head: the query row in registers over runs of its key rows
      for (Index c = both; c < nk; c += dot_run)
        ks.dot_rows(cur.h0, j0 + c, static_cast<int>(std::min(dot_run, nk - c)),
                    cur.ws[0].q.row(0).data(), cur.ws[0].s.row(0).data() + c);
    } else {
      for (Index c = both; c < nk; ++c)
        for (Index i = 0; i < cur.count; ++i)
          cur.ws[i].s(0, c) = ks.dot(cur.h0 + i, j0 + c, cur.ws[i].q.row(0).data());
    }
    for (Index c = both; c < np; ++c)
      for (Index i = 0; i < pend.count; ++i)
        vs.axpy(pend.h0 + i, jp + c, pend.ws[i].s(1, c), pend.ws[i].o.row(0).data());
    if (np > 0 && jp + np >= pend.kend) done(pend);
    if (nk == 0) return;
    for (Index i = 0; i < cur.count; ++i) {
      softmax_step(cur.hcs[i], ci, 0, 0, j0, nk, cur.kend, cur.ws[i]);
      cur.ws[i].s.row(1).head(nk) = cur.ws[i].s.row(0).head(nk);
    }
    pend = cur;
    jp = j0;
    np = nk;
    j0 += nk;
    if (j0 >= cur.kend) {
      more = next(cur);
      j0 = cur.kbeg;
    }
  }
}

/// `key_group` consecutive heads share their key rows and `value_group` their value rows
/// (GQA: heads / kv_heads; 1 for MHA, and for keys a policy transforms per query head):
/// the dot products of all their query rows with a block of key rows are taken together
/// (KRows::dot_block, a packet's width of keys; over head-major rows, AVX2's float rows two
/// runs of half as many keys half a tile apart, AVX-512's on Intel four runs a quarter of
/// a tile apart: KRows::dot_block_runs) and all their
/// output rows take a block of value rows together (VRows::axpy_block, each output value
/// kept in a register over the block), so each K and V row is read once per group. (One query row
/// per key and per value row, MHA with one query, is accumulate_one_query's.) One per key row alone
/// (keys a policy transforms per query head, GQA values) takes its dots key by key across the heads
/// (KRows::dot). On Zen 4 one query's group of 2 to 4 heads over head-major rows reads
/// each tile's key rows, then its value rows, whole and one at a time (KRows::group_rows,
/// dot_group_rows, axpy_group_rows: the block kernels' bits), the order its hardware
/// prefetchers follow; over token-major rows 4 KiB apart the groups take turns over each
/// 32 KiB of the tile's key rows (KRows::group_rows_keys), so that each is read whole. Out of line:
/// inlined into the decode driver, GCC compiled the GQA block paths differently and half / bfloat16
/// GQA decode ran 0.81-0.95x (Zen 3).
template <class Policy, class Real, class KRows, class VRows>
POSENC_NOINLINE void accumulate_heads(const head_context<Policy, Real>* hcs, KRows& ks, VRows& vs,
                                      Index count, Index key_group, Index value_group,
                                      const call_info& ci, Index nb, Index kbeg, Index kend,
                                      workspace<Real>* ws, head_rows<Real>& hr) noexcept {
  constexpr Index bk = tiles<Real>::block_k;
  constexpr Index row_prefetch_keys = 64;  // one query row per key row (d = 128, 8 heads)
  const Index vb = vs.value_block();       // keys per value block (<= VRows::max_block)
  constexpr Index dot_keys = KRows::dot_block_keys();
  for (Index h = 0; h < count; ++h)
    for (Index r = 0; r < nb; ++r) {
      const auto i = static_cast<std::size_t>(h * nb + r);
      hr.q[i] = ws[h].q.row(r).data();
      hr.s[i] = ws[h].s.row(r).data();
      hr.p[i] = hr.s[i];
      hr.o[i] = ws[h].o.row(r).data();
    }
  const int key_rows = static_cast<int>(key_group * nb),
            value_rows = static_cast<int>(value_group * nb);
  // the block kernels' prefetches and how far on they ask (KRows::block_prefetch_keys;
  // none where either side's rows take none)
  const Index block_prefetch_keys = std::min(ks.block_prefetch_keys(), vs.block_prefetch_keys());
  const bool block_prefetch = block_prefetch_keys > 0;
  const bool spread_value_prefetch = vs.spread_value_prefetch();  // VRows::spread_value_prefetch
  const Index value_prefetch_keys = std::min(block_prefetch_keys, vs.value_prefetch_keys());
  const int runs = ks.dot_runs(key_rows);  // dots in runs of keys (KRows::dot_runs), or 0
  // each key's value row asked for beside its dot (VRows::values_with_key_runs), in
  // place of the block prefetches of the values; where a query head's keys are its own
  // (key_group 1) a group's heads would ask for the same value rows, so not there
  const bool values_with_keys = runs > 0 && key_group == value_group && vs.values_with_key_runs();
  // and beside them each run's key rows key_ahead rows on in the run (KRows::
  // run_prefetch_rows; where the key and value rows are alike, as paced_rows steps them)
  const Index key_ahead = values_with_keys && ks.stored_row_stride() == vs.stored_row_stride() &&
                                  ks.stored_row_lines() == vs.stored_row_lines()
                              ? ks.run_prefetch_rows()
                              : 0;
  // and during each tile's value pass the next tile's key rows into L2, in the order its
  // dot pass reads them (KRows::next_keys_in_value_pass)
  const bool next_keys = values_with_keys && ks.next_keys_in_value_pass(value_rows);
  // a group's rows read whole, a tile's key rows then its value rows, one row at a time
  // (KRows::group_rows, cpu::settings::decode_group_rows), in place of all of the above
  const bool group_rows =
      key_group == value_group && ks.group_rows(key_rows) && vs.group_rows(value_rows);
  const Index group_keys = std::min(ks.group_rows_keys(bk), vs.group_rows_keys(bk));
  for (Index j0 = kbeg; j0 < kend; j0 += bk) {
    const Index nk = std::min(bk, kend - j0);
    // One prefetch stream over the order the rows are read in: the tile's key rows, its
    // value rows, the next tile's key rows. At step t of it (t < nk: key row t, else value
    // row t - nk) the row `ahead` steps on is asked for, so the first rows of each pass
    // are in flight when the pass before it ends.
    const auto prefetch_ahead = [&](Index h, Index t, Index ahead) {
      const Index a = t + ahead;
      if (a < nk)
        ks.prefetch(h, j0 + a);
      else if (a < 2 * nk)
        vs.prefetch(h, j0 + a - nk);
      else if (j0 + a - nk < kend)
        ks.prefetch(h, j0 + a - nk);
    };
    if (group_rows) {
      // the groups in turn over passes of group_keys keys (the whole tile head-major)
      for (Index c0 = 0; c0 < nk; c0 += group_keys)
        for (Index h0 = 0; h0 < count; h0 += key_group) {
          for (int i = 0; i < key_rows; ++i)
            hr.block_s[static_cast<std::size_t>(i)] =
                hr.s[static_cast<std::size_t>(h0 * nb + i)] + c0;
          ks.dot_group_rows(h0, j0 + c0, static_cast<int>(std::min(group_keys, nk - c0)),
                            hr.q.data() + h0 * nb, key_rows, hr.block_s.data());
        }
    } else if (key_rows == 1) {
      // one query row per key row (keys transformed per query head): key by key, every
      // head of a key before the next, so K is read as one forward stream of whole rows.
      // Blocks of keys per head (below) read one short run of each [keys, heads, d] row at
      // a time, which cost MHA 5-15 % from memory when it took this loop, and pairs of rows
      // in this order summed as a block lost 12-25 % (docs/benchmarks-history.md, issue 27)
      for (Index c = 0; c < nk; ++c)
        for (Index h0 = 0; h0 < count; ++h0) {
          prefetch_ahead(h0, c, row_prefetch_keys);
          ws[h0].s(0, c) = ks.dot(h0, j0 + c, hr.q[static_cast<std::size_t>(h0 * nb)]);
        }
    } else {
      // blocks of dot_keys keys: a group's scores of a block are written to s[i] + c0.
      // Where the rows allow (KRows::dot_runs), the tile's first runs · span keys go as
      // blocks of that many runs, keys [r · span + c0, r · span + c0 + run) of run r: as
      // many ascending streams, each dot the same bits; each key's value row asked for
      // beside its dot where VRows::values_with_key_runs
      Index paired = 0;  // keys [0, paired) taken in runs
      if constexpr (KRows::run_kernels)
        if (runs > 0) {
          const Index run = dot_keys / runs, span = nk / dot_keys * run;
          for (Index c0 = 0; c0 < span; c0 += run)
            for (Index h0 = 0; h0 < count; h0 += key_group) {
              if (block_prefetch && !values_with_keys)
                for (Index c = c0; c < c0 + run; ++c)
                  for (Index r = 0; r < runs; ++r)
                    prefetch_ahead(h0, r * span + c, block_prefetch_keys);
              for (int i = 0; i < key_rows; ++i)
                hr.block_s[static_cast<std::size_t>(i)] =
                    hr.s[static_cast<std::size_t>(h0 * nb + i)] + c0;
              if (values_with_keys) {
                // each key's value rows asked for beside its key rows, a share of a row
                // per step of the kernel (the dots' hook: key c of every run takes steps
                // / run steps), so that the misses go out evenly with the reads; and the
                // key rows key_ahead rows on in each run whose rows that far on are still
                // the unit's (past kend they are another unit's: not asked for)
                const char* first[8];
                int streams = runs;
                for (int r = 0; r < runs; ++r) first[r] = vs.stored_row_at(h0, j0 + r * span + c0);
                if (key_ahead > 0)
                  for (int r = 0; r < runs; ++r)
                    if (j0 + r * span + c0 + key_ahead + run <= kend)
                      first[streams++] = ks.stored_row_at(h0, j0 + r * span + c0 + key_ahead);
                ks.dot_block_runs(h0, j0 + c0, span, hr.q.data() + h0 * nb, key_rows,
                                  hr.block_s.data(),
                                  paced_rows<8>(first, streams, vs.stored_row_stride(),
                                                static_cast<int>(run), vs.stored_row_lines()));
              } else {
                ks.dot_block_runs(h0, j0 + c0, span, hr.q.data() + h0 * nb, key_rows,
                                  hr.block_s.data(), [](int, int) noexcept {});
              }
            }
          paired = runs * span;
        }
      for (Index c0 = paired; c0 < nk; c0 += dot_keys) {
        const int n = static_cast<int>(std::min(dot_keys, nk - c0));
        for (Index h0 = 0; h0 < count; h0 += key_group) {
          if (block_prefetch)
            for (Index c = c0; c < c0 + n; ++c) prefetch_ahead(h0, c, block_prefetch_keys);
          for (int i = 0; i < key_rows; ++i)
            hr.block_s[static_cast<std::size_t>(i)] =
                hr.s[static_cast<std::size_t>(h0 * nb + i)] + c0;
          ks.dot_block(h0, j0 + c0, n, hr.q.data() + h0 * nb, key_rows, hr.block_s.data());
        }
      }
    }
    for (Index h = 0; h < count; ++h)
      for (Index r = 0; r < nb; ++r) softmax_step(hcs[h], ci, 0, r, j0, nk, kend, ws[h]);
    const Real** probs = hr.block_p.data();
    if (group_rows) {
      for (Index c0 = 0; c0 < nk; c0 += group_keys)
        for (Index h0 = 0; h0 < count; h0 += value_group) {
          for (int i = 0; i < value_rows; ++i)
            probs[i] = hr.p[static_cast<std::size_t>(h0 * nb + i)] + c0;
          vs.axpy_group_rows(h0, j0 + c0, static_cast<int>(std::min(group_keys, nk - c0)), probs,
                             value_rows, hr.o.data() + h0 * nb);
        }
      continue;
    }
    // blocks of vb keys: the probabilities of a block are p[i] + c0
    // the next tile (none past kend), whose key rows next_keys asks for: the share of its
    // nk1 keys in dot-pass order that matches this block's share of the tile's values
    const Index j1 = j0 + nk, nk1 = next_keys ? std::min(bk, kend - j1) : 0;
    for (Index c0 = 0; c0 < nk; c0 += vb) {
      const int kb = static_cast<int>(std::min(vb, nk - c0));
      const Index y0 = c0 * nk1 / nk, y1 = (c0 + kb) * nk1 / nk;
      for (Index h0 = 0; h0 < count; h0 += value_group) {
        // the block's prefetches: the next tile's key rows a part before each of the
        // kernel's passes (next_keys); or its value rows spread over the passes, a few
        // rows before each (VRows::spread_value_prefetch), or all before it
        const auto ask = [&](int step, int steps) noexcept {
          if (nk1 > 0) {
            for (Index y = y0 + step * (y1 - y0) / steps; y < y0 + (step + 1) * (y1 - y0) / steps;
                 ++y)
              ks.prefetch_later(h0, j1 + run_order_key(y, nk1, dot_keys, runs));
            return;
          }
          if (!block_prefetch || values_with_keys) return;
          if (spread_value_prefetch) {
            for (Index c = c0 + step * kb / steps; c < c0 + (step + 1) * kb / steps; ++c)
              prefetch_ahead(h0, nk + c, value_prefetch_keys);
          } else if (step == 0) {
            for (Index c = c0; c < c0 + kb; ++c) prefetch_ahead(h0, nk + c, block_prefetch_keys);
          }
        };
        for (int i = 0; i < value_rows; ++i)
          probs[i] = hr.p[static_cast<std::size_t>(h0 * nb + i)] + c0;
        vs.axpy_block(h0, j0 + c0, kb, probs, value_rows, hr.o.data() + h0 * nb, ask);
      }
    }
  }
}

/// Writes rows [r0, r0 + nb) of `out` as acc(r, c) / l_r (zeros for a row that saw no
/// key); `acc` reads the block's unnormalised outputs wherever a kernel keeps them.
template <class Real, class TO, class Acc>
void write_normalised(const workspace<Real>& ws, Index r0, Index nb, const strided_view<TO, 2>& out,
                      Acc acc) noexcept {
  using T = std::remove_cv_t<TO>;
  const Index dv = out.extent(1);
  for (Index r = 0; r < nb; ++r) {
    const Real inv = math::inverse_sum<Real>(ws.l[static_cast<std::size_t>(r)]);
    if (out.inner_contiguous()) {
      T* dst = out.vector_ptr(r0 + r);
      for (Index c = 0; c < dv; ++c) dst[c] = static_cast<T>(acc(r, c) * inv);
    } else {
      for (Index c = 0; c < dv; ++c) out(r0 + r, c) = static_cast<T>(acc(r, c) * inv);
    }
  }
}

/// Normalises the block's accumulators and writes rows [r0, r0 + nb) of `out`.
template <class Policy, class Real, class TO>
void finish_block(const head_context<Policy, Real>& hc, Index r0, Index nb, workspace<Real>& ws,
                  const strided_view<TO, 2>& out, backend::scalar const&) noexcept {
  if constexpr (clipped_v<Policy>) ws.o.topRows(nb).noalias() += ws.wb.topRows(nb) * hc.shaw_av;
  write_normalised(ws, r0, nb, out, [&](Index r, Index c) { return ws.o(r, c); });
}

}  // namespace flash
}  // namespace kernels
}  // namespace posenc
