// Flash attention on the GPU (posenc::cuda::flash_multi_head_attention, the general SIMT
// path) next to cuBLAS doing the same two GEMMs, to its own no-position kernel and to a
// device-to-device copy, all measured in the same run (issue 24's targets,
// docs/benchmarks.md). Inputs [B, H, N, d] (view_bhsd, as torch holds them), uniform in
// [-1, 1), default scale 1/sqrt(d), no lse.
//
//   prefill    H = 32, B = 16384 / N, N in {1024, 4096, 16384}, d in {64, 128}, causal and
//              not, bfloat16; d = 80 and 96 at N = 4096; float16 at N = 4096, d = 128,
//              causal; float32 at N in {1024, 4096}, d in {64, 128}, causal and not.
//              Counter TFLOP/s with FLOPs = 4·B·H·N²·d (the two matrix products, Q·Kᵀ and
//              P·V), halved when causal: the convention of FlashAttention's and torch's
//              attention benchmarks (the causal kernel skips the masked half), so that a
//              causal and a non-causal row at the same TFLOP/s use the GPU equally well.
//   cublas     for each prefill shape and type, the same two GEMMs per (b, h) with
//              cublasGemmStridedBatchedEx: S = Q·Kᵀ ([N×d]·[d×N]), then O = S·V ([N×N]·
//              [N×d]), fp32 accumulation (CUBLAS_COMPUTE_32F: tensor cores for bf16/fp16,
//              plain fp32 without TF32 for float32). TFLOP/s over the full 4·B·H·N²·d;
//              the prefill rows' vs_cublas = their TFLOP/s / this one (a causal row's
//              FLOPs halved, cuBLAS's not). S is B·H·N² elements: 16 GiB in bf16 at
//              N = 16384; a row that cannot allocate is skipped with the reason.
//   position   N = 4096, d = 128, B = 4, causal, bfloat16: no positions, ALiBi
//              (alibi_policy), T5 (t5_bias_policy, 32 buckets, max distance 128,
//              unidirectional as a decoder's) and RoPE (cuda::rotary_policy of a Llama 3.1
//              rope_config: base 500000, llama3 scaling factor 8, original context 8192).
//              vs_none = the row's TFLOP/s / that of the no-position kernel at the same
//              shape, timed once in this process (median of 3 calls after a warm-up).
//   decode     32 query heads, 8 key/value heads (GQA), d = 128, bfloat16 cache, B = 1,
//              Lq in {1, 4, 8} new tokens (causal, q_offset = Lk − Lq) against Lk in
//              {16384, 131072} keys. TB/s over the unique K and V bytes (2·Lk·8·128·2) and
//              vs_copy = that bandwidth / a device-to-device copy's of the same K and V
//              (read + write counted, cuda_bench.cuh's copy_bytes), timed in this run.
//
// Each row runs a fixed number of calls (from 3 for the longest to 10, 20 for decode)
// after a warm-up: the kernels are long. The default set leaves out most N = 16384 rows
// and the non-causal d = 80/96 rows (the GPU session's time is short);
// POSENC_FLASH_BENCH=full runs every row. Limits, so that the JSON (written at the end)
// comes back within a short GPU session: a row whose warm-up call takes over 5 s is
// skipped, and so is every row that would start after POSENC_FLASH_BENCH_BUDGET seconds
// (default 200).
//
//   bench_cuda_flash [--benchmark_filter=...] [--benchmark_out=flash.json
//   --benchmark_out_format=json]
//
// Without a CUDA device every row reports "no CUDA device". cuBLAS is linked as a shared
// library (libcublas.so.13, from the toolkit's lib64: scripts/gpu_check.sh puts it on
// LD_LIBRARY_PATH).
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <posenc/attention.hpp>
#include <posenc/cuda.cuh>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cuda/cuda_bench.cuh"

