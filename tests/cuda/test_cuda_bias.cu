// The CUDA bias kernels (encoding/cuda/bias.cuh) against the CPU: ALiBi against
// materialize_bias(alibi_policy), T5 buckets against t5_buckets(), T5 biases against
// materialize_bias(t5_bias_policy), over head counts (powers of two, others, more than
// the 128 slopes of one launch), lengths (decode rows, grids larger than the launch
// limits), query offsets up to the largest Index, both forms, max_bias and explicit
// slopes, bucket configurations, strided / padded / reversed / transposed outputs, every
// output type, a stream, and every bad-input path.
//
// Which comparisons are exact (all of them, bit for bit):
//  - ALiBi, every type: the device evaluates math::alibi_bias (one product, no FMA
//    possible) on the policy's own slopes, in double, and rounds once as the host cast
//    does (half and bfloat16 through float, as Eigen); the expected value is the CPU's
//    double cast to the output type.
//  - T5 buckets: math::t5_bucket in double on both sides. Its one transcendental is log,
//    CUDA's on the device and the C library's on the host: this comparison is also the
//    check that they agree at every bucket boundary the test meets (every distance from 0
//    to beyond max_distance, including the exact powers of T5's default configuration).
//  - T5 biases: a table entry, widened exactly to double and rounded once.
// Every output buffer is filled with a sentinel (NaN, or -7 for indices) and has padding
// around the view: an element not written, or a write outside the view, fails.
#include <cuda_runtime.h>

#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <posenc/encoding/alibi.hpp>
#include <posenc/encoding/cuda/bias.cuh>
#include <posenc/encoding/t5_bias.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/catch.hpp"

namespace {

using posenc::Index;
using posenc::strided_view;
namespace pc = posenc::cuda;

constexpr Index index_max = std::numeric_limits<Index>::max();

// ---------------------------------------------------------------- values and bits

template <class T>
std::uint64_t bits_of(const T& x) {
  static_assert(sizeof(T) <= 8, "bits_of: at most 8 bytes");
  std::uint64_t u = 0;
  std::memcpy(&u, &x, sizeof(T));
  return u;
}

/// What the kernels never write: NaN for values (every bias here is a number or an
/// infinity), -7 for bucket indices (always >= 0).
template <class T>
T sentinel() {
  if constexpr (std::is_integral_v<T>)
    return T(-7);
  else
    return T(std::numeric_limits<float>::quiet_NaN());
}

/// The CPU's double as the host casts it to T (half and bfloat16 through float).
template <class T>
T to_storage(double v) {
  return static_cast<T>(v);
}

template <class T>
std::string show(const T& x) {
  std::ostringstream os;
  os.precision(17);
  if constexpr (std::is_integral_v<T>)
    os << static_cast<long long>(x);
  else
    os << static_cast<double>(static_cast<float>(x)) << " (double " << posenc::to_real<double>(x)
       << ")";
  os << " [bits 0x" << std::hex << bits_of(x) << "]";
  return os.str();
}

// ---------------------------------------------------------------- output layouts

/// An output view of rank R inside a device buffer with padding around it, every element
/// of the buffer set to the sentinel before the call.
template <class T, int R>
struct device_layout {
  std::string name;
  std::array<Index, R> extents{}, strides{};
  Index offset = 0, total = 0;
  pc::device_buffer<T> buffer;

  device_layout(std::string n, const std::array<Index, R>& e, const std::array<Index, R>& s)
      : name(std::move(n)), extents(e), strides(s) {
    Index low = 0, high = 0;
    for (int a = 0; a < R; ++a) {
      const Index steps = extents[a] > 0 ? extents[a] - 1 : 0;
      (strides[a] < 0 ? low : high) += steps * (strides[a] < 0 ? -strides[a] : strides[a]);
    }
    offset = 3 + low;  // three sentinels before the view's lowest element
    total = offset + high + 1 + 5;
    buffer.resize(total);
    const std::vector<T> fill(static_cast<std::size_t>(total), sentinel<T>());
    pc::copy_to_device(buffer.data(), fill.data(), total);
    pc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(device_layout)");
  }
  strided_view<T, R> view() { return strided_view<T, R>(buffer.data() + offset, extents, strides); }

