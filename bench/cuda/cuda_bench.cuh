#pragma once
// Helpers shared by the CUDA benchmarks (bench/cuda/*.cu):
//
//   require_device(state)           skips the benchmark, "no CUDA device", without one
//   run_timed(state, launch)        the timed loop: each iteration is `launch` on a stream,
//                                   timed by CUDA events (Google Benchmark manual time:
//                                   register with ->UseManualTime()); returns the median
//   median_seconds(launch)          the same timing outside the loop, for a baseline
//   fill_bytes / copy_bytes         the baselines: a plain fill and a device-to-device
//                                   copy, 16-byte vector stores, nothing else per element
//   set_bandwidth(state, bytes, seconds, baseline)
//                                   bytes/s and the same-run ratio to the baseline
//
// A kernel's figure next to a fill or copy of the same bytes, measured in the same run on
// the same GPU, is the ratio the targets are written in (docs/benchmarks.md): it holds
// whatever the card, its clocks or its neighbours.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <posenc/backend/cuda/runtime.cuh>
#include <vector>

namespace posenc_bench {
namespace cuda {

/// True when a CUDA device is there; otherwise the benchmark is reported skipped with
/// "no CUDA device" (call before the timed loop, and return when false).
inline bool require_device(benchmark::State& state) {
  if (posenc::cuda::device_count() > 0) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

/// A pair of CUDA events around work on a stream: seconds between start() and stop().
class event_timer {
 public:
  event_timer() {
    posenc::cuda::check(cudaEventCreate(&start_), "cudaEventCreate");
    posenc::cuda::check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;
  ~event_timer() {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  void start(cudaStream_t stream) {
    posenc::cuda::check(cudaEventRecord(start_, stream), "cudaEventRecord");
  }
  /// Waits for the stop event and returns the seconds since start().
  double stop(cudaStream_t stream) {
    posenc::cuda::check(cudaEventRecord(stop_, stream), "cudaEventRecord");
    posenc::cuda::check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0.0f;
    posenc::cuda::check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Seconds per call of `launch` (which enqueues work on `stream`): the median of `reps`
/// event-timed calls after one untimed warm-up (module load, first-touch).
template <class Launch>
double median_seconds(Launch&& launch, cudaStream_t stream = nullptr, int reps = 21) {
  launch();
  posenc::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(warm-up)");
  event_timer t;
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    t.start(stream);
    launch();
    s.push_back(t.stop(stream));
  }
  return median(s);
}

/// The timed loop: one call of `launch` per iteration, its event time given to Google
/// Benchmark (state.SetIterationTime). Returns the median seconds per call, or 0 when the
/// benchmark was skipped (no device) or failed (a posenc::error from the launch, reported
/// with SkipWithError).
template <class Launch>
double run_timed(benchmark::State& state, Launch&& launch, cudaStream_t stream = nullptr) {
  if (!require_device(state)) return 0.0;
  std::vector<double> times;
  try {
    launch();  // warm-up
    posenc::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(warm-up)");
    event_timer t;
    for (auto _ : state) {
      t.start(stream);
      launch();
      const double s = t.stop(stream);
      state.SetIterationTime(s);
      times.push_back(s);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return 0.0;
  }
  return median(times);
}

namespace detail {
/// 16 bytes per thread per step (V = uint4), grid-stride; a tail of bytes after. Templates,
/// so that several translation units of one program may include this header.
template <class V>
__global__ void fill_kernel(V* out, std::size_t vectors, V value, unsigned char* tail,
                            std::size_t tail_bytes, unsigned char tail_value) {
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t k = first; k < vectors; k += step) out[k] = value;
  if (first < tail_bytes) tail[first] = tail_value;
}

template <class V>
__global__ void copy_kernel(const V* __restrict__ in, V* __restrict__ out, std::size_t vectors,
                            const unsigned char* tail_in, unsigned char* tail_out,
                            std::size_t tail_bytes) {
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t k = first; k < vectors; k += step) out[k] = in[k];
  if (first < tail_bytes) tail_out[first] = tail_in[first];
}

/// One thread per 16 bytes (at most 2^31 - 1 blocks of 256, then grid-stride).
inline unsigned blocks_for(std::size_t vectors) {
  const std::size_t b = std::max<std::size_t>(1, (vectors + 255) / 256);
  return static_cast<unsigned>(std::min<std::size_t>(b, 0x7fffffff));
}
}  // namespace detail

/// The fill baseline: `bytes` bytes at `out` (16-byte aligned, as cudaMalloc gives) set
/// to `byte`, on `stream`.
inline void fill_bytes(void* out, std::size_t bytes, unsigned char byte = 0,
                       cudaStream_t stream = nullptr) {
  const std::size_t vectors = bytes / 16;
  const unsigned w = 0x01010101u * byte;
  auto* tail = static_cast<unsigned char*>(out) + vectors * 16;
  detail::fill_kernel<uint4><<<detail::blocks_for(vectors), 256, 0, stream>>>(
      static_cast<uint4*>(out), vectors, make_uint4(w, w, w, w), tail, bytes % 16, byte);
  posenc::cuda::check_launch("fill_kernel");
}

/// The copy baseline: `bytes` bytes from `in` to `out` (both 16-byte aligned, disjoint),
/// on `stream`; it reads and writes, so it moves 2·bytes.
inline void copy_bytes(void* out, const void* in, std::size_t bytes,
                       cudaStream_t stream = nullptr) {
  const std::size_t vectors = bytes / 16;
  const auto* tail_in = static_cast<const unsigned char*>(in) + vectors * 16;
  auto* tail_out = static_cast<unsigned char*>(out) + vectors * 16;
  detail::copy_kernel<uint4><<<detail::blocks_for(vectors), 256, 0, stream>>>(
      static_cast<const uint4*>(in), static_cast<uint4*>(out), vectors, tail_in, tail_out,
      bytes % 16);
  posenc::cuda::check_launch("copy_kernel");
}

/// Counters of a kernel that moves `bytes` per call in a median `seconds`: bytes_per_second
/// (Google Benchmark's, from the manual time) and, when a baseline of the same bytes was
/// timed in this run, "vs_baseline" = baseline seconds / kernel seconds (1 = as fast as
/// the baseline; the targets ask >= 0.8 or 0.85).
inline void set_bandwidth(benchmark::State& state, double bytes, double seconds,
                          double baseline_seconds = 0.0) {
  state.SetBytesProcessed(
      static_cast<std::int64_t>(bytes * static_cast<double>(state.iterations())));
  if (seconds > 0.0) {
    state.counters["TB/s"] = bytes / seconds * 1e-12;
    if (baseline_seconds > 0.0) state.counters["vs_baseline"] = baseline_seconds / seconds;
  }
}

/// The frame every benchmark shares: `run(s, base)` builds its data, sets s to run_timed()'s
/// median and, when it ran, base to a baseline of the same bytes; a std::exception from
/// either skips the benchmark with its message; then set_bandwidth(). Returns the seconds
/// (0 when skipped).
template <class Run>
double measure(benchmark::State& state, double bytes, Run&& run) {
  double s = 0.0, base = 0.0;
  try {
    run(s, base);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return 0.0;
  }
  set_bandwidth(state, bytes, s, base);
  return s;
}

}  // namespace cuda
}  // namespace posenc_bench
