// safetensors_file (one header read, lookups by name), the reader limits and the extent
// rule shared by both formats, large headers in bounded time, and the values shown in
// conversion errors (issue 25).

#include <chrono>
#include <cstdint>
#include <limits>
#include <posenc/io/json.hpp>
#include <posenc/io/npy.hpp>
#include <posenc/io/safetensors.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io_test_util.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc_test::data_path;
using posenc_test::npy_raw;
using posenc_test::ramp;
using posenc_test::safetensors_bytes;
using posenc_test::tmp_path;
using posenc_test::write_bytes;
namespace io = posenc::io;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// One entry "a" of dtype `dtype` and shape text `shape`, spanning `bytes` bytes of zeros.
std::string one_entry(const std::string& dtype, const std::string& shape, std::size_t bytes) {
  const std::string json = R"({"a":{"dtype":")" + dtype + R"(","shape":)" + shape +
                           R"(,"data_offsets":[0,)" + std::to_string(bytes) + "]}}";
  return write_bytes("extent.safetensors", safetensors_bytes(json, std::string(bytes, '\0')));
}

const std::string kMax = "9223372036854775807";  // 2^63 - 1

}  // namespace

TEST_CASE("safetensors_file: the header read once, tensors looked up by name",
          "[io][safetensors]") {
  const std::string mixed = data_path("io/mixed.safetensors");
  io::safetensors_file f(mixed);
  CHECK(f.path() == mixed);
  CHECK(f.names() == io::safetensors_names(mixed));
  CHECK(f.size() == f.names().size());
  CHECK(f.header().metadata == io::read_safetensors_header(mixed).metadata);
  CHECK(f.header().data_start == io::read_safetensors_header(mixed).data_start);
  CHECK(f.contains("ramp_f64"));
  CHECK(f.contains(std::string("iramp_i32")));
  CHECK_FALSE(f.contains("nope"));
  CHECK_FALSE(f.contains("__metadata__"));
  CHECK_FALSE(f.contains(""));

  const io::safetensors_info& i = f.info("ramp_f64");
  CHECK(i.name == "ramp_f64");
  CHECK(i.type == io::dtype::f64);
  CHECK(i.shape == std::vector<Index>{2, 3, 4});
  CHECK(i.end - i.begin == 24 * 8);
  // info() agrees with the header for every tensor, and the names come in header order.
  for (std::size_t k = 0; k < f.size(); ++k) {
    const io::safetensors_info& h = f.header().tensors[k];
    CHECK(&f.info(h.name) == &h);
    CHECK(f.names()[k] == h.name);
  }

  // The same values and errors as the free functions.
  const auto t = f.read<double>("ramp_f64");
  CHECK(t.shape == std::vector<Index>{2, 3, 4});
  for (int k = 0; k < 24; ++k) CHECK(t.data[static_cast<std::size_t>(k)] == ramp(k));
  CHECK(f.read<float>("ramp_1x2x2x3_f32").data ==
        io::read_safetensors<float>(mixed, "ramp_1x2x2x3_f32").data);
  CHECK(f.read<std::uint8_t>("bytes_u8").data == std::vector<std::uint8_t>{0, 1, 127, 128, 255});
  const auto m = f.read_matrix<float>("ramp_f32", 2, 3);
  CHECK(m == io::read_safetensors_matrix<float>(mixed, "ramp_f32"));
  CHECK(f.read_matrix<double>("empty_f32", 0, 4).size() == 0);
  CHECK(f.read<float>("scalar_f64").data == std::vector<float>{0.375f});
  POSENC_REQUIRE_ERROR(f.read_matrix<float>("ramp_f64"), "rank = 3");
  POSENC_REQUIRE_ERROR(f.read_matrix<float>("ramp_f32", 3, 3), "rows = 2");
  POSENC_REQUIRE_ERROR(f.read<std::uint8_t>("iramp_i64"), "element 0 (-3000009)");
  POSENC_REQUIRE_ERROR(f.read<std::int64_t>("ramp_f32"), "F32 (tensor \"ramp_f32\")");
  // Unknown names: the name and the path are in the message, and the object stays usable.
  POSENC_REQUIRE_ERROR(f.info("nope"), "name = 'nope': no such tensor in " + mixed);
  POSENC_REQUIRE_ERROR(f.read<float>("nope"), "name = 'nope'");
  POSENC_REQUIRE_ERROR(f.read_matrix<float>("__metadata__"), "name = '__metadata__'");
  POSENC_REQUIRE_ERROR(f.read<float>("ramp_f6"), mixed);
  CHECK(f.read<double>("iramp_i32").data[6] == 3000009.0);

  // Movable: the moved-to object reads the same file.
  io::safetensors_file g = std::move(f);
  CHECK(g.read_matrix<double>("ramp_f32", 2, 3)(1, 2) == ramp(5));

  // An empty file has no names; every lookup fails.
  const std::string empty = tmp_path("empty_file.safetensors");
  io::write_safetensors(empty, {});
  io::safetensors_file e(empty);
  CHECK(e.size() == 0);
  CHECK(e.names().empty());
  POSENC_REQUIRE_ERROR(e.info("x"), "it has 0");
}