namespace {

using posenc::Index;
namespace pc = posenc::cuda;
namespace pb = posenc_bench::cuda;
using bf16 = Eigen::bfloat16;
using fp16 = Eigen::half;

constexpr Index heads = 32;
constexpr Index tokens = 16384;  // B·N of every prefill row
constexpr Index pos_len = 4096, pos_dim = 128;
constexpr Index decode_heads = 32, decode_kv_heads = 8, decode_dim = 128;

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, bf16>) return "bf16";
  return "f16";
}

template <class T>
cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, bf16>) return CUDA_R_16BF;
  return CUDA_R_16F;
}

/// 4·B·H·N²·d: Q·Kᵀ and P·V, 2 FLOPs per multiply-add; half of it when causal.
double attention_flops(Index batch, Index n, Index d, bool causal) {
  const double f = 4.0 * double(batch) * double(heads) * double(n) * double(n) * double(d);
  return causal ? f / 2 : f;
}

void set_tflops(benchmark::State& state, double flops, double seconds) {
  if (seconds > 0.0) state.counters["TFLOP/s"] = flops / seconds * 1e-12;
}

/// Fails (a std::runtime_error, which skips the row with its message) when `bytes` more
/// would not fit in the device's free memory.
void require_memory(double bytes, const std::string& what) {
  std::size_t free = 0, total = 0;
  pc::check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  if (bytes > 0.97 * static_cast<double>(free))
    throw std::runtime_error(what + " needs " + std::to_string(bytes / (1 << 30)) +
                             " GiB of device memory, " +
                             std::to_string(static_cast<double>(free) / (1 << 30)) + " free");
}

/// Uniform values in [-1, 1) from a hash of the index (no host round trip).
template <class T>
__global__ void uniform_kernel(T* x, std::size_t n, unsigned seed) {
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = first; e < n; e += step) {
    std::uint64_t z = (e + 1) * 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull);
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
    x[e] = static_cast<T>(2.0f * u - 1.0f);
  }
}

template <class T>
void fill_uniform(pc::device_buffer<T>& x, unsigned seed, cudaStream_t stream = nullptr) {
  const std::size_t n = static_cast<std::size_t>(x.size());
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 65536));
  uniform_kernel<T><<<blocks, 256, 0, stream>>>(x.data(), n, seed);
  pc::check_launch("uniform_kernel");
}

/// q [B, H, Lq, d], k and v [B, H_kv, Lk, d], out [B, H, Lq, d] on the device.
template <class T>
struct attention_inputs {
  Index batch, h, h_kv, len_q, len_k, dim;
  pc::device_buffer<T> q, k, v, out;

  static double bytes(Index batch, Index h, Index h_kv, Index len_q, Index len_k, Index dim) {
    return double(sizeof(T)) * double(batch) * double(dim) *
           (2.0 * double(h * len_q) + 2.0 * double(h_kv * len_k));
  }
  attention_inputs(Index b_, Index h_, Index hkv_, Index lq_, Index lk_, Index d_)
      : batch(b_),
        h(h_),
        h_kv(hkv_),
        len_q(lq_),
        len_k(lk_),
        dim(d_),
        q((require_memory(bytes(b_, h_, hkv_, lq_, lk_, d_), "the attention inputs"),
           b_ * h_ * lq_ * d_)),
        k(b_ * hkv_ * lk_ * d_),
        v(b_ * hkv_ * lk_ * d_),
        out(b_ * h_ * lq_ * d_) {
    fill_uniform(q, 1);
    fill_uniform(k, 2);
    fill_uniform(v, 3);
    out.zero();
    pc::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize(inputs)");
  }
  template <class Policy>
  void run(const posenc::attention_config& config, const Policy& policy) {
    pc::flash_multi_head_attention(posenc::view_bhsd(q.data(), batch, h, len_q, dim),
                                   posenc::view_bhsd(k.data(), batch, h_kv, len_k, dim),
                                   posenc::view_bhsd(v.data(), batch, h_kv, len_k, dim),
                                   posenc::view_bhsd(out.data(), batch, h, len_q, dim), config,
                                   policy);
  }
};

// ---- the timed loop, with limits -----------------------------------------------------------

