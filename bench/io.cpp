// File formats: reading and writing a [4096, 512] table, next to a baseline moving the same
// file bytes in the same run:
//
//   raw_read     std::ifstream read of the whole file into a buffer (page cache, no parsing)
//   raw_write    std::ofstream write of the same number of bytes
//
// Measured: read_npy<float> of an f32 file (header check + copy), read_npy<double> of an f32
// file (per-element conversion), read_safetensors<float> of F32 / F16 / BF16 tensors
// (header JSON + conversion), write_npy<float>. Throughput is bytes/s of the file's data.
//
// Large headers (issue 25), on files of N one-element F32 tensors "t0", "t1", ...:
//
//   header/N             read_safetensors_header: read, validate, list N entries
//   file_open/N          safetensors_file construction: the same plus the name index
//   file_read_by_name    10k tensors read one by one through one safetensors_file of 200k
//   free_read_by_name/N  one read_safetensors(path, name) call: the whole header each time
//                        (the baseline the file object removes)
//
// Before issue 25 (quadratic duplicate-key check) header/10000 took 0.23 s and 40000
// entries 2.8 s; 10k reads by name through the free function did not finish in 120 s.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <posenc/io/npy.hpp>
#include <posenc/io/safetensors.hpp>
#include <string>
#include <vector>

namespace {

namespace io = posenc::io;

constexpr long kRows = 4096, kCols = 512;

std::string bench_path(const char* name) {
  // Under the build tree's working directory: per-run, not shared with other users of /tmp.
  return std::string("posenc_bench_io_") + name;
}

io::matrix<float> table() {
  io::matrix<float> m(kRows, kCols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(i % 1000) * 0.001f - 0.5f;
  return m;
}

// Written once per process; every benchmark reads the same files.
struct files {
  files() {
    const io::matrix<float> m = table();
    io::write_npy(npy, m);
    io::write_safetensors(st,
                          {{"f32", m}, {"f16", m, io::dtype::f16}, {"bf16", m, io::dtype::bf16}});
  }
  ~files() {
    std::remove(npy.c_str());
    std::remove(st.c_str());
  }
  std::string npy = bench_path("table.npy");
  std::string st = bench_path("table.safetensors");
};

const files& the_files() {
  static const files f;
  return f;
}

void set_bytes(benchmark::State& state, long bytes_per_iter) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iter);
}

void bm_raw_read(benchmark::State& state) {
  const std::string& path = the_files().npy;
  std::vector<char> buf;
  for (auto _ : state) {
    std::ifstream in(path, std::ios::binary);
    in.seekg(0, std::ios::end);
    buf.resize(static_cast<std::size_t>(in.tellg()));
    in.seekg(0);
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    benchmark::DoNotOptimize(buf.data());
  }
  set_bytes(state, kRows * kCols * 4);
}

void bm_read_npy_f32_as_float(benchmark::State& state) {
  const std::string& path = the_files().npy;
  for (auto _ : state) {
    auto m = io::read_npy_matrix<float>(path);
    benchmark::DoNotOptimize(m.data());
  }
  set_bytes(state, kRows * kCols * 4);
}

void bm_read_npy_f32_as_double(benchmark::State& state) {
  const std::string& path = the_files().npy;
  for (auto _ : state) {
    auto m = io::read_npy_matrix<double>(path);
    benchmark::DoNotOptimize(m.data());
  }
  set_bytes(state, kRows * kCols * 4);
}

void bm_read_safetensors(benchmark::State& state, const char* name, long item) {
  const std::string& path = the_files().st;
  for (auto _ : state) {
    auto t = io::read_safetensors<float>(path, name);
    benchmark::DoNotOptimize(t.data.data());
  }
  set_bytes(state, kRows * kCols * item);
}

// A file of n one-element F32 tensors, written once per n and process.
const std::string& many_tensors_file(long n) {
  struct owned {
    std::map<long, std::string> paths;
    ~owned() {
      for (const auto& kv : paths) std::remove(kv.second.c_str());
    }
  };
  static owned files;
  auto it = files.paths.find(n);
  if (it != files.paths.end()) return it->second;
  std::vector<io::safetensors_entry> entries;
  entries.reserve(static_cast<std::size_t>(n));
  io::tensor<float> one;
  one.shape = {1};
  one.data = {0.0f};
  for (long k = 0; k < n; ++k) {
    one.data[0] = static_cast<float>(k);
    entries.emplace_back("t" + std::to_string(k), one);
  }
  const std::string path = bench_path(("many_" + std::to_string(n) + ".safetensors").c_str());
  io::write_safetensors(path, entries);
  return files.paths.emplace(n, path).first->second;
}

void bm_header(benchmark::State& state) {
  const std::string& path = many_tensors_file(state.range(0));
  for (auto _ : state) {
    auto h = io::read_safetensors_header(path);
    benchmark::DoNotOptimize(h.tensors.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void bm_file_open(benchmark::State& state) {
  const std::string& path = many_tensors_file(state.range(0));
  for (auto _ : state) {
    io::safetensors_file f(path);
    benchmark::DoNotOptimize(f.header().tensors.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void bm_file_read_by_name(benchmark::State& state) {
  constexpr long n = 200000, reads = 10000;
  io::safetensors_file f(many_tensors_file(n));
  std::vector<std::string> names;
  for (long k = 0; k < reads; ++k) names.push_back("t" + std::to_string((k * 7919) % n));
  for (auto _ : state) {
    float sum = 0;
    for (const std::string& name : names) sum += f.read<float>(name).data[0];
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * reads);
}

void bm_free_read_by_name(benchmark::State& state) {
  const std::string& path = many_tensors_file(state.range(0));
  const std::string name = "t" + std::to_string(state.range(0) / 2);
  for (auto _ : state) {
    auto t = io::read_safetensors<float>(path, name);
    benchmark::DoNotOptimize(t.data.data());
  }
  state.SetItemsProcessed(state.iterations());
}

void bm_raw_write(benchmark::State& state) {
  const std::vector<char> buf(static_cast<std::size_t>(kRows * kCols * 4), 'x');
  const std::string path = bench_path("raw_write.bin");
  for (auto _ : state) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  std::remove(path.c_str());
  set_bytes(state, kRows * kCols * 4);
}

void bm_write_npy(benchmark::State& state) {
  const io::matrix<float> m = table();
  const std::string path = bench_path("write.npy");
  for (auto _ : state) io::write_npy(path, m);
  std::remove(path.c_str());
  set_bytes(state, kRows * kCols * 4);
}

}  // namespace

BENCHMARK(bm_raw_read)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_read_npy_f32_as_float)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_read_npy_f32_as_double)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_read_safetensors, f32_as_float, "f32", 4)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_read_safetensors, f16_as_float, "f16", 2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_read_safetensors, bf16_as_float, "bf16", 2)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_header)->Arg(10000)->Arg(50000)->Arg(200000)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_file_open)->Arg(10000)->Arg(50000)->Arg(200000)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_file_read_by_name)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_free_read_by_name)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_raw_write)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_write_npy)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