  /// "" when every element of the view equals expected(index) bit for bit and every other
  /// element of the buffer still holds the sentinel; else the first difference and a count.
  std::string compare(const std::function<T(const std::array<Index, R>&)>& expected,
                      cudaStream_t stream = nullptr) {
    pc::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(compare)");
    std::vector<T> host(static_cast<std::size_t>(total));
    pc::copy_to_host(host.data(), buffer.data(), total, stream);
    std::vector<char> seen(static_cast<std::size_t>(total), 0);
    std::string first;
    Index bad = 0;
    Index count = 1;
    for (Index e : extents) count *= e;
    std::array<Index, R> idx{};
    for (Index n = 0; n < count; ++n) {
      Index off = offset;
      for (int a = 0; a < R; ++a) off += idx[a] * strides[a];
      const auto k = static_cast<std::size_t>(off);
      if (seen[k] != 0) {
        if (bad++ == 0) first = "the layout repeats an element (test bug)";
      }
      seen[k] = 1;
      const T want = expected(idx);
      if (bits_of(host[k]) != bits_of(want) && bad++ == 0) {
        std::ostringstream os;
        os << "element (";
        for (int a = 0; a < R; ++a) os << (a ? ", " : "") << idx[a];
        os << "): got " << show(host[k]) << ", want " << show(want);
        first = os.str();
      }
      for (int a = R - 1; a >= 0; --a) {  // next index, the last axis fastest
        if (++idx[a] < extents[a]) break;
        idx[a] = 0;
      }
    }
    for (std::size_t k = 0; k < host.size(); ++k)
      if (seen[k] == 0 && bits_of(host[k]) != bits_of(sentinel<T>()) && bad++ == 0)
        first = "buffer element " + std::to_string(k) + " outside the view was written";
    if (bad == 0) return "";
    return name + ": " + std::to_string(bad) + " bad elements; first: " + first;
  }
};

/// Row-major strides: the last axis steps by `inner` (negative: reversed), every other axis
/// by the span of the axes inside it plus `pad` elements.
template <int R>
std::array<Index, R> padded_strides(const std::array<Index, R>& e, Index inner, Index pad) {
  std::array<Index, R> s{};
  s[R - 1] = inner;
  Index step = (inner < 0 ? -inner : inner) * e[R - 1] + pad;
  for (int a = R - 2; a >= 0; --a) {
    s[a] = step;
    step = step * e[a] + pad;
  }
  return s;
}

/// The layouts every kernel is checked on (all addressing distinct elements):
/// contiguous; padded rows and planes; keys reversed with stride -2; the last two axes
/// transposed (keys slowest: stores no longer coalesced); for [H, Lq, Lk] the memory
/// order [Lq, H, Lk] (heads inside queries).
template <int R>
std::vector<std::pair<std::string, std::array<Index, R>>> layouts_for(const std::array<Index, R>& e,
                                                                      bool all) {
  std::vector<std::pair<std::string, std::array<Index, R>>> out;
  out.push_back({"contiguous", padded_strides<R>(e, 1, 0)});
  if (!all) return out;
  out.push_back({"padded", padded_strides<R>(e, 1, 3)});
  out.push_back({"reversed keys, stride -2", padded_strides<R>(e, -2, 1)});
  std::array<Index, R> t{};
  t[R - 2] = 1;
  t[R - 1] = e[R - 2];
  if constexpr (R == 3) t[0] = e[1] * e[2];
  out.push_back({"queries and keys transposed", t});
  if constexpr (R == 3) out.push_back({"memory [Lq, H, Lk]", {e[2], e[0] * e[2], 1}});
  return out;
}

// ---------------------------------------------------------------- references

posenc::attention_shape shape_of(Index heads, Index len_q, Index len_k, Index q_offset) {
  posenc::attention_shape s;
  s.heads = heads;
  s.len_q = len_q;
  s.len_k = len_k;
  s.dim = 1;
  s.q_offset = q_offset;
  return s;
}

template <class Policy>
std::vector<posenc::dmatrix> cpu_biases(const Policy& p, Index heads, Index lq, Index lk,
                                        Index q_offset) {
  std::vector<posenc::dmatrix> out;
  for (Index h = 0; h < heads; ++h)
    out.push_back(posenc::materialize_bias(p, 0, h, shape_of(heads, lq, lk, q_offset)));
  return out;
}

/// Deterministic values in [-4, 4) with a full double mantissa (a 64-bit LCG).
template <class T>
posenc::row_matrix<T> random_table(Index rows, Index cols, std::uint64_t seed) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  posenc::row_matrix<T> m(rows, cols);
  for (Index k = 0; k < m.size(); ++k) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    m.data()[k] = static_cast<T>(static_cast<double>(s >> 11) * 0x1.0p-53 * 8.0 - 4.0);
  }
  return m;
}

