#pragma once
/// \file
/// Where the tiled kernels read keys and values: in place from the caller's memory when it
/// holds contiguous rows of the working precision, else converted from the caller's rows
/// (16-bit storage, strided views) a tile at a time (kv_source, for prefill) or a row at a
/// time in registers (kv_row_source, for decode), never as a whole copy.
///
/// Not for direct inclusion: use posenc/backend/flash.hpp.

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <vector>

#include "../core/cpu.hpp"
#include "../core/types.hpp"
#include "../core/view.hpp"
#include "scalar/flash.hpp"
#include "simd/lowp.hpp"

namespace posenc {
namespace kernels {
namespace flash {

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

/// Decode's keys (or values), row by row, for accumulate_heads and accumulate_one_query:
/// dot(h, j, q) and axpy(h, j, a, o) take row j of query head h's block (hcs[h].*block)
/// where it is; a block that converts (kv_block::convert: 16-bit or strided storage of T)
/// is read straight from the caller's row, widened in registers, when the backend has
/// packet loads for T and the rows have unit stride, else converted into a one-row buffer
/// as it is visited (the query heads of a group, visited in turn, share the conversion).
/// Every path ends in the same float kernel (simd::dot / simd::axpy with packets, Eigen's
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
    // rows read where they are stored, one after another (each head's keys a stream of
    // their own: head-major K/V)
    four_rows_ok = b0.data ? b0.ld == n : widen_in_registers && source(b0).stride(0) == n;
    // bytes from one stored row to the next, where the packet kernels read rows as stored
    if (b0.data)
      row_bytes = b0.ld * static_cast<Index>(sizeof(Real));
    else if (widen_in_registers)
      row_bytes = source(b0).stride(0) * static_cast<Index>(sizeof(value_type));
    const std::size_t stored = b0.data ? sizeof(Real) : sizeof(value_type);
    row_lines = (n * static_cast<Index>(stored) + 63) / 64;
    // the CPU tuning, read once per call (a call keeps what it read)
    const cpu::settings& t = cpu::tuning();
    stream_prefetch = t.decode_stream_prefetch.load(std::memory_order_relaxed);
    run_prefetch = t.decode_key_run_prefetch.load(std::memory_order_relaxed);
    value_pass_keys = t.decode_value_pass_key_prefetch.load(std::memory_order_relaxed);
    tuned_group_rows = t.decode_group_rows.load(std::memory_order_relaxed);
    tuned_key_runs = t.decode_key_runs.load(std::memory_order_relaxed) &&
                     n >= t.decode_key_runs_min_values.load(std::memory_order_relaxed);
  }

