// The absolute tables on CUDA against the CPU scalar backend, on random inputs: the
// sinusoidal encoding (every preset, offsets, host and device position lists, strided
// views, add_to on sequences and batches), the learned table (lookups, adds, both backward
// modes, SGD) and the embedding layer, in float and double, and every bad-input path.
//
// What "equal" means here, per operation:
//   - sinusoidal values: within 1 ulp of float / 4 ulp of double of the CPU's (sin and cos
//     in double rounded once on both sides; CUDA's double sin/cos are within 2 double ulp,
//     glibc's within 1)
//   - sinusoidal add_to and embed: the bits of fl(fl(s * E) + PE) with the device's own PE
//     values (read back through table_into), i.e. the CPU's arithmetic (a product and a sum,
//     each rounded; the kernels use __fmul_rn / __fadd_rn, never a fused multiply-add)
//   - learned lookups, adds, embed, offset backward, deterministic backward, atomic backward
//     at distinct positions, and SGD: the CPU's bits. The CPU reference runs in this
//     translation unit, compiled for the baseline x86-64 (no FMA instruction, so no
//     contraction); the host-side expectations use volatile temporaries to round the same
//     way whatever the flags.
//   - atomic backward at repeated positions: within n * eps * sum |g| of the CPU (the order
//     of the sum varies).

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <posenc/core/random.hpp>
#include <posenc/encoding/cuda/learned.cuh>
#include <posenc/encoding/cuda/sinusoidal.cuh>
#include <posenc/encoding/learned.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/cuda_support.cuh"
#include "support/catch.hpp"
#include "support/check.hpp"

namespace {

using posenc::Index;
template <class T>
using mat = posenc::row_matrix<T>;
template <class T>
using cpu_sinusoidal = posenc::sinusoidal<T, posenc::backend::scalar>;
template <class T>
using gpu_sinusoidal = posenc::sinusoidal<T, posenc::backend::cuda>;
namespace pc = posenc::cuda;

constexpr Index two53 = Index{1} << 53;

// ---- random data ----------------------------------------------------------------------

template <class T>
mat<T> random_matrix(Index rows, Index cols, std::uint64_t seed) {
  posenc::random_generator g(seed);
  mat<T> m(rows, cols);
  for (Index k = 0; k < m.size(); ++k) m.data()[k] = static_cast<T>(g.normal());
  return m;
}

std::vector<Index> random_indices(Index n, Index lo, Index hi, std::uint64_t seed) {
  posenc::random_generator g(seed);
  std::vector<Index> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = lo + static_cast<Index>(g.next_u64() % static_cast<std::uint64_t>(hi - lo));
  return v;
}

// ---- device buffers and where a view sits in them --------------------------------------

/// A [batch, rows, cols] view inside a buffer of `size` elements, starting at `offset`.
struct layout {
  Index batch = 1, rows = 0, cols = 0;
  Index bs = 0, rs = 0, cs = 1;
  Index offset = 0, size = 0;
  Index at(Index b, Index r, Index c) const { return offset + b * bs + r * rs + c * cs; }
};
layout contiguous(Index rows, Index cols) { return {1, rows, cols, 0, cols, 1, 0, rows * cols}; }
/// Rows further apart than their width (a column block of a wider matrix).
layout padded(Index rows, Index cols) {
  return {1, rows, cols, 0, cols + 3, 1, 1, rows * (cols + 3) + 1};
}
layout column_major(Index rows, Index cols) { return {1, rows, cols, 0, 1, rows, 0, rows * cols}; }
/// Head `head` of a [batch, rows, heads, cols] buffer.
layout head_slice(Index batch, Index rows, Index heads, Index head, Index cols) {
  return {batch,        rows, cols,        rows * heads * cols,
          heads * cols, 1,    head * cols, batch * rows * heads * cols};
}

using posenc_test::download;
using posenc_test::upload;

/// A host image of `l`'s buffer: `fill` everywhere, the sequences of `m` (batch * rows
/// rows, sequence-major) at the view's places.
template <class T>
std::vector<T> image(const layout& l, const mat<T>& m, T fill) {
  std::vector<T> h(static_cast<std::size_t>(l.size), fill);
  for (Index b = 0; b < l.batch; ++b)
    for (Index r = 0; r < l.rows; ++r)
      for (Index c = 0; c < l.cols; ++c)
        h[static_cast<std::size_t>(l.at(b, r, c))] = m(b * l.rows + r, c);
  return h;
}
/// The view's elements of a host image, [batch * rows, cols].
template <class T>
mat<T> gather(const std::vector<T>& h, const layout& l) {
  mat<T> m(l.batch * l.rows, l.cols);
  for (Index b = 0; b < l.batch; ++b)
    for (Index r = 0; r < l.rows; ++r)
      for (Index c = 0; c < l.cols; ++c)
        m(b * l.rows + r, c) = h[static_cast<std::size_t>(l.at(b, r, c))];
  return m;
}
/// Whether every element of the image outside the view is still `fill`.
template <class T>
bool outside_is(const std::vector<T>& h, const layout& l, T fill) {
  std::vector<char> inside(h.size(), 0);
  for (Index b = 0; b < l.batch; ++b)
    for (Index r = 0; r < l.rows; ++r)
      for (Index c = 0; c < l.cols; ++c) inside[static_cast<std::size_t>(l.at(b, r, c))] = 1;
  for (std::size_t k = 0; k < h.size(); ++k)
    if (!inside[k] && h[k] != fill) return false;
  return true;
}

template <class T>
posenc::seq_view<T> seq_in(pc::device_buffer<T>& d, const layout& l) {
  return posenc::seq_view<T>(d.data() + l.offset, {l.rows, l.cols}, {l.rs, l.cs});
}
template <class T>
posenc::batch_view<T> batch_in(pc::device_buffer<T>& d, const layout& l) {
  return posenc::batch_view<T>(d.data() + l.offset, {l.batch, l.rows, l.cols}, {l.bs, l.rs, l.cs});
}

// ---- comparisons ------------------------------------------------------------------------

/// Distance in representable values between two finite numbers (0 for +0 and -0).
template <class T>
std::int64_t ulp_distance(T a, T b) {
  using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  const auto key = [](T x) {
    I i;
    std::memcpy(&i, &x, sizeof i);
    return i < 0 ? static_cast<std::int64_t>(std::numeric_limits<I>::min()) - i
                 : static_cast<std::int64_t>(i);
  };
  const std::int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}
template <class T>
std::int64_t max_ulps(const mat<T>& a, const mat<T>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  std::int64_t worst = 0;
  for (Index k = 0; k < a.size(); ++k)
    worst = std::max(worst, ulp_distance(a.data()[k], b.data()[k]));
  return worst;
}
/// The sinusoid's bound: 1 ulp of float, 4 of double.
template <class T>
constexpr std::int64_t sin_ulps = std::is_same_v<T, float> ? 1 : 4;

/// Bit-for-bit equality, naming the first difference.
template <class T>
bool same_bits(const mat<T>& a, const mat<T>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    UNSCOPED_INFO("shapes " << a.rows() << "x" << a.cols() << " and " << b.rows() << "x"
                            << b.cols());
    return false;
  }
  for (Index k = 0; k < a.size(); ++k)
    if (std::memcmp(a.data() + k, b.data() + k, sizeof(T)) != 0) {
      UNSCOPED_INFO("first difference at (" << k / a.cols() << ", " << k % a.cols()
                                            << "): " << a.data()[k] << " vs " << b.data()[k]);
      return false;
    }
  return true;
}