// ---------------------------------------------------------------- the checks

/// ALiBi of `policy` into [H, Lq, Lk] of type T on every layout, against the CPU.
template <class T>
void check_alibi(const posenc::alibi_policy& policy, Index lq, Index lk, Index q_offset,
                 bool all_layouts, cudaStream_t stream = nullptr) {
  const Index heads = policy.heads();
  CAPTURE(heads, lq, lk, q_offset, policy.form() == posenc::alibi_form::symmetric);
  const auto want = cpu_biases(policy, heads, lq, lk, q_offset);
  const std::array<Index, 3> e{heads, lq, lk};
  for (const auto& [name, strides] : layouts_for<3>(e, all_layouts)) {
    device_layout<T, 3> out(name, e, strides);
    pc::alibi_bias(policy, out.view(), q_offset, stream);
    REQUIRE(out.compare(
                [&](const std::array<Index, 3>& i) {
                  return to_storage<T>(want[static_cast<std::size_t>(i[0])](i[1], i[2]));
                },
                stream) == "");
  }
}

/// T5 buckets [Lq, Lk] of type I on every layout, against t5_buckets().
template <class I>
void check_t5_buckets(const posenc::t5_bucket_config& c, Index lq, Index lk, Index q_offset,
                      bool all_layouts) {
  CAPTURE(c.num_buckets, c.max_distance, c.bidirectional, lq, lk, q_offset);
  const posenc::row_matrix<Index> want = posenc::t5_buckets(lq, lk, c, q_offset);
  const std::array<Index, 2> e{lq, lk};
  for (const auto& [name, strides] : layouts_for<2>(e, all_layouts)) {
    device_layout<I, 2> out(name, e, strides);
    pc::t5_buckets(c, out.view(), q_offset);
    REQUIRE(out.compare([&](const std::array<Index, 2>& i) {
      return static_cast<I>(want(i[0], i[1]));
    }) == "");
  }
}

/// T5 biases [H, Lq, Lk] of type T from a device table of type Table (row-major
/// [B, H] or column-major), against materialize_bias(t5_bias_policy).
template <class T, class Table>
void check_t5_bias(const posenc::t5_bucket_config& c, Index heads, Index lq, Index lk,
                   Index q_offset, bool table_column_major, bool all_layouts) {
  CAPTURE(c.num_buckets, c.max_distance, c.bidirectional, heads, lq, lk, q_offset,
          table_column_major);
  const posenc::row_matrix<Table> table = random_table<Table>(c.num_buckets, heads, 7 + heads);
  const posenc::t5_bias_policy policy(table, c);
  const auto want = cpu_biases(policy, heads, lq, lk, q_offset);
  // the table on the device, element (b, h) at b·B_stride + h·H_stride
  const posenc::row_matrix<Table> stored =
      table_column_major ? posenc::row_matrix<Table>(table.transpose()) : table;
  const pc::device_buffer<Table> dtable = pc::to_device(stored);
  const strided_view<const Table, 2> tview(
      dtable.data(), {c.num_buckets, heads},
      table_column_major ? std::array<Index, 2>{1, c.num_buckets} : std::array<Index, 2>{heads, 1});
  const std::array<Index, 3> e{heads, lq, lk};
  for (const auto& [name, strides] : layouts_for<3>(e, all_layouts)) {
    device_layout<T, 3> out(name, e, strides);
    pc::t5_bias(c, tview, out.view(), q_offset);
    REQUIRE(out.compare([&](const std::array<Index, 3>& i) {
      return to_storage<T>(want[static_cast<std::size_t>(i[0])](i[1], i[2]));
    }) == "");
  }
}

