// Absolute position encodings on the GPU (encoding/cuda/sinusoidal.cuh, learned.cuh), each
// next to a plain fill or device-to-device copy of the same bytes, timed in the same run
// (cuda_bench.cuh): "vs_baseline" = baseline time / kernel time, the issue's target >= 0.8.
//
//   sinusoid table  table_into [65536, 1024] at offset 0, every preset, f32 and f64:
//                   bytes = the table written; baseline a fill of them. Also "Gelem/s".
//                   at() with 65536 device positions: the same bytes (ids not counted).
//   fused add       add_to with sqrt(d): out = sqrt(d) E + PE on [8, 4096, 1024] (batch
//                   view) or [32768, 1024] (seq view), f32: bytes = E read + written.
//   learned table   [max_len 8192, 1024] f32. table_into / at (device positions) of 8192
//                   rows: rows read + written. add_to: E read + written + the table rows
//                   read once. backward at an offset: grad_output read + the gradient rows
//                   read + written; with device positions likewise (unique rows); sgd_step:
//                   W read + written + its gradient read.
//   embedding layer cuda::embed, tokens [32000, 1024], 8 * 2048 device token ids, out
//                   [8, 2048, 1024] f32, sqrt(d): rows gathered + out written (+ the learned
//                   table's rows read once, for learned positions). Ids are not counted.
//
// Copy baselines move the same bytes: half read, half written. Calls that take device
// positions or token ids wait for their stream (the bounds check), as a user's call does.
// The in-place adds are repeated on the same E, whose values grow to inf: the GPU's float
// pipeline runs inf at full speed, so the timing is that of finite data.
//
//   bench_cuda_absolute [--benchmark_filter=...]
#include <cmath>
#include <cstdint>
#include <exception>
#include <posenc/cuda.cuh>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/cuda_bench.cuh"

namespace {

using posenc::Index;
namespace pc = posenc::cuda;
namespace pb = posenc_bench::cuda;

constexpr Index D = 1024;           // every width here
constexpr Index table_len = 65536;  // sinusoid tables
constexpr Index add_batch = 8, add_len = 4096;
constexpr Index max_len = 8192;  // learned table rows
constexpr Index vocab = 32000, embed_batch = 8, embed_len = 2048;

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "f32" : "f64";
}

template <class T>
void label(benchmark::State& state, const std::string& what) {
  state.SetLabel(what + " " + type_name<T>());
}

template <class T>
double bytes_of(Index elements) {
  return static_cast<double>(elements) * sizeof(T);
}

/// A fill of `bytes` bytes at `out`: the baseline of the write-only kernels.
double fill_seconds(void* out, double bytes) {
  return pb::median_seconds([&] { pb::fill_bytes(out, static_cast<std::size_t>(bytes)); });
}

/// A device-to-device copy that moves `moved` bytes (half read, half written) between two
/// scratch buffers: the baseline of the kernels that read and write.
double copy_seconds(double moved) {
  const auto half = static_cast<std::size_t>(moved / 2);
  pc::device_buffer<unsigned char> in(static_cast<Index>(half)), out(static_cast<Index>(half));
  in.zero();
  return pb::median_seconds([&] { pb::copy_bytes(out.data(), in.data(), half); });
}

void set_elements(benchmark::State& state, Index elements, double seconds) {
  if (seconds > 0.0) state.counters["Gelem/s"] = static_cast<double>(elements) / seconds * 1e-9;
}

posenc::sinusoidal_config preset_config(int preset) {
  if (preset == 1) return posenc::sinusoidal_config::fairseq(D, 1);  // fairseq's padding_idx
  if (preset == 2) return posenc::sinusoidal_config::t2t(D);
  return posenc::sinusoidal_config::vaswani(D);
}

const char* preset_name(int preset) {
  return preset == 1 ? "fairseq" : preset == 2 ? "t2t" : "vaswani";
}

/// 0 .. n - 1 reversed, on the device.
pc::device_buffer<Index> reversed_positions(Index n) {
  std::vector<Index> host(static_cast<std::size_t>(n));
  for (Index r = 0; r < n; ++r) host[static_cast<std::size_t>(r)] = n - 1 - r;
  pc::device_buffer<Index> d(n);
  pc::copy_to_device(d.data(), host.data(), n);
  pc::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize(positions)");
  return d;
}

