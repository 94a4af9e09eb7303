// Ring attention over MPI: the keys of one long sequence are sharded over the ranks, each
// rank attends the same queries to its own shard only, and the partial results are merged
// into the exact attention over all the keys.
//
// 16 queries at the end of a 4096-token sequence (8 query heads, 2 KV heads, d = 64,
// causal, RoPE). Rank r holds keys [s, s + n): it calls the flash kernel with its own keys
// at positions 0..n-1 and the queries at q_offset - s (RoPE and the causal mask depend on
// query minus key positions only), and gets for each query row its output and log-sum-exp
// (O, LSE). The partials then travel round the ring (MPI_Sendrecv to the next rank, P - 1
// steps) and every rank folds each one it receives into its own with
// merge_attention_states, so that all ranks end with the result over every key. Rank 0
// checks it against the unsharded call and the program exits non-zero if they differ by
// more than float32 rounding.
//
//   mpiexec -n 4 ./ring_attention          (CTest: mpi_ring_attention_2, mpi_ring_attention_3)

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <posenc/attention/flash.hpp>
#include <posenc/attention/merge.hpp>
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/core/random.hpp>
#include <utility>
#include <vector>

namespace {

using posenc::Index;

constexpr Index batch = 1, heads = 8, kv_heads = 2, dim = 64;
constexpr Index len_k = 4096, len_q = 16;
constexpr Index q_offset = len_k - len_q;  // the queries are the sequence's last tokens
constexpr double rope_base = 500000;       // Llama 3's
constexpr double tolerance = 1e-5;         // relative: float32 rounding, with room

/// Normal samples from a fixed seed: posenc::random_generator gives the same bits on every
/// platform, so every rank (on any node) builds the same inputs.
std::vector<float> normal_values(Index count, std::uint64_t seed) {
  posenc::random_generator rng(seed);
  std::vector<float> x(static_cast<std::size_t>(count));
  for (float& e : x) e = static_cast<float>(rng.normal());
  return x;
}

/// The slice [first, first + count) of one axis of a view (the same memory and strides).
template <class T, int Rank>
posenc::strided_view<T, Rank> slice(const posenc::strided_view<T, Rank>& x, int axis, Index first,
                                    Index count) {
  auto extents = x.extents();
  extents[static_cast<std::size_t>(axis)] = count;
  return {x.data() + first * x.stride(axis), extents, x.strides()};
}

/// A partial result in one buffer, so that it travels as one message: O [B, Lq, H, d], then
/// LSE [B, H, Lq]. It starts as the result over no key: O = 0, LSE = -inf.
struct partial {
  static constexpr Index out_size = batch * len_q * heads * dim;
  static constexpr Index size = out_size + batch * heads * len_q;

  std::vector<float> data;

  partial() : data(std::size_t(size), 0.0f) {
    std::fill(data.begin() + out_size, data.end(), -std::numeric_limits<float>::infinity());
  }
  posenc::strided_view<float, 4> out() {
    return posenc::view_bshd(data.data(), batch, len_q, heads, dim);
  }
  posenc::strided_view<float, 3> lse() {
    return posenc::view_bhs(data.data() + out_size, batch, heads, len_q);
  }
};

/// For printf's %lld, whatever Eigen's Index is.
long long ll(Index x) { return x; }

/// Keys [shard_begin(r, p), shard_begin(r + 1, p)) are rank r's of p: contiguous shards
/// whose sizes differ by at most one.
Index shard_begin(int r, int p) { return len_k * r / p; }

struct inputs {
  std::vector<float> q = normal_values(batch * len_q * heads * dim, 1);     // [B, Lq, H, d]
  std::vector<float> k = normal_values(batch * len_k * kv_heads * dim, 2);  // [B, Lk, Hkv, d]
  std::vector<float> v = normal_values(batch * len_k * kv_heads * dim, 3);