// ---------------------------------------------------------------- error messages

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const posenc::error& e) {
    return e.what();
  }
  return "<no posenc::error>";
}

/// The CPU message with its function name replaced: "posenc::<cpu_where>: rest" ->
/// "posenc::<gpu_where>: rest" (the requirement, parameter and value unchanged).
std::string renamed(const std::string& cpu_message, const std::string& cpu_where,
                    const std::string& gpu_where) {
  const std::string prefix = "posenc::" + cpu_where + ": ";
  REQUIRE(cpu_message.rfind(prefix, 0) == 0);
  return "posenc::" + gpu_where + ": " + cpu_message.substr(prefix.size());
}

/// True when every element of the buffer still holds the sentinel (nothing launched).
template <class T>
bool untouched(const pc::device_buffer<T>& b) {
  pc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(untouched)");
  std::vector<T> host(static_cast<std::size_t>(b.size()));
  pc::copy_to_host(host.data(), b.data(), b.size());
  for (const T& x : host)
    if (bits_of(x) != bits_of(sentinel<T>())) return false;
  return true;
}

template <class T>
pc::device_buffer<T> sentinel_buffer(Index n) {
  pc::device_buffer<T> b(n);
  const std::vector<T> fill(static_cast<std::size_t>(n), sentinel<T>());
  pc::copy_to_device(b.data(), fill.data(), n);
  return b;
}

}  // namespace

// ====================================================================== ALiBi

TEST_CASE("cuda alibi_bias: paper slopes for every head count equal the CPU", "[cuda][alibi]") {
  for (Index heads : {1, 2, 3, 5, 6, 7, 8, 12, 16, 24, 31, 32, 40, 64, 96, 127, 128, 129, 200, 257})
    for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
      const posenc::alibi_policy p(heads, form);
      check_alibi<float>(p, 7, 19, 0, heads == 12 || heads == 129);
      check_alibi<double>(p, 5, 33, 3, false);
    }
}

TEST_CASE("cuda alibi_bias: max_bias and explicit slopes", "[cuda][alibi]") {
  for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
    for (double max_bias : {8.0, 1.5, 0.3, 16.0})
      for (Index heads : {4, 12, 20})
        check_alibi<double>(posenc::alibi_policy::from_max_bias(heads, max_bias, form), 9, 17, 2,
                            false);
    // any finite slopes, negative and zero included
    const posenc::alibi_policy p(std::vector<double>{0.5, -0.25, 0.0, 1e-300, 3.0, 0.1}, form);
    check_alibi<double>(p, 11, 13, 4, true);
    check_alibi<float>(p, 11, 13, 4, false);
  }
}

TEST_CASE("cuda alibi_bias: every output type, every layout", "[cuda][alibi]") {
  for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
    const posenc::alibi_policy p(12, form);
    check_alibi<float>(p, 33, 70, 0, true);
    check_alibi<double>(p, 33, 70, 5, true);
    check_alibi<Eigen::half>(p, 33, 70, 0, true);
    check_alibi<Eigen::bfloat16>(p, 33, 70, 9, true);
    // 16-bit results that round (large distances), and half's overflow to -inf
    check_alibi<Eigen::half>(p, 3, 40, 140000, false);
    check_alibi<Eigen::bfloat16>(p, 3, 40, 123457, false);
  }
}