// ---- sinusoidal ------------------------------------------------------------------------

// args: preset (0 vaswani, 1 fairseq, 2 t2t)
template <class T>
void BM_sinusoid_table(benchmark::State& state) {
  const int preset = static_cast<int>(state.range(0));
  label<T>(state, std::string("table_into ") + preset_name(preset));
  if (!pb::require_device(state)) return;
  const Index n = table_len * D;
  const double seconds = pb::measure(state, bytes_of<T>(n), [&](double& s, double& base) {
    const posenc::sinusoidal<T, posenc::backend::cuda> pe(preset_config(preset));
    pc::device_buffer<T> out(n);
    const auto view = posenc::seq_view<T>::contiguous(out.data(), {table_len, D});
    s = pb::run_timed(state, [&] { pe.table_into(view, 0); });
    if (s > 0) base = fill_seconds(out.data(), bytes_of<T>(n));
  });
  set_elements(state, n, seconds);
}

// at() with device positions (reversed), vaswani
template <class T>
void BM_sinusoid_at(benchmark::State& state) {
  label<T>(state, "at device positions vaswani");
  if (!pb::require_device(state)) return;
  const Index n = table_len * D;
  const double seconds = pb::measure(state, bytes_of<T>(n), [&](double& s, double& base) {
    const posenc::sinusoidal<T, posenc::backend::cuda> pe(D);
    pc::device_buffer<T> out(n);
    const pc::device_buffer<Index> positions = reversed_positions(table_len);
    const auto view = posenc::seq_view<T>::contiguous(out.data(), {table_len, D});
    s = pb::run_timed(state, [&] { pe.at(positions.data(), table_len, view); });
    if (s > 0) base = fill_seconds(out.data(), bytes_of<T>(n));
  });
  set_elements(state, n, seconds);
}

// args: batch view (1) or the same rows as one seq view (0); E = sqrt(d) E + PE in place
template <class T>
void BM_sinusoid_add(benchmark::State& state) {
  const bool batched = state.range(0) != 0;
  label<T>(state, batched ? "add_to sqrt(d) batch [8, 4096]" : "add_to sqrt(d) seq [32768]");
  if (!pb::require_device(state)) return;
  const Index n = add_batch * add_len * D;
  const double bytes = 2 * bytes_of<T>(n);
  const double seconds = pb::measure(state, bytes, [&](double& s, double& base) {
    const posenc::sinusoidal<T, posenc::backend::cuda> pe(D);
    pc::device_buffer<T> e(n);
    e.zero();
    const auto bview = posenc::batch_view<T>::contiguous(e.data(), {add_batch, add_len, D});
    const auto sview = posenc::seq_view<T>::contiguous(e.data(), {add_batch * add_len, D});
    const auto scale = posenc::embedding_scale::sqrt_dim;
    s = batched ? pb::run_timed(state, [&] { pe.add_to(bview, 0, scale); })
                : pb::run_timed(state, [&] { pe.add_to(sview, 0, scale); });
    if (s > 0) base = copy_seconds(bytes);
  });
  set_elements(state, n, seconds);
}

// ---- learned table -----------------------------------------------------------------------

template <class T>
pc::learned_table<T> device_table(Index rows) {
  return pc::learned_table<T>(posenc::learned_table<T>(rows, D, 42));
}

// args: device positions (1, reversed) or table_into at offset 0 (0); all max_len rows
template <class T>
void BM_learned_lookup(benchmark::State& state) {
  const bool ids = state.range(0) != 0;
  label<T>(state, ids ? "learned at device positions" : "learned table_into");
  if (!pb::require_device(state)) return;
  const Index n = max_len * D;
  const double bytes = 2 * bytes_of<T>(n);
  pb::measure(state, bytes, [&](double& s, double& base) {
    const pc::learned_table<T> table = device_table<T>(max_len);
    pc::device_buffer<T> out(n);
    const pc::device_buffer<Index> positions = reversed_positions(max_len);
    const auto view = posenc::seq_view<T>::contiguous(out.data(), {max_len, D});
    s = ids ? pb::run_timed(state, [&] { table.at(positions.data(), max_len, view); })
            : pb::run_timed(state, [&] { table.table_into(view, 0); });
    if (s > 0) base = copy_seconds(bytes);
  });
}