  auto q_view() const { return posenc::view_bshd(q.data(), batch, len_q, heads, dim); }
  auto k_view() const { return posenc::view_bshd(k.data(), batch, len_k, kv_heads, dim); }
  auto v_view() const { return posenc::view_bshd(v.data(), batch, len_k, kv_heads, dim); }
};

/// The first query row that can see key s under the causal mask. The rows before it see
/// none of a shard starting at s and are left out of its call (a query offset is never
/// negative): their LSE stays -inf, so they drop out of every merge.
Index first_row(Index s) { return std::clamp<Index>(s - q_offset, 0, len_q); }

/// The attention of the queries to keys [s, e) only, those keys at positions 0..e-s-1.
partial shard_attention(const inputs& in, Index s, Index e, const posenc::rotary_policy& rope) {
  partial p;
  const Index first = first_row(s), rows = len_q - first;
  if (rows == 0 || e == s) return p;
  posenc::attention_config config;
  config.mask.causal = true;
  config.q_offset = q_offset + first - s;  // row `first` sits at q_offset + first globally
  posenc::flash_multi_head_attention(
      slice(in.q_view(), 1, first, rows), slice(in.k_view(), 1, s, e - s),
      slice(in.v_view(), 1, s, e - s), slice(p.out(), 1, first, rows),
      slice(p.lse(), 2, first, rows), config, rope);
  return p;
}

/// Runs the example on this rank; returns whether rank 0's check passed (on every rank).
bool run(int rank, int ranks) {
  const inputs in;  // in a real model each rank would hold only its own keys
  const posenc::rotary_policy rope(dim, rope_base);
  const Index s = shard_begin(rank, ranks), e = shard_begin(rank + 1, ranks);
  const partial own = shard_attention(in, s, e, rope);

  // The ring: at each step every rank sends the partial it holds in `travelling` (first its
  // own) to the next rank, receives the previous rank's and merges it into its accumulator,
  // and passes it on at the next step. What travels is a single shard's partial, not the
  // accumulator: forwarding the accumulator would count shards twice. After P - 1 steps
  // every rank has merged every shard once, each in its own order (the merge commutes up
  // to rounding).
  partial acc = own, travelling = own, incoming;
  const int next = (rank + 1) % ranks, prev = (rank + ranks - 1) % ranks;
  for (int step = 1; step < ranks; ++step) {
    MPI_Sendrecv(travelling.data.data(), int(partial::size), MPI_FLOAT, next, 0,
                 incoming.data.data(), int(partial::size), MPI_FLOAT, prev, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    posenc::merge_attention_states(acc.out(), acc.lse(), incoming.out(), incoming.lse(), acc.out(),
                                   acc.lse());  // in place
    std::swap(travelling, incoming);
  }

  int ok = 1;
  if (rank == 0) {
    std::printf(
        "ring attention over %d MPI ranks: %lld queries (positions %lld..%lld) x %lld keys, "
        "%lld query heads / %lld KV heads, d = %lld, causal, RoPE base %g\n",
        ranks, ll(len_q), ll(q_offset), ll(len_k - 1), ll(len_k), ll(heads), ll(kv_heads), ll(dim),
        rope_base);
    for (int r = 0; r < ranks; ++r) {
      const Index rs = shard_begin(r, ranks), re = shard_begin(r + 1, ranks);
      const Index first = first_row(rs);
      std::printf("  rank %d: keys [%lld, %lld), query rows %lld..%lld with q_offset %lld\n", r,
                  ll(rs), ll(re), ll(first), ll(len_q - 1), ll(q_offset + first - rs));
    }
    std::printf("  ring: %d step(s) of MPI_Sendrecv, %.1f KiB of (O, LSE) per message\n", ranks - 1,
                double(partial::size) * sizeof(float) / 1024.0);

    // The unsharded call, keys at their global positions.
    partial whole;
    posenc::attention_config config;
    config.mask.causal = true;
    config.q_offset = q_offset;
    posenc::flash_multi_head_attention(in.q_view(), in.k_view(), in.v_view(), whole.out(),
                                       whole.lse(), config, rope);
    // every row sees keys here: a NaN or infinity anywhere is a failure
    const bool finite =
        std::all_of(acc.data.begin(), acc.data.end(), [](float x) { return std::isfinite(x); });
    double d_out = 0, max_out = 0, d_lse = 0, max_lse = 0, rel_lse = 0;
    for (Index i = 0; i < partial::size; ++i) {
      const double got = acc.data[std::size_t(i)], want = whole.data[std::size_t(i)];
      if (i < partial::out_size) {
        d_out = std::max(d_out, std::abs(got - want));
        max_out = std::max(max_out, std::abs(want));
      } else {
        d_lse = std::max(d_lse, std::abs(got - want));
        max_lse = std::max(max_lse, std::abs(want));
        rel_lse = std::max(rel_lse, std::abs(got - want) / (1 + std::abs(want)));
      }
    }
    std::printf(
        "  rank 0 merged vs the unsharded call: max |dO| = %.3g (|O| <= %.3g), max |dLSE| = %.3g "
        "(|LSE| <= %.3g); limit %g relative\n",
        d_out, max_out, d_lse, max_lse, tolerance);
    ok = finite && d_out <= tolerance * max_out && rel_lse <= tolerance;
    std::printf("%s\n", ok ? "ok" : "FAILED");
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);  // every rank exits with rank 0's verdict
  return ok != 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  bool ok = false;
  try {
    ok = run(rank, ranks);
  } catch (const std::exception& e) {
    // the other ranks would wait for this one's messages forever: end them all
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