TEST_CASE("cuda alibi_bias: query offsets (KV-cache decoding) up to the largest Index",
          "[cuda][alibi]") {
  const posenc::alibi_policy causal(32), symmetric(32, posenc::alibi_form::symmetric);
  for (Index q_offset : {Index(0), Index(1), Index(4096), Index(100000), Index(1) << 40}) {
    check_alibi<float>(causal, 1, 4097, q_offset, false);  // one decode row
    check_alibi<double>(symmetric, 4, 300, q_offset, false);
  }
  check_alibi<double>(causal, 3, 8, index_max - 3, false);  // the last representable rows
  check_alibi<float>(symmetric, 3, 8, index_max - 3, false);
}

TEST_CASE("cuda alibi_bias: launches that split heads, grid-stride loops, empty outputs",
          "[cuda][alibi]") {
  // 512·700 pairs: 3 groups of 3, 3 and 2 heads per thread (a remainder group)
  check_alibi<float>(posenc::alibi_policy(8), 512, 700, 0, false);
  // more than 2^20 pairs: one thread writes all heads
  check_alibi<float>(posenc::alibi_policy(3, posenc::alibi_form::symmetric), 1024, 1030, 17, false);
  // 600000 rows of one key: more rows than 65535 blocks of 8 rows, the y loop strides
  check_alibi<float>(posenc::alibi_policy(2), 600000, 1, 0, false);
  // empty: nothing written, nothing launched, no error
  check_alibi<float>(posenc::alibi_policy(4), 0, 9, 0, true);
  check_alibi<float>(posenc::alibi_policy(4), 9, 0, 0, true);
}

TEST_CASE("cuda alibi_bias: on a stream, and into a contiguous pointer", "[cuda][alibi]") {
  cudaStream_t stream = nullptr;
  pc::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_alibi<float>(posenc::alibi_policy(6), 40, 50, 3, true, stream);
  pc::check(cudaStreamDestroy(stream), "cudaStreamDestroy");

  const posenc::alibi_policy p = posenc::alibi_policy::from_max_bias(5, 4.0);
  pc::device_buffer<double> out = sentinel_buffer<double>(5 * 6 * 7);
  pc::alibi_bias(p, out.data(), 6, 7, 11);
  const posenc::row_matrix<double> got = pc::to_host(out, 5 * 6, 7);
  for (Index h = 0; h < 5; ++h) {
    const posenc::dmatrix want = posenc::materialize_bias(p, 0, h, shape_of(5, 6, 7, 11));
    CHECK((got.middleRows(h * 6, 6).array() == want.array()).all());
  }
}