TEST_CASE("safetensors_file: header defects are the errors read_safetensors_header gives",
          "[io][safetensors]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"a\":1,}", "expected a string key"},
      {"{\"a\":1,\"a\":2}", "duplicate key \"a\" (at header byte 10)"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", "unexpected key \"x\""},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "data_offsets span 4"},
      {"{} x", "unexpected characters after the JSON header"},
  };
  for (const auto& [json, needle] : bad) {
    INFO(json);
    const std::string p =
        write_bytes("file_bad.safetensors", safetensors_bytes(json, std::string(8, '\0')));
    POSENC_REQUIRE_ERROR(io::safetensors_file{p}, "posenc::io::safetensors: path = " + p);
    POSENC_REQUIRE_ERROR(io::safetensors_file{p}, needle);
    POSENC_REQUIRE_ERROR(io::read_safetensors_header(p), needle);
  }
  POSENC_REQUIRE_ERROR(io::safetensors_file(tmp_path("no/such/file.safetensors")), "cannot open");
}

TEST_CASE("safetensors: a 200k-entry header parses, and 10k tensors read by name, in bounded time",
          "[io][safetensors][scale]") {
  // Before issue 25 the duplicate-key check was quadratic (40k entries: 2.8 s, 200k: over a
  // minute) and every by-name read parsed the whole header again. The bounds are generous
  // (10 s, for slow or sanitized builds); bench_io measures the real figures.
  constexpr std::size_t n = 200000;
  const std::string path = write_bytes("many.safetensors", posenc_test::many_tensors(n));

  auto t0 = std::chrono::steady_clock::now();
  io::safetensors_file f(path);
  const double open_s = seconds_since(t0);
  INFO("opening a 200k-entry file took " << open_s << " s");
  CHECK(open_s < 10.0);
  REQUIRE(f.size() == n);
  CHECK(f.header().tensors.back().name == "t199999");

  t0 = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < 10000; ++k) {
    const std::size_t which = (k * 7919) % n;  // spread over the whole header
    const auto t = f.read<float>("t" + std::to_string(which));
    REQUIRE(t.data.size() == 1);
    REQUIRE(t.data[0] == static_cast<float>(which));
  }
  const double read_s = seconds_since(t0);
  INFO("10k reads by name took " << read_s << " s");
  CHECK(read_s < 10.0);

  // The free functions share the parser.
  t0 = std::chrono::steady_clock::now();
  CHECK(io::safetensors_names(path).size() == n);
  CHECK(io::read_safetensors<double>(path, "t123456").data == std::vector<double>{123456.0});
  CHECK(seconds_since(t0) < 10.0);
}