// args: batch (1: a seq view), seq; E = sqrt(d) E + W(r, :) in place at offset 0
template <class T>
void BM_learned_add(benchmark::State& state) {
  const Index b = state.range(0), l = state.range(1);
  label<T>(state, "learned add_to sqrt(d)" + std::string(b == 1 ? " seq" : " batch"));
  if (!pb::require_device(state)) return;
  const double bytes = 2 * bytes_of<T>(b * l * D) + bytes_of<T>(l * D);
  pb::measure(state, bytes, [&](double& s, double& base) {
    const pc::learned_table<T> table = device_table<T>(max_len);
    pc::device_buffer<T> e(b * l * D);
    e.zero();
    const auto scale = posenc::embedding_scale::sqrt_dim;
    const auto sview = posenc::seq_view<T>::contiguous(e.data(), {l, D});
    const auto bview = posenc::batch_view<T>::contiguous(e.data(), {b, l, D});
    s = b == 1 ? pb::run_timed(state, [&] { table.add_to(sview, 0, scale); })
               : pb::run_timed(state, [&] { table.add_to(bview, 0, scale); });
    if (s > 0) base = copy_seconds(bytes);
  });
}

// args: batch (1: a seq view), seq, offset; gradient(offset + r) += grad_output(b, r)
template <class T>
void BM_learned_backward(benchmark::State& state) {
  const Index b = state.range(0), l = state.range(1), offset = state.range(2);
  label<T>(state, "learned backward offset" + std::string(b == 1 ? " seq" : " batch"));
  if (!pb::require_device(state)) return;
  const double bytes = bytes_of<T>(b * l * D) + 2 * bytes_of<T>(l * D);
  pb::measure(state, bytes, [&](double& s, double& base) {
    pc::learned_table<T> table = device_table<T>(max_len);
    pc::device_buffer<T> g(b * l * D);
    g.zero();
    const auto sview = posenc::seq_view<const T>::contiguous(g.data(), {l, D});
    const auto bview = posenc::batch_view<const T>::contiguous(g.data(), {b, l, D});
    s = b == 1 ? pb::run_timed(state, [&] { table.backward(sview, offset); })
               : pb::run_timed(state, [&] { table.backward(bview, offset); });
    if (s > 0) base = copy_seconds(bytes);
  });
}

// args: deterministic; 8 sequences of 1024 positions (each position 8 times), device ids
template <class T>
void BM_learned_backward_ids(benchmark::State& state) {
  const bool det = state.range(0) != 0;
  label<T>(state, det ? "learned backward ids deterministic" : "learned backward ids atomic");
  if (!pb::require_device(state)) return;
  constexpr Index b = 8, l = 1024, rows = b * l;
  const double bytes = bytes_of<T>(rows * D) + 2 * bytes_of<T>(l * D);
  pb::measure(state, bytes, [&](double& s, double& base) {
    pc::learned_table<T> table = device_table<T>(max_len);
    pc::device_buffer<T> g(rows * D);
    g.zero();
    std::vector<Index> host(static_cast<std::size_t>(rows));
    for (Index r = 0; r < rows; ++r) host[static_cast<std::size_t>(r)] = r % l;
    pc::device_buffer<Index> positions(rows);
    pc::copy_to_device(positions.data(), host.data(), rows);
    const auto view = posenc::seq_view<const T>::contiguous(g.data(), {rows, D});
    const auto mode = det ? pc::backward_mode::deterministic : pc::backward_mode::atomic;
    s = pb::run_timed(state, [&] { table.backward(view, positions.data(), rows, mode); });
    if (s > 0) base = copy_seconds(bytes);
  });
}