TEST_CASE("cuda alibi_bias: bad arguments throw the CPU's messages and launch nothing",
          "[cuda][alibi][errors]") {
  const posenc::alibi_policy p(4);
  pc::device_buffer<float> buf = sentinel_buffer<float>(4 * 5 * 6);
  auto view = [&](Index heads, Index lq, Index lk) {
    return strided_view<float, 3>::contiguous(buf.data(), {heads, lq, lk});
  };
  // heads: policy.check, the CPU's own message
  {
    const std::string cpu =
        message_of([&] { posenc::materialize_bias(p, 0, 0, shape_of(3, 5, 6, 0)); });
    CHECK(cpu == "posenc::alibi_policy: heads = 3: must equal the number of ALiBi slopes");
    CHECK(message_of([&] { pc::alibi_bias(p, view(3, 5, 6)); }) == cpu);
  }
  // q_offset < 0 and q_offset + Lq past the largest Index: check_positions
  for (Index q_offset : {Index(-1), index_max - 4}) {
    CAPTURE(q_offset);
    const std::string cpu =
        message_of([&] { posenc::materialize_bias(p, 0, 0, shape_of(4, 5, 6, q_offset)); });
    CHECK(cpu.find("q_offset = " + std::to_string(q_offset)) != std::string::npos);
    CHECK(message_of([&] { pc::alibi_bias(p, view(4, 5, 6), q_offset); }) ==
          renamed(cpu, "materialize_bias", "cuda::alibi_bias"));
  }
  // negative lengths through the pointer overload: the CPU's alibi_bias messages
  for (const auto& lengths : {std::pair<Index, Index>{-1, 6}, std::pair<Index, Index>{5, -2}}) {
    const Index lq = lengths.first, lk = lengths.second;
    CAPTURE(lq, lk);
    const std::string cpu = message_of([&] { posenc::alibi_bias(4, lq, lk, 0); });
    CHECK(message_of([&] { pc::alibi_bias(p, buf.data(), lq, lk); }) ==
          renamed(cpu, "alibi_bias", "cuda::alibi_bias"));
  }
  // an output that repeats elements: a zero head stride, interleaved axes
  CHECK(message_of([&] {
          pc::alibi_bias(p, strided_view<float, 3>(buf.data(), {4, 5, 6}, {0, 6, 1}));
        }) ==
        "posenc::cuda::alibi_bias: out strides = 0: must address distinct elements (each "
        "axis's |stride| at least the span of the axes inside it): device threads write "
        "them concurrently");
  CHECK(message_of([&] {
          pc::alibi_bias(p, strided_view<float, 3>(buf.data(), {4, 2, 3}, {1, 2, 4}));
        }).find("out strides = 2: must address distinct elements") != std::string::npos);
  CHECK(untouched(buf));
}

// ====================================================================== T5 buckets

namespace {
std::vector<posenc::t5_bucket_config> bucket_configs() {
  return {
      {32, 128, true},                   // T5's encoder: exact boundaries at distances 16, 32, 64
      {32, 128, false},                  // T5's decoder
      {4, 2, true},                      // the smallest bidirectional: one exact bucket per side
      {2, 2, false},                     // the smallest unidirectional
      {8, 16, true},    {31, 50, true},  // odd num_buckets
      {16, 9, false},                    // max_distance just above the exact buckets
      {64, 256, true},  {128, 1000, false}, {320, 1000, true},
  };
}
}  // namespace

TEST_CASE("cuda t5_buckets: every configuration and distance equals the CPU", "[cuda][t5]") {
  for (const auto& c : bucket_configs()) {
    // every relative distance from -(Lq - 1 + q_offset) to Lk - 1: past max_distance both ways
    check_t5_buckets<std::int32_t>(c, 300, 1200, 0, false);
    check_t5_buckets<Index>(c, 37, 45, 3, true);
    check_t5_buckets<std::int32_t>(c, 37, 45, 3, true);
    for (Index q_offset : {Index(200), Index(1) << 40, index_max - 2})
      check_t5_buckets<Index>(c, 2, 1100, q_offset, false);
  }
}

TEST_CASE("cuda t5_buckets: large grids, empty outputs, num_buckets past int32 for Index",
          "[cuda][t5]") {
  check_t5_buckets<std::int32_t>({32, 128, true}, 600000, 1, 5, false);  // the y loop strides
  check_t5_buckets<std::int32_t>({32, 128, true}, 0, 5, 0, true);
  check_t5_buckets<Index>({32, 128, false}, 5, 0, 0, true);
  // Index indices take any num_buckets (int32 ones refuse it, see the errors)
  check_t5_buckets<Index>({Index(1) << 32, (Index(1) << 31) + 1, false}, 3, 4, 9, false);
}