/// fl(fl(s * x) + y), each step rounded to T.
template <class T>
T scaled_sum(T s, T x, T y) {
  volatile T p = s * x;
  volatile T q = p + y;
  return q;
}

/// The CPU factor of embedding_scale.
template <class T>
T scale_of(posenc::embedding_scale s, Index d) {
  return s == posenc::embedding_scale::sqrt_dim ? static_cast<T>(std::sqrt(static_cast<double>(d)))
                                                : T(1);
}

const std::string no_error = "(no posenc::error)";
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const posenc::error& e) {
    return e.what();
  }
  return no_error;
}
/// `from` replaced by `to` (once) in `s`.
std::string renamed(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}
/// The device call throws the CPU call's message, with the CPU's function name `from`
/// replaced by the device's `to` (nothing replaced when they are the same).
#define POSENC_SAME_ERROR(device_call, cpu_call, from, to)         \
  do {                                                             \
    const std::string cpu_msg_ = message_of([&] { cpu_call; });    \
    const std::string dev_msg_ = message_of([&] { device_call; }); \
    INFO("cpu: " << cpu_msg_ << "\ndevice: " << dev_msg_);         \
    REQUIRE(cpu_msg_ != no_error);                                 \
    CHECK(dev_msg_ == renamed(cpu_msg_, from, to));                \
  } while (0)

std::vector<posenc::sinusoidal_config> every_preset() {
  using C = posenc::sinusoidal_config;
  return {C::vaswani(64), C::vaswani(6, 500.0), C::fairseq(33, 1),
          C::fairseq(8),  C::t2t(17, 1.0, 1e4), C::t2t(2),
          C::t2t(1)};
}

}  // namespace

// ===== sinusoidal ===========================================================================