/// The process's start and its time budget: a row that would start later is skipped (the
/// JSON is written only at the end, and the GPU session's time is short).
std::chrono::steady_clock::time_point process_start() {
  static const auto t = std::chrono::steady_clock::now();
  return t;
}

double budget_seconds() {
  const char* env = std::getenv("POSENC_FLASH_BENCH_BUDGET");
  const double b = env ? std::atof(env) : 0.0;
  return b > 0 ? b : 200.0;
}

bool within_budget(benchmark::State& state) {
  const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - process_start();
  if (spent.count() <= budget_seconds()) return true;
  state.SkipWithError(("the run's time budget is spent (" + std::to_string(budget_seconds()) +
                       " s, POSENC_FLASH_BENCH_BUDGET)")
                          .c_str());
  return false;
}

/// A call that takes longer than this skips its row after the warm-up.
constexpr double max_call_seconds = 5.0;

/// pb::run_timed with its warm-up timed: a row whose first call takes over
/// max_call_seconds is skipped instead of timed (a broken or very slow kernel must not use
/// up the GPU session). Returns the median seconds per call, 0 when skipped.
template <class Launch>
double run_calls(benchmark::State& state, Launch&& launch, cudaStream_t stream = nullptr) {
  std::vector<double> times;
  try {
    pb::event_timer t;
    t.start(stream);
    launch();  // warm-up
    const double first = t.stop(stream);
    if (first > max_call_seconds) {
      state.SkipWithError(("one call took " + std::to_string(first) + " s, over the " +
                           std::to_string(max_call_seconds) + " s a row may take")
                              .c_str());
      return 0.0;
    }
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
  return pb::median(times);
}

// ---- cuBLAS ------------------------------------------------------------------------------

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(status));
}

/// One handle and stream for the process, created on first use and never destroyed (no
/// teardown ordering against the CUDA runtime's at exit).
struct cublas_context {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  cublas_context() {
    pc::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasCreate(&handle), "cublasCreate");
    check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
  }
};

cublas_context& cublas() {
  static cublas_context* c = new cublas_context;
  return *c;
}

/// The two GEMMs of attention without the softmax, per (b, h), in cuBLAS's column-major
/// terms on row-major [N, d] and [N, N] matrices: Sᵀ = K·Qᵀ (so S = Q·Kᵀ row-major), then
/// Oᵀ = Vᵀ·Sᵀ (O = S·V row-major).
template <class T>
struct gemm_pair {
  Index batch, n, d;
  pc::device_buffer<T> q, k, v, s, o;