TEST_CASE("json: duplicate keys are found in large objects in O(n log n)", "[io][json][scale]") {
  constexpr int n = 200000;
  std::string text = "{";
  for (int k = 0; k < n; ++k) text += "\"key" + std::to_string(k) + "\":" + std::to_string(k) + ",";
  const auto errors = [](const std::string& s) {
    std::string what;
    try {
      io::detail::json_parser(s, [](const std::string& w, std::size_t at) {
        posenc::detail::fail("test_json", "offset", at, w);
      }).validate_document();
    } catch (const posenc::error& e) {
      what = e.what();
    }
    return what;
  };
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(errors(text + "\"end\":0}").empty());
  // The duplicate is the last key; escapes decode before keys are compared.
  const std::string dup = text + "\"key\\u0031234\":0}";
  CHECK(errors(dup) == "posenc::test_json: offset = " + std::to_string(dup.size() - 3) +
                           ": duplicate key \"key1234\"");
  CHECK(seconds_since(t0) < 10.0);
  // parse_document keeps the document's key order.
  const io::detail::json_value v =
      io::detail::json_parser("{\"b\":1,\"a\":[2,\"x\"],\"c\":{}}", [](const std::string& w,
                                                                       std::size_t at) {
        posenc::detail::fail("test_json", "offset", at, w);
      }).parse_document();
  CHECK(v.keys == std::vector<std::string>{"b", "a", "c"});
  REQUIRE(v.items.size() == 3);
  CHECK(v.items[1].items[1].text == "x");
  CHECK(v.items[2].k == io::detail::json_value::kind::object);
}

TEST_CASE("io: float values in conversion errors print in shortest round-trip form",
          "[io][npy][safetensors]") {
  // std::to_string showed 1e-300 as 0.000000 and 1e300 with 300 digits.
  const std::vector<double> tiny_huge = {1e-300, 1e300, 0.1};
  const std::string npy = tmp_path("values.npy");
  io::write_npy(npy, tiny_huge.data(), {3});
  POSENC_REQUIRE_ERROR(io::read_npy<std::int64_t>(npy),
                       "dtype '<f8': element 0 (1e-300) does not convert exactly");
  POSENC_REQUIRE_ERROR(io::read_npy<float>(npy), "element 1 (1e+300) does not convert");
  const std::vector<double> tenth = {0.1};
  io::write_npy(npy, tenth.data(), {1});
  POSENC_REQUIRE_ERROR(io::read_npy<std::int32_t>(npy), "element 0 (0.1) does not convert");

  io::tensor<double> t;
  t.shape = {3};
  t.data = tiny_huge;
  const std::string st = tmp_path("values.safetensors");
  io::tensor<double> tenth_t;
  tenth_t.shape = {1};
  tenth_t.data = tenth;
  io::write_safetensors(st, {{"d", t}, {"f", tenth_t, io::dtype::f32}});
  POSENC_REQUIRE_ERROR(io::read_safetensors<std::uint8_t>(st, "d"), "element 0 (1e-300)");
  POSENC_REQUIRE_ERROR(io::read_safetensors<float>(st, "d"),
                       "dtype F64 (tensor \"d\"): element 1 (1e+300) does not convert exactly");
  // Narrower dtypes print in their own precision: float(0.1) as 0.1 (not the double
  // 0.10000000149011612), the f16 code 0x0400 as 2^-14 in float.
  POSENC_REQUIRE_ERROR(io::read_safetensors<std::int64_t>(st, "f"), "element 0 (0.1) does not");
  POSENC_REQUIRE_ERROR(
      io::read_safetensors<std::int64_t>(data_path("io/mixed.safetensors"), "specials_f16"),
      "element 5 (6.1035156e-05)");
  // The writers print the same way (they printed 17 digits: 1.0000000000000001e+300).
  POSENC_REQUIRE_ERROR(io::safetensors_entry("big", t, io::dtype::f32),
                       "name = 'big': element 1 (1e+300) does not convert to dtype f32");
  t.data = {0.1, 2.0, 3.0};
  POSENC_REQUIRE_ERROR(io::safetensors_entry("i", t, io::dtype::i64),
                       "element 0 (0.1) does not convert to dtype i64");
}