TEST_CASE("cuda t5_buckets: bad arguments throw the CPU's messages and launch nothing",
          "[cuda][t5][errors]") {
  pc::device_buffer<std::int32_t> buf = sentinel_buffer<std::int32_t>(5 * 6);
  const auto view = strided_view<std::int32_t, 2>::contiguous(buf.data(), {5, 6});
  const std::vector<posenc::t5_bucket_config> bad = {
      {3, 128, true}, {1, 128, false}, {32, 8, true}, {32, 16, false}, {-4, 10, true}};
  for (const auto& c : bad) {
    CAPTURE(c.num_buckets, c.max_distance, c.bidirectional);
    const std::string cpu = message_of([&] { posenc::t5_buckets(5, 6, c, 0); });
    const bool names_config = cpu.rfind("posenc::t5_buckets: num_buckets = ", 0) == 0 ||
                              cpu.rfind("posenc::t5_buckets: max_distance = ", 0) == 0;
    CHECK(names_config);
    CHECK(message_of([&] { pc::t5_buckets(c, view); }) ==
          renamed(cpu, "t5_buckets", "cuda::t5_buckets"));
  }
  for (Index q_offset : {Index(-3), index_max - 4}) {
    CAPTURE(q_offset);
    const std::string cpu = message_of([&] { posenc::t5_buckets(5, 6, {}, q_offset); });
    CHECK(cpu.find("q_offset = " + std::to_string(q_offset)) != std::string::npos);
    CHECK(message_of([&] { pc::t5_buckets({}, view, q_offset); }) ==
          renamed(cpu, "t5_buckets", "cuda::t5_buckets"));
  }
  const posenc::t5_bucket_config huge{Index(1) << 31, (Index(1) << 30) + 1, false};
  CHECK(message_of([&] { pc::t5_buckets(huge, view); }) ==
        "posenc::cuda::t5_buckets: num_buckets = 2147483648: must be <= 2147483647 for int32 "
        "bucket indices");
  CHECK(message_of([&] {
          pc::t5_buckets({}, strided_view<std::int32_t, 2>(buf.data(), {5, 6}, {1, 1}));
        }).find("posenc::cuda::t5_buckets: out strides = 1: must address distinct elements") == 0);
  CHECK(untouched(buf));
}

// ====================================================================== T5 biases

TEST_CASE("cuda t5_bias: every configuration, head count and table layout equals the CPU",
          "[cuda][t5]") {
  for (const auto& c : bucket_configs())
    for (Index heads : {1, 3, 8, 12})
      for (bool column_major : {false, true}) {
        check_t5_bias<float, float>(c, heads, 20, 300, 0, column_major, heads == 3);
        check_t5_bias<double, double>(c, heads, 3, 260, 150, column_major, false);
      }
}

TEST_CASE("cuda t5_bias: every output and table type", "[cuda][t5]") {
  const posenc::t5_bucket_config c{32, 128, true};
  check_t5_bias<float, double>(c, 6, 17, 150, 2, false, true);  // rounded once to float
  check_t5_bias<double, float>(c, 6, 17, 150, 2, true, false);
  check_t5_bias<Eigen::half, float>(c, 6, 17, 150, 2, false, true);
  check_t5_bias<Eigen::bfloat16, double>(c, 6, 17, 150, 2, true, true);
  check_t5_bias<Eigen::half, Eigen::half>(c, 6, 17, 150, 2, false, false);
  check_t5_bias<float, Eigen::bfloat16>(c, 6, 17, 150, 2, false, false);
}

TEST_CASE("cuda t5_bias: offsets, split heads, more heads than blocks in z", "[cuda][t5]") {
  const posenc::t5_bucket_config dec{32, 128, false};
  for (Index q_offset : {Index(1), Index(4096), Index(1) << 40, index_max - 1})
    check_t5_bias<float, float>(dec, 8, 1, 2048, q_offset, false, false);      // decode rows
  check_t5_bias<float, float>({32, 128, true}, 8, 512, 700, 0, false, false);  // 3 head groups
  // 70000 heads of one pair each: more head groups than the 65535 blocks of z
  check_t5_bias<float, float>({8, 16, true}, 70000, 1, 2, 5, true, false);
  check_t5_bias<float, float>({32, 128, true}, 4, 0, 7, 0, false, true);  // empty
}