  /// Whether dot_block and axpy_block take the many-row kernels (simd::dot_block_many,
  /// axpy_rows_many) for m rows sharing a block. On 16-lane packets with 32 registers
  /// (AVX-512) and rows of 8 packets or more: from 8 rows (several queries of a GQA group),
  /// and from 4 (one query's group of four) where the rows lie one after another
  /// (head-major K/V, float or 16-bit). There the row-at-a-time kernels reread each block
  /// of rows from L1 once per query row (and widen 16-bit rows each time), where the
  /// many-row kernels read each packet once: one query's GQA decode from memory ran
  /// 1.1-1.8x faster, float and 16-bit, on Zen 4 (0.94-1.02x at 4k keys on two threads).
  /// With a token's heads side by side (token-major) the two were within the noise from
  /// memory (0.90-1.17x over page sizes and storage types), so those keep the
  /// row-at-a-time kernels, as does d = 64. On AVX2 (8 lanes, 16 registers), from 4 rows
  /// where the rows lie one after another: dot_block_many's register tiles load 6 packets
  /// for 8 FMAs where dot_block loads 18 for 16, which matters on a core whose L1 gives
  /// one 256-bit load per cycle against two FMAs (Zen 3: 1.26-1.38x with the rows in L1;
  /// one query's GQA decode from memory, head-major, 1.05-1.22x, at 4 queries 1.00-1.06x
  /// but 0.82x in one run of four, calls alternated in one process). Token-major rows
  /// keep dot_block there too: its first row's pass asks for all 8 rows of a block at
  /// once, which the tiles do not, and they ran 0.75-0.89x from memory, with or without a
  /// prefetch of the block's rows (docs/benchmarks.md). AVX2's value rows:
  /// many_output_rows.
  bool many_rows(int m) const noexcept {
    if constexpr (packet_rows) {
      using P = simd::packet<Real, Backend>;
      if constexpr (P::registers >= 32 && P::size >= 16)
        return n >= 8 * P::size && (m >= 8 || (m >= 4 && four_rows_ok));
      if constexpr (P::registers < 32 && P::size == 8) return m >= 4 && four_rows_ok;
    }
    static_cast<void>(m);
    return false;
  }
  /// Whether axpy_block takes axpy_rows_many: on AVX-512 where dot_block does (many_rows),
  /// and with 16 registers (AVX2) from 8 rows (several queries of a GQA group) or from 4 (one
  /// query's group) of 16-bit rows, of rows of 16 packets or more (d >= 128) or of rows back
  /// to back (head-major). There axpy_rows keeps four output packets, four chains of
  /// dependent FMAs, too few for two FMA pipes of latency 4 (Zen 3), and axpy_rows_many eight
  /// (four rows x two packets): 1.9-2.2x alone in L1 on Zen 3, decode from memory 1.32-1.64x
  /// at 4 and 8 queries and 1.18-1.48x on half / bfloat16 K/V, and one query's float group of
  /// four 1.06-1.13x (calls alternated in one process); float rows of 64 values with a
  /// token's heads side by side ran 0.88x so, and keep axpy_rows (docs/benchmarks.md).
  bool many_output_rows(int m) const noexcept {
    if constexpr (packet_rows) {
      using P = simd::packet<Real, Backend>;
      if constexpr (P::registers < 32 && P::size == 8)
        return m >= 8 || (m >= 4 && (widen_in_registers || four_rows_ok || n >= 16 * P::size));
    }
    return many_rows(m);
  }
  /// Keys one dot_block call takes: a packet's lanes (the packet kernel sums a block's
  /// dots lane-wise at once), 1 without packets.
  static constexpr int dot_block_keys() noexcept {
    if constexpr (packet_rows)
      return simd::packet<Real, Backend>::size;
    else
      return 1;
  }
  /// out[i][c] = qs[i] · row j + c of head h, for the query rows i < m that share those
  /// key rows (a GQA group's heads, several queries) and c < keys <= dot_block_keys: each
  /// key row read once for all of them. A key's dot is the same wherever its row is read
  /// from (in place, widened in registers, converted into a buffer) and whatever block it
  /// is in (simd::dot_block), so strided and 16-bit keys give the contiguous float result.
  void dot_block(Index h, Index j, int keys, const Real* const* qs, int m,
                 Real* const* out) noexcept {
    const kv_block<Real>& b = hcs[h].*block;
    if constexpr (packet_storage)
      if (widen_in_registers) {
        const value_type* r = stored_row(h, j);
        const Index ld = source(b).stride(0);
        if (many_rows(m)) return simd::dot_block_many<Backend>(qs, m, r, ld, keys, n, out);
        return simd::dot_block<Backend>(qs, m, r, ld, keys, n, out);
      }
    if constexpr (packet_rows)
      if (b.data) {
        if (many_rows(m)) return simd::dot_block_many<Backend>(qs, m, b.row(j), b.ld, keys, n, out);
        return simd::dot_block<Backend>(qs, m, b.row(j), b.ld, keys, n, out);
      }
    for (int c = 0; c < keys; ++c) {  // rows converted one at a time, shared by the m rows
      const Real* r = row(h, j + c);
      for (int i = 0; i < m; ++i) {
        Real* o = out[i] + c;
        if constexpr (packet_rows)
          simd::dot_block<Backend>(qs + i, 1, r, 0, 1, n, &o);
        else
          *o = crow(qs[i], n).dot(crow(r, n));
      }
    }
  }
  /// Whether this backend has dot_block_runs' kernels (AVX2's and AVX-512's register tiles).
  static constexpr bool run_kernels = packet_rows && simd::dot_runs_v<Backend> > 0;
  /// How many runs of keys dot_block_runs takes for m query rows sharing a block (0: it
  /// takes none): m a multiple of 4, rows read in place or widened in registers and back to
  /// back (head-major), each run a forward stream of its own.
  /// AVX2, float rows where dot_block takes the register tiles (many_rows): two runs half a
  /// tile apart where dot_block's one run reads a row and its neighbour side by side: one
  /// query's GQA group of four on Zen 3, calls alternated in one process, medians of 13-14
  /// runs over two hours 1.07x / 1.17x at 4k keys (1 / 2 threads) and 1.08x / 1.10x at 16k
  /// (single runs 0.93-1.30); 4 queries of MHA 0.97-1.24x; groups of 8 rows 0.99-1.08x.
  /// 16-bit rows, widened in registers, ran 0.93-0.98x and keep one run.
  /// AVX-512, where the CPU tuning asks for it (cpu::settings::decode_key_runs, for rows of
  /// decode_key_runs_min_values or more): four runs a quarter of a tile apart, float or
  /// 16-bit rows (docs/benchmarks.md).
  int dot_runs(int m) const noexcept {
    if constexpr (run_kernels) {
      if (!four_rows_ok || m % 4 != 0) return 0;
      if constexpr (simd::dot_runs_v<Backend> == 2)
        return !widen_in_registers && many_rows(m) ? 2 : 0;
      else
        return tuned_key_runs ? simd::dot_runs_v<Backend> : 0;
    }
    static_cast<void>(m);
    return 0;
  }
  /// out[i][r · run_rows + c] = qs[i] · row j + r · run_rows + c of head h, for the runs
  /// r < dot_runs(m), c < dot_block_keys() / dot_runs(m) and the m query rows i that share
  /// them, where dot_runs(m) > 0: each dot the same bits as dot_block's. Only called where
  /// run_kernels (a member of a class template: not compiled for the other backends).
  /// step(s, steps): simd::dot_block_runs' hook, the caller's prefetches in step with the
  /// reads.
  template <class Step>
  void dot_block_runs(Index h, Index j, Index run_rows, const Real* const* qs, int m,
                      Real* const* out, Step&& step) noexcept {
    if constexpr (packet_storage)
      if (widen_in_registers)
        return simd::dot_block_runs<Backend>(
            qs, m, stored_row(h, j), source(hcs[h].*block).stride(0), run_rows, n, out, step);
    const kv_block<Real>& b = hcs[h].*block;
    simd::dot_block_runs<Backend>(qs, m, b.row(j), b.ld, run_rows, n, out, step);
  }
  /// Whether accumulate_heads, taking a tile's dots in runs (dot_runs), asks for each
  /// key's value row (rows of this source) beside the key's dot, a share of the row at each
  /// step of the dot kernel (paced_rows), in place of the block prefetches 64 keys
  /// ahead: the value rows then come in as streams beside the keys, where the value
  /// blocks read one. Where the CPU tuning asks for it (cpu::settings::decode_key_runs):
  /// AVX-512's four runs on the Intel Xeon 1.2-1.5x, asked for after each block; a share
  /// at each step 1.09-1.14x more at one thread, 1.00-1.09x at two, and 1.30-2.1x more
  /// once the shares were found without divisions; AVX2's two runs there 1.09-1.17x from
  /// 16k keys, 0.95-1.03x at 4k (calls alternated in one process; docs/benchmarks.md).
  bool values_with_key_runs() const noexcept {
    if constexpr (run_kernels) return four_rows_ok && tuned_key_runs;
    return false;
  }
  /// Whether accumulate_heads, taking a tile's dots in runs with the value rows asked for
  /// beside them (values_with_key_runs, rows of both sources), asks for the next tile's
  /// key rows (rows of this source) into L2 during the tile's value pass, for m output rows
  /// sharing each value row, so that memory keeps reading while the values are added from
  /// the caches (cpu::settings::decode_value_pass_key_prefetch: Zen 4). Where the value
  /// pass is short beside the reads: up to 4 rows (one query's GQA group of four) of 128
  /// values or more. On Zen 4 (processes alternated, docs/benchmarks.md) float rows of 128
  /// ran 1.03-1.16x there, half and bfloat16 1.02-1.08x; 4 and 8 queries 0.90-1.02x and
  /// rows of 64 values 0.96-0.98x, which keep the value pass as it was.
  bool next_keys_in_value_pass(int m) const noexcept {
    return values_with_key_runs() && value_pass_keys && m <= 4 && n >= 128;
  }
  /// q · row j of head h (q: cols values): one query row per key row (MHA, one query).
  Real dot(Index h, Index j, const Real* q) noexcept {
    if constexpr (packet_storage)
      if (widen_in_registers) return simd::dot<Backend>(q, stored_row(h, j), n);
    const Real* r = row(h, j);
    if constexpr (packet_rows)
      return simd::dot<Backend>(q, r, n);
    else
      return crow(q, n).dot(crow(r, n));
  }
  /// out[c] = dot(h, j + c, q) for c < keys, the same bits: one query row against a run of
  /// key rows of head h (MHA decode visiting one head at a time: head-major K), the query
  /// packets held in registers over the run (simd::dot_rows).
  void dot_rows(Index h, Index j, int keys, const Real* q, Real* out) noexcept {
    if constexpr (packet_storage)
      if (widen_in_registers)
        return simd::dot_rows<Backend>(q, stored_row(h, j), source(hcs[h].*block).stride(0), keys,
                                       n, out);
    if constexpr (packet_rows) {
      const kv_block<Real>& b = hcs[h].*block;
      if (b.data) return simd::dot_rows<Backend>(q, b.row(j), b.ld, keys, n, out);
    }
    for (int c = 0; c < keys; ++c) out[c] = dot(h, j + c, q);
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
  /// dot(h, j, q), then values.axpy(hv, jv, a, o) (values: a value rows' source; hv may
  /// be another head): the two rows' packets loaded side by side (simd::dot_axpy) where
  /// both rows are read as packets and are as wide, so that the key and value streams are
  /// in flight together; the bits of the two calls either way.
  template <class Values>
  Real dot_axpy(Index h, Index j, const Real* q, Values& values, Index hv, Index jv, Real a,
                Real* o) noexcept {
    if constexpr (packet_storage && Values::packet_storage) {
      const value_type* k = packet_row(h, j);
      const auto* v = values.packet_row(hv, jv);
      if (k && v && n == values.cols()) {
        // a token's heads side by side: ask for the rows 1 KiB on; each head's rows back to
        // back: as far on as the CPU tuning says (none where the hardware prefetchers
        // follow the streams alone; see accumulate_one_query)
        return simd::dot_axpy<Backend>(q, k, n, a, v, o, dot_axpy_ahead());
      }
    }
    const Real s = dot(h, j, q);
    values.axpy(hv, jv, a, o);
    return s;
  }
  /// out[c] = dot_axpy(h, j + c, q, values, hv, jv + c, alpha[c], o) for c < keys, in
  /// order (one head's run of key rows beside a run of value rows: MHA decode one head at
  /// a time, cpu::settings::decode_one_query_heads): where both runs are read as packets
  /// and are as wide, one simd::dot_axpy_rows call, which holds the query and output
  /// packets in registers over the run; the bits of the calls one by one either way.
  template <class Values>
  void dot_axpy_rows(Index h, Index j, int keys, const Real* q, Values& values, Index hv, Index jv,
                     const Real* alpha, Real* o, Real* out) noexcept {
    if constexpr (packet_storage && Values::packet_storage) {
      const value_type* k = packet_row(h, j);
      const auto* v = values.packet_row(hv, jv);
      if (keys > 0 && k && v && n == values.cols()) {
        simd::dot_axpy_rows<Backend>(q, k, packet_row_stride(h), alpha, v,
                                     values.packet_row_stride(hv), keys, n, o, out,
                                     dot_axpy_ahead());
        return;
      }
    }
    for (int c = 0; c < keys; ++c) out[c] = dot_axpy(h, j + c, q, values, hv, jv + c, alpha[c], o);
  }
  /// How far on dot_axpy and dot_axpy_rows ask for the rows: a token's heads side by side,
  /// prefetch_bytes; each head's rows back to back, the CPU tuning's stream_prefetch.
  Index dot_axpy_ahead() const noexcept {
    return rows_back_to_back() ? stream_prefetch : prefetch_bytes;
  }
  /// The distance in values between consecutive rows of head h that packet_row gives.
  Index packet_row_stride(Index h) const noexcept {
    const kv_block<Real>& b = hcs[h].*block;
    return widen_in_registers ? source(b).stride(0) : b.ld;
  }
  /// Row j of head h where the packet kernels read it as stored (in place, or widened in
  /// registers); null for rows converted into a buffer.
  const value_type* packet_row(Index h, Index j) const noexcept {
    if constexpr (packet_storage) {
      if (widen_in_registers) return stored_row(h, j);
      if constexpr (std::is_same_v<value_type, Real>) {
        const kv_block<Real>& b = hcs[h].*block;
        if (b.data) return b.row(j);
      }
    }
    static_cast<void>(h);
    static_cast<void>(j);
    return nullptr;
  }
  /// Values per row.
  Index cols() const noexcept { return n; }
  /// How far on dot_axpy asks for key and value rows that lie a token's heads side by side.
  static constexpr int prefetch_bytes = 1024;
  /// The most keys one axpy_block call takes.
  static constexpr int max_block = 16;
  /// Keys per axpy_block call (accumulate_heads): max_block, or 8 on 16-register packets
  /// (AVX2) where the stored value rows lie a multiple of 4 KiB apart (a token-major cache
  /// of 8 float heads of 128 values, 16 of 64, 16 half heads of 128). Such rows share L1's
  /// sets (64 of them, 8 ways, 4 KiB apart on x86), and a value block's kernels read one
  /// cache line of each of its rows per step: 16 rows then evict each other's lines, 8 fit
  /// the ways. Each output value still takes its keys in order, one FMA each: the bits of
  /// any block size. Measured on Zen 3 (calls alternated in one process, 16384 keys): GQA
  /// 32/8 d 128, one query, 1.06-1.13x at 1 and 2 threads, 4 and 8 queries 1.09-1.13x; 16
  /// KV heads of d 64 or 128 1.12x, half 1.06x; rows 2 KiB apart (8 float heads of 64, 8
  /// half heads of 128) 0.94-0.97x with 8, so they keep 16 (docs/benchmarks.md).
  int value_block() const noexcept {
    if constexpr (packet_rows)
      if constexpr (simd::packet<Real, Backend>::registers < 32)
        if (row_bytes > 0 && row_bytes % 4096 == 0) return 8;
    return max_block;
  }
  /// o[i] += sum_c p[i][c] · row j + c of head h, c < keys (<= max_block) in order, i < m:
  /// the output rows that share those value rows, the bits of keys · m calls of axpy.
  /// step(s, steps), for each s < steps in order, spreads the caller's prefetches over the
  /// kernel's passes (simd::axpy_rows_many; all at once before the other kernels).
  template <class Step>
  void axpy_block(Index h, Index j, int keys, const Real* const* p, int m, Real* const* o,
                  Step&& step) noexcept {
    if constexpr (packet_storage) {
      if (widen_in_registers) {
        const value_type* xs[max_block];
        for (int c = 0; c < keys; ++c) xs[c] = stored_row(h, j + c);
        if (many_output_rows(m)) return simd::axpy_rows_many<Backend>(xs, keys, p, m, o, n, step);
        step(0, 1);
        simd::axpy_rows<Backend>(xs, keys, p, m, o, n);
        return;
      }
    }
    if constexpr (packet_rows) {
      const kv_block<Real>& b = hcs[h].*block;
      if (b.data) {
        const Real* xs[max_block];
        for (int c = 0; c < keys; ++c) xs[c] = b.row(j + c);
        if (many_output_rows(m)) return simd::axpy_rows_many<Backend>(xs, keys, p, m, o, n, step);
        step(0, 1);
        simd::axpy_rows<Backend>(xs, keys, p, m, o, n);
        return;
      }
    }
    step(0, 1);
    for (int c = 0; c < keys; ++c)  // rows converted one at a time
      for (int i = 0; i < m; ++i) axpy(h, j + c, p[i][c], o[i]);
  }
  /// Whether dot_group_rows and axpy_group_rows take m rows that share their key and value
  /// rows (cpu::settings::decode_group_rows): on AVX-512 with rows of 64 or 128 values and
  /// 2 to 4 rows (one query's GQA group, simd::group_rows_take), where each head's rows
  /// (float, half or bfloat16) lie back to back, or a multiple of 4 KiB apart (token-major,
  /// taken group_rows_keys keys at a time). Token-major rows 2 KiB apart (8 heads of 64
  /// floats or of 128 16-bit values) ran 0.75-1.18x the block kernels so on Zen 4 and keep
  /// them (docs/benchmarks.md).
  bool group_rows(int m) const noexcept {
    if constexpr (packet_storage)
      return tuned_group_rows && row_bytes > 0 && (four_rows_ok || row_bytes % 4096 == 0) &&
             simd::group_rows_take<Backend>(m, n);
    static_cast<void>(m);
    return false;
  }
  /// Keys per pass of the group kernels over each group's rows: the whole tile where a
  /// head's rows lie back to back; token-major, 32 KiB of key rows (8 keys of 4 KiB, at
  /// least 4), the groups in turn over each such stretch, so that it is read whole while it
  /// is in the caches instead of one row in every 4 KiB row per group over the tile (a
  /// page per row). On Zen 4, 8 keys of 4 KiB ran 1.26-1.68x the block kernels (4 keys
  /// 1.1x, 16 1.2x, a whole tile 1.0x).
  Index group_rows_keys(Index tile) const noexcept {
    if (four_rows_ok || row_bytes <= 0) return tile;
    return std::clamp<Index>(Index(32768) / row_bytes / 4 * 4, 4, tile);
  }
  /// dot_block over keys [j, j + keys) of head h for the m rows of group_rows(m), in one
  /// call: each key row read whole, one at a time (simd::dot_group_rows); dot's bits.
  void dot_group_rows(Index h, Index j, int keys, const Real* const* qs, int m,
                      Real* const* out) noexcept {
    if constexpr (packet_storage)
      simd::dot_group_rows<Backend>(qs, m, packet_row(h, j), packet_row_stride(h), keys, n, out);
  }
  /// axpy_block over keys [j, j + keys) of head h for the m rows of group_rows(m), in one
  /// call: each value row read whole, one at a time (simd::axpy_group_rows); axpy's bits.
  void axpy_group_rows(Index h, Index j, int keys, const Real* const* p, int m,
                       Real* const* o) noexcept {
    if constexpr (packet_storage)
      simd::axpy_group_rows<Backend>(packet_row(h, j), packet_row_stride(h), keys, p, m, o, n);
  }
  /// Whether each head's rows lie back to back (head-major K/V, [B, H, L, d]).
  bool rows_back_to_back() const noexcept { return four_rows_ok; }
  /// How many keys on accumulate_heads' block loops ask for a head's rows (0: none). Where
  /// each head's rows lie back to back, 64 (1.24-1.40x at one thread). With a token's heads
  /// side by side every prefetch lands in L1 (this CPU's hints all do), and a head's rows
  /// of a block share that head's L1 sets: 16-bit rows (widened in registers) whose stride
  /// is no multiple of 4 KiB are asked for 8 keys on, the next block (1.04-1.13x on Zen 3,
  /// calls alternated); float rows, and rows a multiple of 4 KiB apart, none (0.80-0.99x:
  /// 8 keys' float rows of every head fill L1, and rows 4 KiB apart evict the block read).
  Index block_prefetch_keys() const noexcept {
    if (four_rows_ok) return 64;
    if (widen_in_registers && sizeof(value_type) == 2 && row_bytes % 4096 != 0) return 8;
    return 0;
  }
  /// Whether accumulate_heads spreads a value block's prefetches over the block kernel's
  /// passes (axpy_block's step hook: a few rows before each pass) and asks for the next
  /// block only (value_prefetch_keys), rather than for the rows block_prefetch_keys() on,
  /// all before the kernel. With 16 registers (AVX2): 16 rows asked for at once filled
  /// the core's queue of misses, and each prefetch instruction then waited on it (two
  /// thirds of accumulate_heads' own time in a profile, Zen 3); spread, one query's GQA
  /// group over head-major K/V ran 1.13-1.31x (float, d 128, 1 and 2 threads), 1.05-1.26x
  /// on half rows of 128 (bfloat16 1.19x), 1.13-1.25x at 2 and 4 queries (calls alternated
  /// in one process,
  /// docs/benchmarks.md). Rows of 128 bytes (16-bit, d 64) keep the burst: 0.95-0.97x
  /// spread. AVX-512 and NEON keep the order measured on Zen 4 until measured again.
  bool spread_value_prefetch() const noexcept {
    if constexpr (packet_rows)
      if constexpr (simd::packet<Real, Backend>::registers < 32) {
        const std::size_t value_bytes = widen_in_registers ? sizeof(value_type) : sizeof(Real);
        return n * static_cast<Index>(value_bytes) >= 256;
      }
    return false;
  }
  /// How many keys on a value block's spread prefetches ask (spread_value_prefetch): the
  /// next block, or block_prefetch_keys() where that is nearer (float rows of 128 against
  /// the burst: 16 keys on 1.18-1.26x, 32 on 1.16-1.23x, 8 on 1.11-1.18x; half rows of 128
  /// asked for 32 keys on, 8 KiB as for float, 1.01x).
  Index value_prefetch_keys() const noexcept {
    return std::min<Index>(block_prefetch_keys(), value_block());
  }
  /// Where row j of head h lies as stored: in place, or in the caller's unit-stride
  /// storage (nullptr for rows converted one at a time). What the prefetches ask for.
  const char* stored_row_at(Index h, Index j) const noexcept {
    const kv_block<Real>& b = hcs[h].*block;
    if (b.data) return reinterpret_cast<const char*>(b.row(j));
    if (source(b).inner_contiguous()) return reinterpret_cast<const char*>(source(b).vector_ptr(j));
    return nullptr;
  }
  /// Bytes from one stored row to the next where the packet kernels read the rows as
  /// stored (0 where they are converted into a buffer).
  Index stored_row_stride() const noexcept { return row_bytes; }
  /// Cache lines of a stored row (from its first byte).
  Index stored_row_lines() const noexcept { return row_lines; }
  /// How many rows on in each of dot_block_runs' runs accumulate_heads asks for the key
  /// rows too, beside the value rows (cpu::settings::decode_key_run_prefetch, in rows of
  /// this source; 0 for none, and where the rows are not read as stored).
  Index run_prefetch_rows() const noexcept {
    return row_bytes > 0 ? std::max<Index>(0, run_prefetch) / row_bytes : 0;
  }
  /// Asks for row j of head h (every line of it, where it lies as stored).
  void prefetch(Index h, Index j) const noexcept {
    if (const char* p = stored_row_at(h, j)) prefetch_row(p, 64 * row_lines);
  }
  /// Asks for row j of head h into the outer caches only (a row read a pass later).
  void prefetch_later(Index h, Index j) const noexcept {
    if (const char* p = stored_row_at(h, j))
      prefetch_row<cache_hint::read_later>(p, 64 * row_lines);
  }

 private:
  // an alias: nvcc's host pass rewrites a direct member-pointer declaration with
  // parentheses that GCC then warns about (-Wparentheses)
  using block_member = kv_block<Real> head_context<Policy, Real>::*;
  const head_context<Policy, Real>* hcs;
  block_member block;
  Index n;
  bool widen_in_registers = false;
  bool four_rows_ok = false;     // many_rows from 4 rows: rows back to back (head-major)
  Index row_bytes = 0;           // stored row stride in bytes (0: rows converted into buf)
  Index row_lines = 0;           // cache lines of a stored row
  Index stream_prefetch = 0;     // dot_axpy's distance over rows back to back (cpu::tuning)
  Index run_prefetch = 0;        // bytes ahead in each key run (cpu::tuning; run_prefetch_rows)
  bool value_pass_keys = false;  // next_keys_in_value_pass where the runs are (cpu::tuning)
  // decode_key_runs for rows this long (cpu::settings: decode_key_runs_min_values)
  bool tuned_key_runs = false;
  bool tuned_group_rows = false;  // cpu::tuning's decode_group_rows
  std::vector<Real> buf;          // one converted row
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

}  // namespace flash
}  // namespace kernels
}  // namespace posenc