TEST_CASE("io: one extent rule for both formats, whatever the order of the axes",
          "[io][npy][safetensors]") {
  // Each extent >= 0, and the product of the non-zero extents times the item size fits in
  // Index: a zero extent does not excuse the others.
  const auto npy = [](const std::string& descr, const std::string& shape) {
    return write_bytes(
        "extent.npy",
        npy_raw("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }",
                ""));
  };
  // Rejected, in either order (before: the zero first made them pass).
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy("<f8", "(0, " + kMax + ", " + kMax + ")")),
                       "shape product overflows at axis 1 (extent " + kMax + ")");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy("<f8", "(0, " + kMax + ")")),
                       "shape product overflows at axis 1");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy("<f8", "(" + kMax + ", 0)")),
                       "shape product overflows at axis 0");
  POSENC_REQUIRE_ERROR(io::read_npy_info(npy("|u1", "(0, " + kMax + ", 2)")),
                       "shape product overflows at axis 2");
  POSENC_REQUIRE_ERROR(io::read_npy_info(npy("|u1", "(" + kMax + ", 0, 2)")),
                       "shape product overflows at axis 2");
  // Accepted, in either order: 2^63 - 1 one-byte items fit.
  for (const std::string& shape : {"(" + kMax + ", 0)", "(0, " + kMax + ")"}) {
    INFO(shape);
    const auto t = io::read_npy<std::uint8_t>(npy("|u1", shape));
    CHECK(t.data.empty());
    CHECK(t.size() == 0);
    CHECK(io::read_npy_info(npy("|u1", shape)).shape.size() == 2);
  }

  // safetensors: the same rule, and the message names the tensor.
  POSENC_REQUIRE_ERROR(io::read_safetensors<double>(one_entry("F64", "[0," + kMax + "]", 0), "a"),
                       "tensor \"a\": shape product overflows at axis 1 (extent " + kMax + ")");
  POSENC_REQUIRE_ERROR(io::read_safetensors<double>(one_entry("F64", "[" + kMax + ",0]", 0), "a"),
                       "tensor \"a\": shape product overflows at axis 0");
  POSENC_REQUIRE_ERROR(
      io::read_safetensors_header(one_entry("U8", "[0," + kMax + "," + kMax + "]", 0)),
      "tensor \"a\": shape product overflows at axis 2");
  POSENC_REQUIRE_ERROR(io::read_safetensors_header(one_entry("F32", "[4294967296,4294967296]", 0)),
                       "tensor \"a\": shape product overflows at axis 1");
  for (const std::string& shape : {"[" + kMax + ",0]", "[0," + kMax + "]"}) {
    INFO(shape);
    io::safetensors_file f(one_entry("U8", shape, 0));
    CHECK(f.info("a").shape.size() == 2);
    CHECK(f.read<std::uint8_t>("a").data.empty());
  }
  // The writers apply it too.
  io::tensor<std::uint8_t> z;
  z.shape = {0, Index{1} << 62, 4};
  POSENC_REQUIRE_ERROR(io::safetensors_entry("z", z),
                       "name = 'z': shape product overflows at axis 2");
  POSENC_REQUIRE_ERROR(io::write_npy(tmp_path("z.npy"), z), "shape product overflows at axis 2");
}

TEST_CASE("io: sizes a file declares are checked before anything is stored",
          "[io][npy][safetensors]") {
  // .npy: the 65th extent is refused as it is reached, before the rest of the shape is read
  // (before: the whole tuple was stored first, here failing on the junk after it).
  std::string shape = "(";
  for (int a = 0; a < 65; ++a) shape += "1, ";
  POSENC_REQUIRE_ERROR(
      io::read_npy_info(write_bytes(
          "rank.npy",
          npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + "junk), }", ""))),
      "shape has more than 64 axes");
  // 64 axes are fine.
  std::string ok = "(";
  for (int a = 0; a < 64; ++a) ok += "1, ";
  CHECK(
      io::read_npy_info(write_bytes("rank.npy", npy_raw("{'descr': '<f8', 'fortran_order': False, "
                                                        "'shape': " +
                                                            ok + "), }",
                                                        std::string(8, '\0'))))
          .shape.size() == 64);
  // safetensors: the shape's length is checked before its extents are converted.
  std::string axes = "[";
  for (int a = 0; a < 65; ++a) axes += "-1,";
  axes += "-1]";
  POSENC_REQUIRE_ERROR(io::read_safetensors_header(one_entry("F32", axes, 0)),
                       "tensor \"a\": shape has more than 64 axes");
}