TEST_CASE("cuda t5_bias: bad arguments throw the CPU's messages and launch nothing",
          "[cuda][t5][errors]") {
  const posenc::t5_bucket_config c{8, 16, true};
  const posenc::row_matrix<float> host_table = random_table<float>(8, 3, 1);
  const pc::device_buffer<float> table = pc::to_device(host_table);
  const auto tview = strided_view<const float, 2>::contiguous(table.data(), {8, 3});
  pc::device_buffer<float> buf = sentinel_buffer<float>(3 * 4 * 5);
  const auto out = strided_view<float, 3>::contiguous(buf.data(), {3, 4, 5});

  // configuration: t5_bias_policy's messages
  for (const auto& bad : {posenc::t5_bucket_config{3, 16, true}, {8, 2, true}}) {
    CAPTURE(bad.num_buckets, bad.max_distance);
    const std::string cpu = message_of(
        [&] { posenc::t5_bias_policy(posenc::row_matrix<float>::Zero(bad.num_buckets, 3), bad); });
    CHECK(message_of([&] { pc::t5_bias(bad, tview, out); }) ==
          renamed(cpu, "t5_bias_policy", "cuda::t5_bias"));
  }
  // table rows and columns
  {
    const std::string cpu =
        message_of([&] { posenc::t5_bias_policy(posenc::row_matrix<float>::Zero(7, 3), c); });
    CHECK(cpu == "posenc::t5_bias_policy: table.rows() = 7: must equal num_buckets");
    const auto seven = strided_view<const float, 2>::contiguous(table.data(), {7, 3});
    CHECK(message_of([&] { pc::t5_bias(c, seven, out); }) ==
          renamed(cpu, "t5_bias_policy", "cuda::t5_bias"));
  }
  {
    const std::string cpu =
        message_of([&] { posenc::t5_bias_policy(posenc::row_matrix<float>::Zero(8, 0), c); });
    const auto none = strided_view<const float, 2>(table.data(), {8, 0}, {3, 1});
    const auto empty_out = strided_view<float, 3>::contiguous(buf.data(), {0, 4, 5});
    CHECK(message_of([&] { pc::t5_bias(c, none, empty_out); }) ==
          renamed(cpu, "t5_bias_policy", "cuda::t5_bias"));
  }
  // heads: policy.check
  {
    const posenc::t5_bias_policy p(host_table, c);
    const std::string cpu =
        message_of([&] { posenc::materialize_bias(p, 0, 0, shape_of(2, 4, 5, 0)); });
    CHECK(cpu == "posenc::t5_bias_policy: heads = 2: must equal table.cols()");
    const auto two = strided_view<float, 3>::contiguous(buf.data(), {2, 4, 5});
    CHECK(message_of([&] { pc::t5_bias(c, tview, two); }) ==
          renamed(cpu, "t5_bias_policy", "cuda::t5_bias"));
    // q_offset: check_positions
    for (Index q_offset : {Index(-1), index_max - 3}) {
      CAPTURE(q_offset);
      const std::string cpu_q =
          message_of([&] { posenc::materialize_bias(p, 0, 0, shape_of(3, 4, 5, q_offset)); });
      CHECK(message_of([&] { pc::t5_bias(c, tview, out, q_offset); }) ==
            renamed(cpu_q, "materialize_bias", "cuda::t5_bias"));
    }
  }
  // the output over the table, and an output that repeats elements
  {
    pc::device_buffer<float> shared = sentinel_buffer<float>(8 * 3 + 3 * 4 * 5);
    const auto t = strided_view<const float, 2>::contiguous(shared.data(), {8, 3});
    const auto o = strided_view<float, 3>::contiguous(shared.data() + 20, {3, 4, 5});
    CHECK(message_of([&] { pc::t5_bias(c, t, o); }) ==
          "posenc::cuda::t5_bias: out = shares memory with table: an output must share no "
          "element with the inputs");
    CHECK(untouched(shared));
    CHECK(message_of([&] {
            pc::t5_bias(c, tview, strided_view<float, 3>(buf.data(), {3, 4, 5}, {5, 5, 1}));
          }).find("posenc::cuda::t5_bias: out strides = 5: must address distinct elements") == 0);
  }
  CHECK(untouched(buf));
}