// W -= lr dL/dW over the whole [max_len, d] table
template <class T>
void BM_learned_sgd(benchmark::State& state) {
  label<T>(state, "learned sgd_step");
  if (!pb::require_device(state)) return;
  const double bytes = 3 * bytes_of<T>(max_len * D);
  pb::measure(state, bytes, [&](double& s, double& base) {
    pc::learned_table<T> table = device_table<T>(max_len);
    s = pb::run_timed(state, [&] { table.sgd_step(1e-3); });
    if (s > 0) base = copy_seconds(bytes);
  });
}

// ---- embedding layer ---------------------------------------------------------------------

// args: learned positions (1) or sinusoidal (0); out = sqrt(d) tokens(ids) + PE(r)
template <class T>
void BM_embed(benchmark::State& state) {
  const bool learned = state.range(0) != 0;
  label<T>(state, learned ? "embed learned" : "embed sinusoidal");
  if (!pb::require_device(state)) return;
  const Index n = embed_batch * embed_len * D;
  double bytes = 2 * bytes_of<T>(n);
  if (learned) bytes += bytes_of<T>(embed_len * D);
  pb::measure(state, bytes, [&](double& s, double& base) {
    pc::device_buffer<T> tokens(vocab * D), out(n);
    tokens.zero();
    std::mt19937_64 gen(42);
    std::uniform_int_distribution<Index> pick(0, vocab - 1);
    std::vector<Index> host(static_cast<std::size_t>(embed_batch * embed_len));
    for (auto& id : host) id = pick(gen);
    pc::device_buffer<Index> ids(static_cast<Index>(host.size()));
    pc::copy_to_device(ids.data(), host.data(), ids.size());
    const auto tview = posenc::seq_view<const T>::contiguous(tokens.data(), {vocab, D});
    const auto oview = posenc::batch_view<T>::contiguous(out.data(), {embed_batch, embed_len, D});
    const auto scale = posenc::embedding_scale::sqrt_dim;
    if (learned) {
      const pc::learned_table<T> table = device_table<T>(embed_len);
      s = pb::run_timed(state, [&] { pc::embed(tview, ids.data(), scale, table, oview); });
    } else {
      const posenc::sinusoidal<T, posenc::backend::cuda> pe(D);
      s = pb::run_timed(state, [&] { pc::embed(tview, ids.data(), scale, pe, oview); });
    }
    if (s > 0) base = copy_seconds(bytes);
  });
}

void timed(benchmark::internal::Benchmark* b) { b->UseManualTime()->Unit(benchmark::kMicrosecond); }

}  // namespace

BENCHMARK_TEMPLATE(BM_sinusoid_table, float)->ArgName("preset")->DenseRange(0, 2)->Apply(timed);
BENCHMARK_TEMPLATE(BM_sinusoid_table, double)->ArgName("preset")->Arg(0)->Apply(timed);
BENCHMARK_TEMPLATE(BM_sinusoid_at, float)->Apply(timed);
BENCHMARK_TEMPLATE(BM_sinusoid_add, float)->ArgName("batch")->Arg(1)->Arg(0)->Apply(timed);

BENCHMARK_TEMPLATE(BM_learned_lookup, float)->ArgName("ids")->Arg(0)->Arg(1)->Apply(timed);
BENCHMARK_TEMPLATE(BM_learned_add, float)
    ->ArgNames({"batch", "seq"})
    ->Args({1, max_len})
    ->Args({add_batch, add_len})
    ->Apply(timed);
BENCHMARK_TEMPLATE(BM_learned_backward, float)
    ->ArgNames({"batch", "seq", "offset"})
    ->Args({1, 4096, 4096})
    ->Args({add_batch, 4096, 4096})
    ->Apply(timed);
BENCHMARK_TEMPLATE(BM_learned_backward_ids, float)
    ->ArgName("deterministic")
    ->Arg(0)
    ->Arg(1)
    ->Apply(timed);
BENCHMARK_TEMPLATE(BM_learned_sgd, float)->Apply(timed);

BENCHMARK_TEMPLATE(BM_embed, float)->ArgName("learned")->Arg(0)->Arg(1)->Apply(timed);

BENCHMARK_MAIN();