  static double bytes(Index batch, Index n, Index d) {
    return double(sizeof(T)) * double(batch * heads) * (4.0 * double(n * d) + double(n) * n);
  }
  gemm_pair(Index n_, Index d_)
      : batch(tokens / n_),
        n(n_),
        d(d_),
        q((require_memory(bytes(tokens / n_, n_, d_), "the cuBLAS baseline (S = Q·Kᵀ)"),
           batch * heads * n * d)),
        k(batch * heads * n * d),
        v(batch * heads * n * d),
        s(batch * heads * n * n),
        o(batch * heads * n * d) {
    fill_uniform(q, 1);
    fill_uniform(k, 2);
    fill_uniform(v, 3);
    pc::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize(gemm inputs)");
  }
  void launch() {
    const float one = 1.0f, zero = 0.0f;
    const int ni = static_cast<int>(n), di = static_cast<int>(d);
    const int count = static_cast<int>(batch * heads);
    const cudaDataType_t t = cuda_type<T>();
    check_cublas(
        cublasGemmStridedBatchedEx(cublas().handle, CUBLAS_OP_T, CUBLAS_OP_N, ni, ni, di, &one,
                                   k.data(), t, di, n * d, q.data(), t, di, n * d, &zero, s.data(),
                                   t, ni, n * n, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx(Q·Kᵀ)");
    check_cublas(
        cublasGemmStridedBatchedEx(cublas().handle, CUBLAS_OP_N, CUBLAS_OP_N, di, ni, ni, &one,
                                   v.data(), t, di, n * d, s.data(), t, ni, n * n, &zero, o.data(),
                                   t, di, n * d, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx(S·V)");
  }
};

/// cuBLAS seconds per (type, N, d): the cublas rows store theirs; a prefill row whose
/// cublas row did not run (filtered out) times the GEMMs itself. Negative: could not run.
std::map<std::tuple<std::string, Index, Index>, double>& gemm_seconds() {
  static std::map<std::tuple<std::string, Index, Index>, double> m;
  return m;
}

template <class T>
double cublas_seconds(Index n, Index d) {
  const auto key = std::make_tuple(std::string(type_name<T>()), n, d);
  auto& m = gemm_seconds();
  if (const auto it = m.find(key); it != m.end()) return it->second;
  double s = -1.0;
  try {
    gemm_pair<T> g(n, d);
    s = pb::median_seconds([&] { g.launch(); }, cublas().stream, 3);
  } catch (const std::exception&) {
    s = -1.0;
  }
  m[key] = s;
  return s;
}

template <class T>
void BM_cublas_gemms(benchmark::State& state, Index n, Index d) {
  const Index batch = tokens / n;
  state.SetLabel(std::string(type_name<T>()) + " S = Q·Kᵀ, O = S·V, [" + std::to_string(batch) +
                 ", 32, " + std::to_string(n) + ", " + std::to_string(d) + "]");
  if (!pb::require_device(state) || !within_budget(state)) return;
  const double flops = attention_flops(batch, n, d, false);
  double s = 0;
  try {
    gemm_pair<T> g(n, d);
    s = run_calls(
        state, [&] { g.launch(); }, cublas().stream);
  } catch (const std::exception& e) {
    gemm_seconds()[std::make_tuple(std::string(type_name<T>()), n, d)] = -1.0;
    state.SkipWithError(e.what());
    return;
  }
  gemm_seconds()[std::make_tuple(std::string(type_name<T>()), n, d)] = s > 0 ? s : -1.0;
  set_tflops(state, flops, s);
}

// ---- flash rows --------------------------------------------------------------------------

template <class T>
void BM_flash_prefill(benchmark::State& state, Index n, Index d, bool causal) {
  const Index batch = tokens / n;
  state.SetLabel(std::string(type_name<T>()) + " [" + std::to_string(batch) + ", 32, " +
                 std::to_string(n) + ", " + std::to_string(d) + "]" + (causal ? " causal" : ""));
  if (!pb::require_device(state) || !within_budget(state)) return;
  const double flops = attention_flops(batch, n, d, causal);
  double s = 0;
  try {
    attention_inputs<T> in(batch, heads, heads, n, n, d);
    posenc::attention_config config;
    config.mask.causal = causal;
    s = run_calls(state, [&] { in.run(config, posenc::no_position_policy{}); });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  if (s <= 0) return;  // skipped by run_calls
  set_tflops(state, flops, s);
  const double gemm = cublas_seconds<T>(n, d);  // after the inputs are freed
  if (gemm > 0)
    state.counters["vs_cublas"] = (flops / s) / (attention_flops(batch, n, d, false) / gemm);
}

enum class position { none, alibi, t5, rope };

const char* position_name(position p) {
  switch (p) {
    case position::alibi:
      return "ALiBi";
    case position::t5:
      return "T5 (32 buckets, max distance 128)";
    case position::rope:
      return "RoPE (Llama 3.1: base 500000, llama3 x8, original 8192)";
    default:
      return "none";
  }
}

posenc::t5_bias_policy t5_policy() {
  posenc::t5_bucket_config c;
  c.num_buckets = 32;
  c.max_distance = 128;
  c.bidirectional = false;
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  posenc::dmatrix table(32, heads);
  for (Index e = 0; e < table.size(); ++e) table.data()[e] = u(gen);
  return posenc::t5_bias_policy(table, c);
}

posenc::rope_config llama31_rope() {
  posenc::rope_config c;
  c.head_dim = pos_dim;
  c.base = 500000.0;
  c.scaling = posenc::rope_scaling_type::llama3;
  c.factor = 8.0;
  c.original_max_positions = 8192;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  return c;
}

/// Seconds of the no-position kernel at the position rows' shape, timed once.
double none_seconds(attention_inputs<bf16>& in, const posenc::attention_config& config) {
  static double s = 0.0;
  if (s <= 0.0)
    s = pb::median_seconds([&] { in.run(config, posenc::no_position_policy{}); }, nullptr, 3);
  return s;
}

void BM_flash_position(benchmark::State& state, position p) {
  const Index batch = tokens / pos_len;
  state.SetLabel(std::string("bf16 [4, 32, 4096, 128] causal, ") + position_name(p));
  if (!pb::require_device(state) || !within_budget(state)) return;
  const double flops = attention_flops(batch, pos_len, pos_dim, true);
  double s = 0, base = 0;
  try {
    attention_inputs<bf16> in(batch, heads, heads, pos_len, pos_len, pos_dim);
    posenc::attention_config config;
    config.mask.causal = true;
    base = none_seconds(in, config);
    if (p == position::alibi) {
      const posenc::alibi_policy policy(heads);
      s = run_calls(state, [&] { in.run(config, policy); });
    } else if (p == position::t5) {
      const posenc::t5_bias_policy policy = t5_policy();
      s = run_calls(state, [&] { in.run(config, policy); });
    } else if (p == position::rope) {
      posenc::rotary_embedding<bf16, posenc::backend::cuda> rope(llama31_rope(), pos_len);
      rope.reserve(pos_len);
      const pc::rotary_policy<bf16> policy(rope);
      s = run_calls(state, [&] { in.run(config, policy); });
    } else {
      s = run_calls(state, [&] { in.run(config, posenc::no_position_policy{}); });
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  if (s <= 0) return;
  set_tflops(state, flops, s);
  if (base > 0) state.counters["vs_none"] = base / s;  // same FLOPs: the ratio of times
}

/// Seconds of a device-to-device copy of `bytes` (read) into another buffer (written).
double copy_seconds(std::size_t bytes) {
  static std::map<std::size_t, double> cache;
  if (const auto it = cache.find(bytes); it != cache.end()) return it->second;
  pc::device_buffer<unsigned char> in(static_cast<Index>(bytes)), out(static_cast<Index>(bytes));
  in.zero();
  const double s = pb::median_seconds([&] { pb::copy_bytes(out.data(), in.data(), bytes); });
  cache[bytes] = s;
  return s;
}

void BM_flash_decode(benchmark::State& state, Index len_q, Index len_k) {
  state.SetLabel("bf16 GQA 32/8 heads, d 128, " + std::to_string(len_q) + " queries, " +
                 std::to_string(len_k) + " keys");
  if (!pb::require_device(state) || !within_budget(state)) return;
  const double kv_bytes = 2.0 * double(len_k) * decode_kv_heads * decode_dim * sizeof(bf16);
  double s = 0, copy = 0;
  try {
    copy = copy_seconds(static_cast<std::size_t>(kv_bytes));
    attention_inputs<bf16> in(1, decode_heads, decode_kv_heads, len_q, len_k, decode_dim);
    posenc::attention_config config;
    config.mask.causal = true;
    config.q_offset = len_k - len_q;
    s = run_calls(state, [&] { in.run(config, posenc::no_position_policy{}); });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  if (s <= 0) return;
  state.SetBytesProcessed(static_cast<std::int64_t>(kv_bytes * double(state.iterations())));
  state.counters["TB/s"] = kv_bytes / s * 1e-12;
  if (copy > 0) {
    const double copy_bw = 2.0 * kv_bytes / copy;  // read + write
    state.counters["copy_TB/s"] = copy_bw * 1e-12;
    state.counters["vs_copy"] = (kv_bytes / s) / copy_bw;
  }
}

// ---- the rows ----------------------------------------------------------------------------

/// 3 to 10 timed calls: about 2·10¹² FLOPs per row, whatever the shape.
int prefill_iterations(double flops) {
  return static_cast<int>(std::clamp(2e12 / flops, 3.0, 10.0));
}

benchmark::internal::Benchmark* timed(benchmark::internal::Benchmark* b, int iterations) {
  return b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(iterations);
}

struct prefill_row {
  std::string type;
  Index n, d;
  bool causal;
};

std::vector<prefill_row> prefill_rows(bool full) {
  std::vector<prefill_row> rows;
  for (Index n : {1024, 4096, 16384})
    for (Index d : {64, 128})
      for (bool causal : {false, true})
        if (full || n < 16384 || (d == 128 && causal)) rows.push_back({"bf16", n, d, causal});
  for (Index d : {80, 96})
    for (bool causal : {false, true})
      if (full || causal) rows.push_back({"bf16", 4096, d, causal});
  rows.push_back({"f16", 4096, 128, true});
  for (Index n : {1024, 4096})
    for (Index d : {64, 128})
      for (bool causal : {false, true}) rows.push_back({"f32", n, d, causal});
  return rows;
}

template <class T>
void register_prefill(const prefill_row& r) {
  const std::string shape = "/N:" + std::to_string(r.n) + "/d:" + std::to_string(r.d);
  const Index n = r.n, d = r.d;
  const bool causal = r.causal;
  timed(benchmark::RegisterBenchmark(
            ("BM_flash_prefill/" + r.type + shape + "/causal:" + (causal ? "1" : "0")).c_str(),
            [=](benchmark::State& st) { BM_flash_prefill<T>(st, n, d, causal); }),
        prefill_iterations(attention_flops(tokens / n, n, d, causal)));
}

template <class T>
void register_cublas(const prefill_row& r) {
  const Index n = r.n, d = r.d;
  timed(benchmark::RegisterBenchmark(
            ("BM_cublas_gemms/" + r.type + "/N:" + std::to_string(n) + "/d:" + std::to_string(d))
                .c_str(),
            [=](benchmark::State& st) { BM_cublas_gemms<T>(st, n, d); }),
        10);
}

void register_all(bool full) {
  const std::vector<prefill_row> rows = prefill_rows(full);
  // cuBLAS first: the prefill rows read its times (Google Benchmark runs rows in order)
  std::vector<std::tuple<std::string, Index, Index>> gemms;
  for (const prefill_row& r : rows) {
    const auto key = std::make_tuple(r.type, r.n, r.d);
    if (std::find(gemms.begin(), gemms.end(), key) != gemms.end()) continue;
    gemms.push_back(key);
    if (r.type == "bf16") register_cublas<bf16>(r);
    if (r.type == "f16") register_cublas<fp16>(r);
    if (r.type == "f32") register_cublas<float>(r);
  }
  for (const prefill_row& r : rows) {
    if (r.type == "bf16") register_prefill<bf16>(r);
    if (r.type == "f16") register_prefill<fp16>(r);
    if (r.type == "f32") register_prefill<float>(r);
  }
  const std::pair<position, const char*> positions[] = {{position::none, "none"},
                                                        {position::alibi, "alibi"},
                                                        {position::t5, "t5"},
                                                        {position::rope, "rope"}};
  for (const auto& [p, name] : positions) {
    const position pp = p;
    timed(benchmark::RegisterBenchmark(
              (std::string("BM_flash_position/bf16/N:4096/d:128/causal:1/pos:") + name).c_str(),
              [=](benchmark::State& st) { BM_flash_position(st, pp); }),
          3);
  }
  for (Index len_k : {16384, 131072})
    for (Index len_q : {1, 4, 8})
      timed(benchmark::RegisterBenchmark(
                ("BM_flash_decode/bf16/Lq:" + std::to_string(len_q) +
                 "/Lk:" + std::to_string(len_k) + "/H:32/Hkv:8/d:128")
                    .c_str(),
                [=](benchmark::State& st) { BM_flash_decode(st, len_q, len_k); }),
            20);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  process_start();
  const char* set = std::getenv("POSENC_FLASH_BENCH");
  register_all(set != nullptr && std::string(set) == "full");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