TEMPLATE_TEST_CASE(
    "cuda sinusoidal: table_into matches the CPU for every preset, offset and layout",
    "[cuda][sinusoidal]", float, double) {
  using T = TestType;
  const T fill = T(-7.25);
  const Index len = 50;
  for (const auto& config : every_preset()) {
    const cpu_sinusoidal<T> cpu(config);
    const gpu_sinusoidal<T> gpu(config);
    REQUIRE(gpu.frequencies() == cpu.frequencies());
    const Index d = config.dim;
    for (const Index offset : {Index(0), Index(7), Index(-40), Index(1) << 40, two53 - len}) {
      const mat<T> expected = cpu.table(len, offset);
      for (const layout& l : {contiguous(len, d), padded(len, d), column_major(len, d)}) {
        INFO("preset " << posenc::to_string(config.preset) << ", d = " << d << ", offset " << offset
                       << ", row stride " << l.rs << ", column stride " << l.cs);
        auto buf = upload(std::vector<T>(static_cast<std::size_t>(l.size), fill));
        gpu.table_into(seq_in(buf, l), offset);
        const auto h = download(buf);
        const mat<T> got = gather(h, l);
        CHECK(max_ulps(got, expected) <= sin_ulps<T>);
        CHECK(outside_is(h, l, fill));
        if (d % 2 == 1) CHECK((got.col(d - 1).array() == T(0)).all());  // padding column
        const Index zero_row = config.padding_idx - offset;             // fairseq's padding
        if (config.padding_idx >= 0 && zero_row >= 0 && zero_row < len)
          CHECK((got.row(zero_row).array() == T(0)).all());
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda sinusoidal: at() with host and device positions matches the CPU",
                   "[cuda][sinusoidal]", float, double) {
  using T = TestType;
  std::vector<Index> positions = random_indices(300, -100000, 100000, 11);
  for (const Index p : {Index(0), Index(1), Index(2), two53, -two53, two53 - 1, Index(1) << 33})
    positions.push_back(p);
  const Index n = static_cast<Index>(positions.size());
  for (const auto& config : every_preset()) {
    INFO("preset " << posenc::to_string(config.preset) << ", d = " << config.dim);
    const cpu_sinusoidal<T> cpu(config);
    const gpu_sinusoidal<T> gpu(config);
    const mat<T> expected = cpu.at(positions);
    const layout l = padded(n, config.dim);

    auto from_host = upload(std::vector<T>(static_cast<std::size_t>(l.size), T(3)));
    gpu.at(positions, seq_in(from_host, l));
    const auto hh = download(from_host);
    CHECK(max_ulps(gather(hh, l), expected) <= sin_ulps<T>);
    CHECK(outside_is(hh, l, T(3)));

    auto ids = upload(positions);
    auto from_device = upload(std::vector<T>(static_cast<std::size_t>(l.size), T(3)));
    gpu.at(ids.data(), n, seq_in(from_device, l));
    CHECK(same_bits(gather(download(from_device), l), gather(hh, l)));  // one kernel, same bits

    // a shorter list after a longer one reuses the staging buffer
    const std::vector<Index> few = {5, -3};
    auto small = upload(std::vector<T>(static_cast<std::size_t>(2 * config.dim), T(0)));
    gpu.at(few, seq_in(small, contiguous(2, config.dim)));
    CHECK(max_ulps(gather(download(small), contiguous(2, config.dim)), cpu.at(few)) <= sin_ulps<T>);

    // empty lists write nothing and need no memory
    gpu.at(std::vector<Index>{}, posenc::seq_view<T>(nullptr, {0, config.dim}, {config.dim, 1}));
    gpu.at(nullptr, 0, posenc::seq_view<T>(nullptr, {0, config.dim}, {config.dim, 1}));
  }
}

TEMPLATE_TEST_CASE("cuda sinusoidal: add_to is fl(fl(s E) + PE) on sequences and batches",
                   "[cuda][sinusoidal]", float, double) {
  using T = TestType;
  const T fill = T(11.5);
  for (const auto& config : every_preset()) {
    const cpu_sinusoidal<T> cpu(config);
    const gpu_sinusoidal<T> gpu(config);
    const Index d = config.dim, seq = 37, batch = 3, heads = 2;
    for (const auto scale : {posenc::embedding_scale::none, posenc::embedding_scale::sqrt_dim}) {
      const T s = scale_of<T>(scale, d);
      for (const Index offset : {Index(0), Index(1000003), Index(-5)}) {
        INFO("preset " << posenc::to_string(config.preset) << ", d = " << d << ", offset " << offset
                       << ", scale " << s);
        // the device's own PE values
        auto pe_buf = upload(std::vector<T>(static_cast<std::size_t>(seq * d), T(0)));
        gpu.table_into(seq_in(pe_buf, contiguous(seq, d)), offset);
        const mat<T> pe = gather(download(pe_buf), contiguous(seq, d));
        REQUIRE(max_ulps(pe, cpu.table(seq, offset)) <= sin_ulps<T>);

        // one sequence in a padded view
        const mat<T> e = random_matrix<T>(seq, d, 100 + static_cast<std::uint64_t>(d));
        const layout ls = padded(seq, d);
        auto es = upload(image(ls, e, fill));
        gpu.add_to(seq_in(es, ls), offset, scale);
        const auto hs = download(es);
        mat<T> expected(seq, d);
        for (Index r = 0; r < seq; ++r)
          for (Index c = 0; c < d; ++c) expected(r, c) = scaled_sum(s, e(r, c), pe(r, c));
        CHECK(same_bits(gather(hs, ls), expected));
        CHECK(outside_is(hs, ls, fill));
        mat<T> cpu_e = e;
        cpu.add_to(cpu_e, offset, scale);
        const double tol =
            8 * std::numeric_limits<T>::epsilon() * (1 + s * e.cwiseAbs().maxCoeff());
        CHECK(posenc_test::max_abs_diff(gather(hs, ls), cpu_e) <= tol);

        // a batch: head 1 of a [batch, seq, heads, d] buffer
        const mat<T> eb = random_matrix<T>(batch * seq, d, 200 + static_cast<std::uint64_t>(d));
        const layout lb = head_slice(batch, seq, heads, 1, d);
        auto bb = upload(image(lb, eb, fill));
        gpu.add_to(batch_in(bb, lb), offset, scale);
        const auto hb = download(bb);
        mat<T> expected_b(batch * seq, d);
        for (Index b = 0; b < batch; ++b)
          for (Index r = 0; r < seq; ++r)
            for (Index c = 0; c < d; ++c)
              expected_b(b * seq + r, c) = scaled_sum(s, eb(b * seq + r, c), pe(r, c));
        CHECK(same_bits(gather(hb, lb), expected_b));
        CHECK(outside_is(hb, lb, fill));
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda sinusoidal: bad arguments give the CPU's errors", "[cuda][sinusoidal]",
                   float, double) {
  using T = TestType;
  using C = posenc::sinusoidal_config;
  SECTION("configurations") {
    C negative_padding = C::fairseq(8);
    negative_padding.padding_idx = -2;
    C padding_elsewhere = C::vaswani(8);
    padding_elsewhere.padding_idx = 0;
    for (const C& bad :
         {C::vaswani(0), C::vaswani(7), C::fairseq(3), C::vaswani(8, 1.0),
          C::vaswani(8, std::numeric_limits<double>::infinity()), C::t2t(8, 0.0, 10.0),
          C::t2t(8, 2.0, 1.0), negative_padding, padding_elsewhere}) {
      POSENC_SAME_ERROR((void)gpu_sinusoidal<T>{bad}, (void)cpu_sinusoidal<T>{bad}, "", "");
    }
  }
  const cpu_sinusoidal<T> cpu(8);
  const gpu_sinusoidal<T> gpu(8);
  auto buf = upload(std::vector<T>(64, T(1)));
  mat<T> host7 = mat<T>::Zero(4, 7), host8 = mat<T>::Zero(4, 8);
  SECTION("widths") {
    const auto narrow = seq_in(buf, contiguous(4, 7));
    POSENC_SAME_ERROR(gpu.table_into(narrow), cpu.table_into(host7), "", "");
    POSENC_SAME_ERROR(gpu.add_to(narrow), cpu.add_to(host7), "", "");
    const posenc::batch_view<T> narrow_batch(buf.data(), {2, 4, 7}, {28, 7, 1});
    const posenc::batch_view<T> host_batch(host7.data(), {2, 2, 7}, {14, 7, 1});
    POSENC_SAME_ERROR(gpu.add_to(narrow_batch), cpu.add_to(host_batch), "", "");
    POSENC_REQUIRE_ERROR(gpu.at(std::vector<Index>{1, 2, 3, 4}, narrow),
                         "posenc::sinusoidal::at: out.cols = 7: must equal the encoding's dim (8)");
  }
  SECTION("empty views: nothing to do, no memory needed") {
    gpu.add_to(posenc::batch_view<T>(nullptr, {0, 4, 8}, {32, 8, 1}));
    gpu.add_to(posenc::seq_view<T>(nullptr, {0, 8}, {8, 1}), two53);
    gpu.table_into(posenc::seq_view<T>(nullptr, {0, 8}, {8, 1}));
    const pc::learned_table<T> table(posenc::learned_table<T>(4, 8, 1));
    table.add_to(posenc::batch_view<T>(nullptr, {0, 4, 8}, {32, 8, 1}));
    const posenc::seq_view<const T> no_tokens(nullptr, {0, 8}, {8, 1});
    pc::embed(no_tokens, nullptr, posenc::embedding_scale::none, gpu,
              posenc::batch_view<T>(nullptr, {0, 4, 8}, {32, 8, 1}));
    pc::embed(no_tokens, nullptr, posenc::embedding_scale::none, table,
              posenc::seq_view<T>(nullptr, {0, 8}, {8, 1}));
    CHECK(buf.size() == 64);
  }
  SECTION("offsets beyond 2^53") {
    const auto v = seq_in(buf, contiguous(4, 8));
    POSENC_SAME_ERROR(gpu.table_into(v, two53 + 1), cpu.table_into(host8, two53 + 1), "", "");
    POSENC_SAME_ERROR(gpu.table_into(v, two53 - 2), cpu.table_into(host8, two53 - 2), "", "");
    POSENC_SAME_ERROR(gpu.add_to(v, -two53 - 1), cpu.add_to(host8, -two53 - 1), "", "");
  }
  SECTION("host positions") {
    const std::vector<Index> bad = {0, 1, two53 + 1, 2};
    const auto v = seq_in(buf, contiguous(4, 8));
    POSENC_SAME_ERROR(gpu.at(bad, v), cpu.at(bad), "", "");
    POSENC_REQUIRE_ERROR(gpu.at(std::vector<Index>{1, 2, 3}, v),
                         "posenc::sinusoidal::at: out.rows = 4: must equal the number of "
                         "positions (3)");
  }
  SECTION("device positions") {
    const std::vector<Index> positions = {0, 5, two53 + 1, -two53 - 1, 3};
    auto ids = upload(positions);
    const layout l = contiguous(5, 8);
    auto out = upload(std::vector<T>(40, T(9)));
    POSENC_REQUIRE_ERROR(gpu.at(ids.data(), 5, seq_in(out, l)),
                         "posenc::sinusoidal::at: positions[2] = 9007199254740993: must be "
                         "within +-2^53 (exact in double)");
    // the good rows are written, the bad ones left as they were
    const mat<T> got = gather(download(out), l);
    const mat<T> good = cpu.at(std::vector<Index>{0, 5, 3});
    CHECK(max_ulps(mat<T>(got.row(0)), mat<T>(good.row(0))) <= sin_ulps<T>);
    CHECK(max_ulps(mat<T>(got.row(1)), mat<T>(good.row(1))) <= sin_ulps<T>);
    CHECK(max_ulps(mat<T>(got.row(4)), mat<T>(good.row(2))) <= sin_ulps<T>);
    CHECK((got.row(2).array() == T(9)).all());
    CHECK((got.row(3).array() == T(9)).all());
    // a negative one first
    auto ids2 = upload(std::vector<Index>{1, -two53 - 5});
    POSENC_REQUIRE_ERROR(gpu.at(ids2.data(), 2, seq_in(out, contiguous(2, 8))),
                         "posenc::sinusoidal::at: positions[1] = -9007199254740997: must be "
                         "within +-2^53 (exact in double)");
    // the object works after an error
    gpu.at(ids.data(), 2, seq_in(out, contiguous(2, 8)));
    CHECK(max_ulps(gather(download(out), contiguous(2, 8)), cpu.at(std::vector<Index>{0, 5})) <=
          sin_ulps<T>);
    POSENC_REQUIRE_ERROR(gpu.at(ids.data(), -1, seq_in(out, contiguous(0, 8))),
                         "posenc::sinusoidal::at: count = -1: must be >= 0");
    POSENC_REQUIRE_ERROR(gpu.at(nullptr, 4, seq_in(out, contiguous(4, 8))),
                         "posenc::sinusoidal::at: positions = nullptr");
  }
}

// ===== learned table ========================================================================

namespace {
/// A host table with a nonzero gradient, so that device updates start from real values.
template <class T>
posenc::learned_table<T> host_table(Index max_len, Index d, std::uint64_t seed) {
  posenc::learned_table<T> t(max_len, d, seed, 0.5);
  t.backward(random_matrix<T>(max_len, d, seed + 1), 0);
  return t;
}
}  // namespace

TEMPLATE_TEST_CASE("cuda learned_table: lookups and adds are the CPU's bits", "[cuda][learned]",
                   float, double) {
  using T = TestType;
  const T fill = T(-3.5);
  const Index d = GENERATE(Index(24), Index(7));
  const auto scale = GENERATE(posenc::embedding_scale::none, posenc::embedding_scale::sqrt_dim);
  INFO("d = " << d << ", scale " << scale_of<T>(scale, d));
  {
    const auto cpu = host_table<T>(40, d, 5);
    const pc::learned_table<T> gpu(cpu);
    REQUIRE(gpu.max_len() == 40);
    REQUIRE(gpu.dim() == d);
    CHECK(same_bits(gpu.weights_to_host(), cpu.weights()));
    CHECK(same_bits(gpu.gradient_to_host(), cpu.gradient()));
    const pc::learned_table<T> from_matrix(cpu.weights());
    CHECK(same_bits(from_matrix.weights_to_host(), cpu.weights()));
    CHECK((from_matrix.gradient_to_host().array() == T(0)).all());

    const std::vector<Index> positions = random_indices(90, 0, 40, 17);  // repeats
    const Index n = static_cast<Index>(positions.size());
    auto ids = upload(positions);

    SECTION("at") {
      const layout l = column_major(n, d);
      auto a = upload(std::vector<T>(static_cast<std::size_t>(l.size), fill));
      gpu.at(positions, seq_in(a, l));
      CHECK(same_bits(gather(download(a), l), cpu.at(positions)));
      auto b = upload(std::vector<T>(static_cast<std::size_t>(l.size), fill));
      gpu.at(ids.data(), n, seq_in(b, l));
      CHECK(same_bits(gather(download(b), l), cpu.at(positions)));
    }
    SECTION("table_into") {
      for (const Index offset : {Index(0), Index(5), Index(40)}) {
        const Index len = 40 - offset;
        const layout l = padded(len, d);
        auto a = upload(std::vector<T>(static_cast<std::size_t>(l.size), fill));
        gpu.table_into(seq_in(a, l), offset);
        const auto h = download(a);
        CHECK(same_bits(gather(h, l), cpu.table(len, offset)));
        CHECK(outside_is(h, l, fill));
      }
    }
    {
      SECTION("add_to a sequence") {
        const mat<T> e = random_matrix<T>(30, d, 31);
        const layout l = padded(30, d);
        auto a = upload(image(l, e, fill));
        gpu.add_to(seq_in(a, l), 7, scale);
        mat<T> expected = e;
        cpu.add_to(expected, 7, scale);
        const auto h = download(a);
        CHECK(same_bits(gather(h, l), expected));
        CHECK(outside_is(h, l, fill));
      }
      SECTION("add_to a batch") {
        const Index batch = 3, seq = 12;
        const mat<T> e = random_matrix<T>(batch * seq, d, 32);
        const layout l = head_slice(batch, seq, 3, 2, d);
        auto a = upload(image(l, e, fill));
        gpu.add_to(batch_in(a, l), 28, scale);
        mat<T> expected = e;
        cpu.add_to(posenc::batch_view<T>::contiguous(expected.data(), {batch, seq, d}), 28, scale);
        const auto h = download(a);
        CHECK(same_bits(gather(h, l), expected));
        CHECK(outside_is(h, l, fill));
      }
      SECTION("add_at host and device positions") {
        const mat<T> e = random_matrix<T>(n, d, 33);
        mat<T> expected = e;
        cpu.add_at(expected, positions, scale);
        const layout l = padded(n, d);
        auto a = upload(image(l, e, fill));
        gpu.add_at(seq_in(a, l), positions, scale);
        CHECK(same_bits(gather(download(a), l), expected));
        auto b = upload(image(l, e, fill));
        gpu.add_at(seq_in(b, l), ids.data(), n, scale);
        const auto h = download(b);
        CHECK(same_bits(gather(h, l), expected));
        CHECK(outside_is(h, l, fill));
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda learned_table: backward, zero_grad and sgd_step", "[cuda][learned]", float,
                   double) {
  using T = TestType;
  const Index max_len = 32, d = 19;
  auto cpu = host_table<T>(max_len, d, 41);
  pc::learned_table<T> gpu(cpu);

  SECTION("distinct positions, atomic: the CPU's bits") {
    std::vector<Index> positions(max_len);
    for (Index i = 0; i < max_len; ++i) positions[static_cast<std::size_t>(i)] = (i * 13) % max_len;
    const mat<T> g = random_matrix<T>(max_len, d, 42);
    const layout l = padded(max_len, d);
    auto gb = upload(image(l, g, T(0)));
    gpu.backward(seq_in(gb, l), positions, pc::backward_mode::atomic);
    cpu.backward(g, positions);
    CHECK(same_bits(gpu.gradient_to_host(), cpu.gradient()));
  }
  SECTION("repeated positions") {
    const std::vector<Index> positions = random_indices(500, 0, 6, 43);  // ~80 rows each
    const Index n = static_cast<Index>(positions.size());
    const mat<T> g = random_matrix<T>(n, d, 44);
    const layout l = column_major(n, d);
    auto gb = upload(image(l, g, T(0)));
    auto ids = upload(positions);
    const mat<T> before = cpu.gradient();
    cpu.backward(g, positions);

    // deterministic: the CPU's bits, from host or device positions, every run
    pc::learned_table<T> second(host_table<T>(max_len, d, 41));
    gpu.backward(seq_in(gb, l), positions, pc::backward_mode::deterministic);
    CHECK(same_bits(gpu.gradient_to_host(), cpu.gradient()));
    second.backward(seq_in(gb, l), ids.data(), n, pc::backward_mode::deterministic);
    CHECK(same_bits(second.gradient_to_host(), cpu.gradient()));

    // atomic: the same sums in some order
    pc::learned_table<T> third(host_table<T>(max_len, d, 41));
    third.backward(seq_in(gb, l), ids.data(), n, pc::backward_mode::atomic);
    const mat<T> got = third.gradient_to_host();
    mat<double> abs_sum = before.template cast<double>().cwiseAbs();
    for (Index r = 0; r < n; ++r)
      abs_sum.row(positions[static_cast<std::size_t>(r)]) +=
          g.row(r).template cast<double>().cwiseAbs();
    const double eps = std::numeric_limits<T>::epsilon();
    for (Index k = 0; k < got.size(); ++k)
      CHECK(std::abs(static_cast<double>(got.data()[k]) -
                     static_cast<double>(cpu.gradient().data()[k])) <=
            static_cast<double>(n) * eps * abs_sum.data()[k]);
    // rows no position names are untouched
    for (Index p = 6; p < max_len; ++p) CHECK(same_bits(mat<T>(got.row(p)), mat<T>(before.row(p))));
  }
  SECTION("offsets, sequence and batch: the CPU's bits") {
    const mat<T> g = random_matrix<T>(20, d, 45);
    const layout l = padded(20, d);
    auto gb = upload(image(l, g, T(0)));
    gpu.backward(posenc::seq_view<const T>(seq_in(gb, l)), 9);
    cpu.backward(g, 9);
    CHECK(same_bits(gpu.gradient_to_host(), cpu.gradient()));

    const Index batch = 4, seq = 10;
    const mat<T> gbat = random_matrix<T>(batch * seq, d, 46);
    const layout lb = head_slice(batch, seq, 2, 1, d);
    auto bb = upload(image(lb, gbat, T(0)));
    gpu.backward(posenc::batch_view<const T>(batch_in(bb, lb)), 22);
    cpu.backward(posenc::batch_view<const T>::contiguous(gbat.data(), {batch, seq, d}), 22);
    CHECK(same_bits(gpu.gradient_to_host(), cpu.gradient()));
  }
  SECTION("zero_grad, sgd_step and to_host") {
    const std::vector<Index> positions = random_indices(64, 0, max_len, 47);
    const mat<T> g = random_matrix<T>(64, d, 48);
    auto gb = upload(image(contiguous(64, d), g, T(0)));
    gpu.backward(seq_in(gb, contiguous(64, d)), positions, pc::backward_mode::deterministic);
    cpu.backward(g, positions);
    REQUIRE(same_bits(gpu.gradient_to_host(), cpu.gradient()));
    gpu.sgd_step(0.037);
    cpu.sgd_step(0.037);
    CHECK(same_bits(gpu.weights_to_host(), cpu.weights()));
    const posenc::learned_table<T> back = gpu.to_host();
    CHECK(same_bits(back.weights(), cpu.weights()));
    CHECK(back.gradient() == cpu.gradient());
    gpu.zero_grad();
    cpu.zero_grad();
    CHECK(same_bits(gpu.gradient_to_host(), cpu.gradient()));
    gpu.sgd_step(0.5);  // a zero gradient leaves W as it is
    CHECK(same_bits(gpu.weights_to_host(), cpu.weights()));
  }
}

TEMPLATE_TEST_CASE("cuda learned_table: bad arguments", "[cuda][learned]", float, double) {
  using T = TestType;
  const std::string cpu_name = "posenc::learned_table::",
                    gpu_name = "posenc::cuda::learned_table::";
  SECTION("construction") {
    mat<T> w = random_matrix<T>(4, 3, 1);
    w(2, 1) = std::numeric_limits<T>::quiet_NaN();
    POSENC_SAME_ERROR((void)pc::learned_table<T>{w}, (void)posenc::learned_table<T>{w}, "", "");
    const mat<T> empty(0, 3);
    POSENC_SAME_ERROR((void)pc::learned_table<T>{empty}, (void)posenc::learned_table<T>{empty}, "",
                      "");
  }
  const posenc::learned_table<T> cpu(16, 4, 3);
  pc::learned_table<T> gpu(cpu);
  auto buf = upload(std::vector<T>(200, T(1)));
  mat<T> host = mat<T>::Zero(8, 4), host5 = mat<T>::Zero(8, 5);
  SECTION("host arguments: the CPU's messages") {
    const std::vector<Index> bad = {0, 3, 16, 2};
    const auto v4 = seq_in(buf, contiguous(4, 4));
    mat<T> z44 = mat<T>::Zero(4, 4);
    POSENC_SAME_ERROR(gpu.at(bad, v4), cpu.at(bad), cpu_name, gpu_name);
    const std::vector<Index> negative = {-1};
    POSENC_SAME_ERROR(gpu.at(negative, seq_in(buf, contiguous(1, 4))), cpu.at(negative), cpu_name,
                      gpu_name);
    POSENC_SAME_ERROR(gpu.add_to(seq_in(buf, contiguous(8, 5))), cpu.add_to(host5), cpu_name,
                      gpu_name);
    POSENC_SAME_ERROR(gpu.add_to(seq_in(buf, contiguous(8, 4)), 9), cpu.add_to(host, 9), cpu_name,
                      gpu_name);
    POSENC_SAME_ERROR(gpu.add_to(seq_in(buf, contiguous(8, 4)), 17), cpu.add_to(host, 17), cpu_name,
                      gpu_name);
    POSENC_SAME_ERROR(gpu.add_to(posenc::batch_view<T>(buf.data(), {2, 8, 4}, {32, 4, 1}), 10),
                      cpu.add_to(posenc::batch_view<T>(host.data(), {1, 8, 4}, {32, 4, 1}), 10),
                      cpu_name, gpu_name);
    POSENC_SAME_ERROR(gpu.add_at(v4, std::vector<Index>{1, 2}),
                      cpu.add_at(z44, std::vector<Index>{1, 2}), cpu_name, gpu_name);
    POSENC_SAME_ERROR(gpu.add_at(v4, bad), cpu.add_at(z44, bad), cpu_name, gpu_name);
    posenc::learned_table<T> cpu_mut(cpu);
    POSENC_SAME_ERROR(gpu.backward(posenc::seq_view<const T>(v4), bad),
                      cpu_mut.backward(mat<T>::Zero(4, 4), bad), cpu_name, gpu_name);
    POSENC_SAME_ERROR(gpu.backward(posenc::seq_view<const T>(seq_in(buf, contiguous(4, 5))),
                                   std::vector<Index>{1, 2, 3, 4}),
                      cpu_mut.backward(mat<T>::Zero(4, 5), std::vector<Index>{1, 2, 3, 4}),
                      cpu_name, gpu_name);
    POSENC_SAME_ERROR(gpu.backward(posenc::seq_view<const T>(v4), 14),
                      cpu_mut.backward(mat<T>::Zero(4, 4), 14), cpu_name, gpu_name);
    POSENC_SAME_ERROR(gpu.sgd_step(-0.1), cpu_mut.sgd_step(-0.1), cpu_name, gpu_name);
    POSENC_SAME_ERROR(gpu.sgd_step(std::numeric_limits<double>::quiet_NaN()),
                      cpu_mut.sgd_step(std::numeric_limits<double>::quiet_NaN()), cpu_name,
                      gpu_name);
    POSENC_REQUIRE_ERROR(gpu.table_into(seq_in(buf, contiguous(8, 4)), 10),
                         "posenc::cuda::learned_table::table_into: offset + len = 18: must be <= "
                         "max_len = 16");
    POSENC_REQUIRE_ERROR(gpu.at(std::vector<Index>{1, 2}, v4),
                         "posenc::cuda::learned_table::at: out.rows = 4: must equal the number of "
                         "positions (2)");
  }
  SECTION("memory shared with the table") {
    const posenc::seq_view<T> w(gpu.weights(), {2, 4}, {4, 1});
    POSENC_REQUIRE_ERROR(gpu.at(std::vector<Index>{1, 2}, w),
                         "shares memory with the table's weights");
    POSENC_REQUIRE_ERROR(gpu.add_to(w), "shares memory with the table's weights");
    const posenc::seq_view<const T> g(gpu.gradient() + 4, {2, 4}, {4, 1});
    POSENC_REQUIRE_ERROR(gpu.backward(g, 0), "shares memory with grad_output");
  }
  SECTION("device positions: the first bad one, nothing read out of bounds") {
    const posenc::learned_table<T> big(1024, 4, 9);
    pc::learned_table<T> table(big);
    std::vector<Index> positions = random_indices(20, 0, 1024, 50);
    positions[17] = 4096;
    positions[19] = -1;
    auto ids = upload(positions);
    const layout l = contiguous(20, 4);
    auto out = upload(std::vector<T>(80, T(5)));
    POSENC_REQUIRE_ERROR(table.at(ids.data(), 20, seq_in(out, l)),
                         "posenc::cuda::learned_table::at: positions[17] = 4096: must be in [0, "
                         "max_len) with max_len = 1024");
    const mat<T> got = gather(download(out), l);
    for (Index r = 0; r < 20; ++r) {
      if (r == 17 || r == 19)
        CHECK((got.row(r).array() == T(5)).all());
      else
        CHECK(same_bits(mat<T>(got.row(r)),
                        mat<T>(big.weights().row(positions[static_cast<std::size_t>(r)]))));
    }
    // in-place updates check first: E and the gradient do not change
    const mat<T> e = random_matrix<T>(20, 4, 51);
    auto eb = upload(image(l, e, T(0)));
    POSENC_REQUIRE_ERROR(table.add_at(seq_in(eb, l), ids.data(), 20),
                         "posenc::cuda::learned_table::add_at: positions[17] = 4096");
    CHECK(same_bits(gather(download(eb), l), e));
    for (const auto mode : {pc::backward_mode::atomic, pc::backward_mode::deterministic}) {
      POSENC_REQUIRE_ERROR(
          table.backward(posenc::seq_view<const T>(seq_in(eb, l)), ids.data(), 20, mode),
          "posenc::cuda::learned_table::backward: positions[17] = 4096");
      CHECK((table.gradient_to_host().array() == T(0)).all());
    }
    auto neg = upload(std::vector<Index>{-3, 2000});
    POSENC_REQUIRE_ERROR(table.at(neg.data(), 2, seq_in(out, contiguous(2, 4))),
                         "posenc::cuda::learned_table::at: positions[0] = -3: must be in [0, "
                         "max_len) with max_len = 1024");
    POSENC_REQUIRE_ERROR(table.at(nullptr, 2, seq_in(out, contiguous(2, 4))),
                         "posenc::cuda::learned_table::at: positions = nullptr");
    POSENC_REQUIRE_ERROR(table.backward(posenc::seq_view<const T>(seq_in(eb, l)), ids.data(), -2),
                         "posenc::cuda::learned_table::backward: count = -2: must be >= 0");
    // the table works after the errors
    table.at(ids.data(), 17, seq_in(out, contiguous(17, 4)));
    const std::vector<Index> first17(positions.begin(), positions.begin() + 17);
    CHECK(same_bits(gather(download(out), contiguous(17, 4)), big.at(first17)));
  }
}

// ===== embedding layer ======================================================================

TEMPLATE_TEST_CASE("cuda embed: token lookup times scale plus positions", "[cuda][embed]", float,
                   double) {
  using T = TestType;
  const T fill = T(8.25);
  const Index vocab = 50, d = 16, seq = 12, batch = 3;
  const mat<T> tokens = random_matrix<T>(vocab, d, 60);
  const layout lt = padded(vocab, d);
  auto tok = upload(image(lt, tokens, T(0)));
  const posenc::seq_view<const T> tv = seq_in(tok, lt);
  const gpu_sinusoidal<T> sin_gpu(d);
  const auto learned_cpu = host_table<T>(40, d, 61);
  const pc::learned_table<T> learned_gpu(learned_cpu);

  for (const auto scale : {posenc::embedding_scale::none, posenc::embedding_scale::sqrt_dim}) {
    const T s = scale_of<T>(scale, d);
    INFO("scale " << s);
    const std::vector<Index> ids = random_indices(batch * seq, 0, vocab, 62);
    auto dids = upload(ids);
    mat<T> e(batch * seq, d);  // the looked-up token rows
    for (Index k = 0; k < batch * seq; ++k) e.row(k) = tokens.row(ids[static_cast<std::size_t>(k)]);

    // sinusoidal positions: fl(fl(s E) + PE) with the device's PE
    auto pe_buf = upload(std::vector<T>(static_cast<std::size_t>(seq * d), T(0)));
    sin_gpu.table_into(seq_in(pe_buf, contiguous(seq, d)), 3);
    const mat<T> pe = gather(download(pe_buf), contiguous(seq, d));
    mat<T> expected(batch * seq, d);
    for (Index k = 0; k < batch * seq; ++k)
      for (Index c = 0; c < d; ++c) expected(k, c) = scaled_sum(s, e(k, c), pe(k % seq, c));

    const layout ls = padded(seq, d);
    auto out = upload(std::vector<T>(static_cast<std::size_t>(ls.size), fill));
    pc::embed(tv, dids.data(), scale, sin_gpu, seq_in(out, ls), 3);
    auto h = download(out);
    CHECK(same_bits(gather(h, ls), mat<T>(expected.topRows(seq))));
    CHECK(outside_is(h, ls, fill));

    const layout lb = head_slice(batch, seq, 2, 0, d);
    auto outb = upload(std::vector<T>(static_cast<std::size_t>(lb.size), fill));
    pc::embed(tv, dids.data(), scale, sin_gpu, batch_in(outb, lb), 3);
    h = download(outb);
    CHECK(same_bits(gather(h, lb), expected));
    CHECK(outside_is(h, lb, fill));

    // learned positions: the CPU's add_to on the looked-up rows
    mat<T> expected_l = e;
    learned_cpu.add_to(posenc::batch_view<T>::contiguous(expected_l.data(), {batch, seq, d}), 20,
                       scale);
    auto outl = upload(std::vector<T>(static_cast<std::size_t>(ls.size), fill));
    pc::embed(tv, dids.data(), scale, learned_gpu, seq_in(outl, ls), 20);
    CHECK(same_bits(gather(download(outl), ls), mat<T>(expected_l.topRows(seq))));
    auto outlb = upload(std::vector<T>(static_cast<std::size_t>(lb.size), fill));
    pc::embed(tv, dids.data(), scale, learned_gpu, batch_in(outlb, lb), 20);
    h = download(outlb);
    CHECK(same_bits(gather(h, lb), expected_l));
    CHECK(outside_is(h, lb, fill));
  }
}

TEMPLATE_TEST_CASE("cuda embed: bad arguments", "[cuda][embed]", float, double) {
  using T = TestType;
  const Index vocab = 50, d = 8, seq = 10;
  auto tok = upload(std::vector<T>(static_cast<std::size_t>(vocab * d), T(1)));
  const posenc::seq_view<const T> tv = seq_in(tok, contiguous(vocab, d));
  const gpu_sinusoidal<T> pe(d);
  const pc::learned_table<T> table(posenc::learned_table<T>(16, d, 2));
  auto out = upload(std::vector<T>(static_cast<std::size_t>(seq * d), T(4)));
  const layout l = contiguous(seq, d);
  std::vector<Index> ids = random_indices(seq, 0, vocab, 70);
  ids[5] = vocab;
  ids[8] = -3;
  auto bad = upload(ids);

  POSENC_REQUIRE_ERROR(
      pc::embed(tv, bad.data(), posenc::embedding_scale::none, pe, seq_in(out, l)),
      "posenc::cuda::embed: token_ids[5] = 50: must be in [0, vocab) with vocab = 50");
  const mat<T> got = gather(download(out), l);
  for (Index r = 0; r < seq; ++r) {
    INFO("row " << r);
    if (r == 5 || r == 8)
      CHECK((got.row(r).array() == T(4)).all());  // left as it was
    else
      CHECK((got.row(r).array() != T(4)).any());
  }
  POSENC_REQUIRE_ERROR(
      pc::embed(tv, bad.data(), posenc::embedding_scale::none, table, seq_in(out, l)),
      "posenc::cuda::embed: token_ids[5] = 50: must be in [0, vocab) with vocab = 50");
  auto neg = upload(std::vector<Index>{-3, 1});
  POSENC_REQUIRE_ERROR(pc::embed(tv, neg.data(), posenc::embedding_scale::none, table,
                                 seq_in(out, contiguous(2, d))),
                       "posenc::cuda::embed: token_ids[0] = -3");

  auto good = upload(random_indices(seq, 0, vocab, 71));
  const posenc::seq_view<const T> narrow_tokens = seq_in(tok, contiguous(vocab, d - 1));
  POSENC_REQUIRE_ERROR(
      pc::embed(narrow_tokens, good.data(), posenc::embedding_scale::none, pe, seq_in(out, l)),
      "posenc::cuda::embed: tokens.cols = 7: must equal the encoding's dim (8)");
  POSENC_REQUIRE_ERROR(pc::embed(tv, good.data(), posenc::embedding_scale::none, pe,
                                 seq_in(out, contiguous(seq - 1, d + 1))),
                       "posenc::cuda::embed: out.cols = 9");
  POSENC_REQUIRE_ERROR(pc::embed(tv, nullptr, posenc::embedding_scale::none, pe, seq_in(out, l)),
                       "posenc::cuda::embed: token_ids = nullptr");
  POSENC_REQUIRE_ERROR(
      pc::embed(tv, good.data(), posenc::embedding_scale::none, table, seq_in(out, l), 7),
      "posenc::cuda::embed: offset + len = 17: must be <= max_len = 16");
  POSENC_REQUIRE_ERROR(
      pc::embed(tv, good.data(), posenc::embedding_scale::none, pe, seq_in(out, l), two53),
      "posenc::cuda::embed: offset + len - 1");
  const posenc::seq_view<T> aliased(tok.data(), {seq, d}, {d, 1});
  POSENC_REQUIRE_ERROR(pc::embed(tv, good.data(), posenc::embedding_scale::none, pe, aliased),
                       "shares memory with tokens");
  const posenc::seq_view<T> into_weights(const_cast<T*>(table.weights()), {seq, d}, {d, 1});
  POSENC_REQUIRE_ERROR(
      pc::embed(tv, good.data(), posenc::embedding_scale::none, table, into_weights),
      "shares memory with the table's weights");
}
