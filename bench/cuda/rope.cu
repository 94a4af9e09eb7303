// RoPE on the GPU (rotary_embedding<T, backend::cuda>::apply_qk, in place) next to a
// device-to-device copy of the same bytes in the same run. The issue's shape: q and k
// [1, 32, 16384, 128] as Hugging Face holds them ([B, H, L, D], view_bhsd), float32 and
// bfloat16, half and interleaved pairing, cos/sin cached or on the fly, positions as an
// offset or as device position ids. Bytes moved: q and k read and written once.
//
//   bench_cuda_rope [--benchmark_filter=...]
//
// Counters: TB/s (read + write) and vs_baseline = copy time / RoPE time (target >= 0.85,
// >= 0.8 with position ids; docs/benchmarks.md).
#include <posenc/cuda.cuh>
#include <vector>

#include "cuda/cuda_bench.cuh"

namespace {

using posenc::Index;
namespace pb = posenc_bench::cuda;

constexpr Index B = 1, H = 32, L = 16384, D = 128;

template <class T>
void BM_rope_qk(benchmark::State& state) {
  if (!pb::require_device(state)) return;
  const auto pairing =
      state.range(0) ? posenc::rope_pairing::interleaved : posenc::rope_pairing::half;
  posenc::rope_options options;
  options.cache =
      state.range(1) ? posenc::rope_cache_mode::on_the_fly : posenc::rope_cache_mode::cached;
  const bool ids = state.range(2) != 0;
  const Index n = B * H * L * D;
  double copy_s = 0, rope_s = 0;
  try {
    posenc::rotary_embedding<T, posenc::backend::cuda> rope(D, -1, 10000.0, pairing, options);
    rope.reserve(L);
    posenc::cuda::device_buffer<T> q(n), k(n), scratch(2 * n);
    q.zero();
    k.zero();
    std::vector<Index> host_ids(static_cast<std::size_t>(L));
    for (Index l = 0; l < L; ++l) host_ids[static_cast<std::size_t>(l)] = L - 1 - l;
    posenc::cuda::device_buffer<Index> d_ids(L);
    posenc::cuda::copy_to_device(d_ids.data(), host_ids.data(), L);
    const auto positions =
        ids ? posenc::rope_positions::on_device(d_ids.data(), L) : posenc::rope_positions(Index(0));
    // the baseline: the same bytes (q and k) copied once, read + write
    copy_s = pb::median_seconds([&] {
      pb::copy_bytes(scratch.data(), q.data(), q.bytes());
      pb::copy_bytes(scratch.data() + n, k.data(), k.bytes());
    });
    // device ids are checked: each call waits for its kernel (as a user's call would)
    rope_s = pb::run_timed(state, [&] {
      rope.apply_qk(posenc::view_bhsd(q.data(), B, H, L, D),
                    posenc::view_bhsd(k.data(), B, H, L, D), positions);
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  pb::set_bandwidth(state, 4.0 * static_cast<double>(n) * sizeof(T), rope_s, copy_s);
}

void rope_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"interleaved", "on_the_fly", "ids"});
  for (int pairing : {0, 1})
    for (int fly : {0, 1}) b->Args({pairing, fly, 0});
  b->Args({0, 0, 1});
  b->Args({0, 1, 1});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_TEMPLATE(BM_rope_qk, float)->Apply(rope_args);
BENCHMARK_TEMPLATE(BM_rope_qk, Eigen::bfloat16)->Apply(rope_args);

}  // namespace

BENCHMARK_MAIN();
