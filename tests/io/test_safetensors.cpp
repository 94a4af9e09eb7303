#include <cmath>
#include <cstdint>
#include <map>
#include <posenc/io/safetensors.hpp>
#include <random>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc_test::data_path;
using posenc_test::le_bytes;
using posenc_test::ramp;
using posenc_test::same_value;
using posenc_test::tmp_path;
using posenc_test::write_bytes;
namespace io = posenc::io;

namespace {

const std::string kUnicodeName =
    "wpe/\"pos\" \xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80";  // wpe/"pos" é中😀

/// A .safetensors file from a header text (not padded) and a data buffer.
std::string st(const std::string& json, const std::string& data) {
  return le_bytes(json.size(), 8) + json + data;
}

std::string st_path(const std::string& json, const std::string& data) {
  return write_bytes("bad.safetensors", st(json, data));
}

}  // namespace

TEST_CASE("safetensors: fixtures written by the Python reference writer", "[io][safetensors]") {
  const std::string mixed = data_path("io/mixed.safetensors");
  const std::vector<std::string> names = io::safetensors_names(mixed);
  CHECK(names == std::vector<std::string>{
                     "ramp_f32", "ramp_f64", "specials_f16", "specials_f16_as_f64", "specials_bf16",
                     "specials_bf16_as_f64", "specials_f32", "iramp_i64", "iramp_i32", "bytes_u8",
                     "mask_bool", "scalar_f64", "empty_f32", "ramp_1x2x2x3_f32", kUnicodeName});
  const io::safetensors_header h = io::read_safetensors_header(mixed);
  CHECK(h.metadata == std::vector<std::pair<std::string, std::string>>{
                          {"format", "pt"}, {"note", "posenc io fixtures"}});
  CHECK(h.data_start % 8 == 0);
  REQUIRE(h.tensors.size() == names.size());
  CHECK(h.tensors[2].type == io::dtype::f16);
  CHECK(h.tensors[4].type == io::dtype::bf16);
  CHECK(h.tensors[1].shape == std::vector<Index>{2, 3, 4});

  SECTION("float tensors of rank 0 to 4") {
    const auto m = io::read_safetensors_matrix<float>(mixed, "ramp_f32", 2, 3);
    for (int i = 0; i < 6; ++i) CHECK(m(i / 3, i % 3) == static_cast<float>(ramp(i)));
    const auto t3 = io::read_safetensors<double>(mixed, "ramp_f64");
    CHECK(t3.shape == std::vector<Index>{2, 3, 4});
    for (int i = 0; i < 24; ++i) CHECK(t3.data[static_cast<std::size_t>(i)] == ramp(i));
    const auto t4 = io::read_safetensors<double>(mixed, "ramp_1x2x2x3_f32");
    CHECK(t4.shape == std::vector<Index>{1, 2, 2, 3});
    for (int i = 0; i < 12; ++i) CHECK(t4.data[static_cast<std::size_t>(i)] == ramp(i));
    const auto s = io::read_safetensors<float>(mixed, "scalar_f64");
    CHECK(s.shape.empty());
    CHECK(s.data == std::vector<float>{0.375f});
    const auto e = io::read_safetensors_matrix<double>(mixed, "empty_f32", 0, 4);
    CHECK(e.size() == 0);
    const auto u = io::read_safetensors_matrix<double>(mixed, kUnicodeName, 2, 2);
    CHECK(u(1, 1) == ramp(3));
  }
  SECTION("f16 and bf16 decode exactly as numpy widens them") {
    for (const auto& pair : {std::make_pair("specials_f16", "specials_f16_as_f64"),
                             std::make_pair("specials_bf16", "specials_bf16_as_f64")}) {
      const auto small = io::read_safetensors<double>(mixed, pair.first);
      const auto wide = io::read_safetensors<double>(mixed, pair.second);
      const auto small_f = io::read_safetensors<float>(mixed, pair.first);
      REQUIRE(small.data.size() == 15);
      REQUIRE(wide.data.size() == 15);
      for (std::size_t i = 0; i < 15; ++i) {
        INFO(pair.first << " element " << i);
        CHECK(same_value(small.data[i], wide.data[i]));
        CHECK(same_value(static_cast<double>(small_f.data[i]), wide.data[i]));
      }
    }
    // Our float -> bf16 rounding agrees with the reference's on the same float32 values.
    const auto f32 = io::read_safetensors<float>(mixed, "specials_f32");
    const auto bf = io::read_safetensors<float>(mixed, "specials_bf16");
    for (std::size_t i = 0; i < 15; ++i) {
      INFO("element " << i);
      CHECK(same_value(io::bf16_to_float(io::float_to_bf16(f32.data[i])), bf.data[i]));
    }
  }
  SECTION("integer and bool tensors") {
    const auto i64 = io::read_safetensors_matrix<std::int64_t>(mixed, "iramp_i64", 2, 4);
    for (int i = 0; i < 8; ++i) CHECK(i64(i / 4, i % 4) == posenc_test::iramp(i));
    const auto i32 = io::read_safetensors<std::int32_t>(mixed, "iramp_i32");
    for (int i = 0; i < 7; ++i)
      CHECK(i32.data[static_cast<std::size_t>(i)] == posenc_test::iramp(i));
    const auto i32d = io::read_safetensors<double>(mixed, "iramp_i32");
    CHECK(i32d.data[6] == 3000009.0);
    CHECK(io::read_safetensors<std::uint8_t>(mixed, "bytes_u8").data ==
          std::vector<std::uint8_t>{0, 1, 127, 128, 255});
    CHECK(io::read_safetensors<float>(mixed, "mask_bool").data == std::vector<float>{1, 0, 0, 1});
    POSENC_REQUIRE_ERROR(io::read_safetensors<std::uint8_t>(mixed, "iramp_i64"),
                         "element 0 (-3000009)");
    POSENC_REQUIRE_ERROR(io::read_safetensors<std::int64_t>(mixed, "ramp_f32"),
                         "F32 (tensor \"ramp_f32\")");
    POSENC_REQUIRE_ERROR(io::read_safetensors<std::int64_t>(mixed, "specials_f16"),
                         "element 5 (6.1035156e-05)");
  }
  SECTION("lookup and shape errors") {
    POSENC_REQUIRE_ERROR(io::read_safetensors<float>(mixed, "nope"), "name = 'nope'");
    POSENC_REQUIRE_ERROR(io::read_safetensors<float>(mixed, "nope"), "mixed.safetensors");
    POSENC_REQUIRE_ERROR(io::read_safetensors<float>(mixed, "__metadata__"),
                         "name = '__metadata__'");
    POSENC_REQUIRE_ERROR(io::read_safetensors_matrix<float>(mixed, "ramp_f64"), "rank = 3");
    POSENC_REQUIRE_ERROR(io::read_safetensors_matrix<float>(mixed, "scalar_f64"), "rank = 0");
    POSENC_REQUIRE_ERROR(io::read_safetensors_matrix<float>(mixed, "ramp_f32", 3, 3), "rows = 2");
    POSENC_REQUIRE_ERROR(io::read_safetensors_matrix<float>(mixed, "ramp_f32", -1, 4), "cols = 3");
  }
  SECTION("a GPT-2 style position table") {
    const std::string wpe = data_path("io/wpe.safetensors");
    CHECK(io::safetensors_names(wpe) == std::vector<std::string>{"wpe.weight"});
    CHECK(io::read_safetensors_header(wpe).metadata.empty());
    const auto w = io::read_safetensors_matrix<double>(wpe, "wpe.weight", 8, 4);
    for (int i = 0; i < 32; ++i) CHECK(w(i / 4, i % 4) == ramp(i));
  }
}

TEST_CASE("safetensors: the writer matches the reference writer byte for byte",
          "[io][safetensors]") {
  const std::string wpe = data_path("io/wpe.safetensors");
  const auto w = io::read_safetensors_matrix<float>(wpe, "wpe.weight");
  io::write_safetensors(tmp_path("wpe.safetensors"), {{"wpe.weight", w}});
  CHECK(posenc_test::read_bytes(tmp_path("wpe.safetensors")) == posenc_test::read_bytes(wpe));
}

namespace {

template <class Scalar>
Scalar random_value(std::mt19937_64& rng) {
  if constexpr (std::is_floating_point_v<Scalar>) {
    return static_cast<Scalar>((static_cast<double>(rng() >> 11) * 0x1p-53 - 0.5) * 1e3);
  } else {
    return static_cast<Scalar>(rng());
  }
}

template <class Scalar>
io::tensor<Scalar> random_tensor(std::mt19937_64& rng, int rank) {
  io::tensor<Scalar> t;
  for (int a = 0; a < rank; ++a) t.shape.push_back(static_cast<Index>(rng() % 5));
  t.data.resize(static_cast<std::size_t>(t.size()));
  for (auto& v : t.data) v = random_value<Scalar>(rng);
  return t;
}

}  // namespace

TEST_CASE("safetensors: random round-trips for every dtype and rank 0..4", "[io][safetensors]") {
  std::mt19937_64 rng(99);
  const std::string path = tmp_path("rt.safetensors");
  for (int trial = 0; trial < 25; ++trial) {
    const int rank = trial % 5;
    const auto f = random_tensor<float>(rng, rank);
    const auto d = random_tensor<double>(rng, rank);
    const auto l = random_tensor<std::int64_t>(rng, rank);
    const auto i = random_tensor<std::int32_t>(rng, rank);
    const auto u = random_tensor<std::uint8_t>(rng, rank);
    io::tensor<std::uint8_t> b = u;
    for (auto& v : b.data) v = v & 1;
    const std::map<std::string, std::string> meta{{"format", "pt"}, {"k\"e\\y\n", "v\xc3\xa9"}};
    io::write_safetensors(path,
                          {{"f32", f},
                           {"f64", d},
                           {"i64", l},
                           {"i32", i},
                           {"u8", u},
                           {"bool", b, io::dtype::boolean},
                           {"f16", f, io::dtype::f16},
                           {"bf16", d, io::dtype::bf16},
                           {"f64_from_f32", f, io::dtype::f64},
                           {"tab\t\"q\"\\", i, io::dtype::i64},
                           {kUnicodeName, d, io::dtype::f32}},
                          meta);
    INFO("rank " << rank);
    const io::safetensors_header h = io::read_safetensors_header(path);
    CHECK(h.data_start % 8 == 0);
    CHECK(h.metadata == std::vector<std::pair<std::string, std::string>>(meta.begin(), meta.end()));
    CHECK(io::safetensors_names(path).size() == 11);
    CHECK(io::read_safetensors<float>(path, "f32").data == f.data);
    CHECK(io::read_safetensors<float>(path, "f32").shape == f.shape);
    CHECK(io::read_safetensors<double>(path, "f64").data == d.data);
    CHECK(io::read_safetensors<std::int64_t>(path, "i64").data == l.data);
    CHECK(io::read_safetensors<std::int32_t>(path, "i32").data == i.data);
    CHECK(io::read_safetensors<std::uint8_t>(path, "u8").data == u.data);
    CHECK(io::read_safetensors<std::uint8_t>(path, "bool").data == b.data);
    CHECK(io::read_safetensors<std::int64_t>(path, "tab\t\"q\"\\").data ==
          std::vector<std::int64_t>(i.data.begin(), i.data.end()));
    const auto h16 = io::read_safetensors<float>(path, "f16");
    const auto b16 = io::read_safetensors<double>(path, "bf16");
    const auto f64 = io::read_safetensors<double>(path, "f64_from_f32");
    const auto uni = io::read_safetensors<float>(path, kUnicodeName);
    REQUIRE(h16.shape == f.shape);
    for (std::size_t k = 0; k < f.data.size(); ++k) {
      CHECK(h16.data[k] == io::half_to_float(io::float_to_half(f.data[k])));
      CHECK(std::fabs(h16.data[k] - f.data[k]) <= std::fabs(f.data[k]) * 0x1p-11 + 0x1p-25);
      CHECK(f64.data[k] == static_cast<double>(f.data[k]));
    }
    for (std::size_t k = 0; k < d.data.size(); ++k) {
      CHECK(b16.data[k] == static_cast<double>(io::bf16_to_float(io::double_to_bf16(d.data[k]))));
      CHECK(std::fabs(b16.data[k] - d.data[k]) <= std::fabs(d.data[k]) * 0x1p-8);
      CHECK(uni.data[k] == static_cast<float>(d.data[k]));
    }
  }
}

TEST_CASE("safetensors: corrupted headers and data are clear errors", "[io][safetensors]") {
  const std::string f32x2 = std::string(8, '\0');
  const auto read = [](const std::string& path) { return io::read_safetensors<float>(path, "a"); };
  const auto entry = [](const std::string& body) { return "{\"a\":" + body + "}"; };
  const std::string ok = entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})");
  CHECK(read(st_path(ok, f32x2)).data == std::vector<float>{0, 0});
  // Header padded with spaces, keys in another order, __metadata__ anywhere: all fine.
  CHECK(
      read(st_path(R"({"a":{"shape":[2],"data_offsets":[0,8],"dtype":"F32"},"__metadata__":{}}   )",
                   f32x2))
          .data.size() == 2);

  POSENC_REQUIRE_ERROR(read(tmp_path("no/such.safetensors")), "cannot open");
  POSENC_REQUIRE_ERROR(read(std::string(POSENC_TEST_TMP_DIR)), "path = ");  // a directory
  POSENC_REQUIRE_ERROR(read(write_bytes("short.safetensors", "abc")),
                       "shorter than the 8-byte header length");
  POSENC_REQUIRE_ERROR(read(write_bytes("hl.safetensors", le_bytes(1000, 8) + ok)),
                       "header length 1000 runs past the end of the file");
  POSENC_REQUIRE_ERROR(read(write_bytes("hl2.safetensors", le_bytes(~0ull, 8) + ok)),
                       "runs past the end");
  POSENC_REQUIRE_ERROR(read(write_bytes("hl3.safetensors", le_bytes(1, 8) + "{")), "too short");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\xff\":1}", "")), "not valid UTF-8");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\xc0\xaf\":1}", "")), "not valid UTF-8");  // overlong '/'
  POSENC_REQUIRE_ERROR(read(st_path("{\"\xed\xa0\x80\":1}", "")), "not valid UTF-8");  // surrogate
  POSENC_REQUIRE_ERROR(read(st_path(" {}", "")), "must start with '{'");
  POSENC_REQUIRE_ERROR(read(st_path("[]", "")), "must start with '{'");
  // JSON syntax.
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":1,}", "")), "expected a string key");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\" 1}", "")), "expected ':'");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":[1 2]}", "")), "expected ',' or ']'");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":1 \"b\":2}", "")), "expected ',' or '}'");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":1", "")), "expected ',' or '}'");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":", "")), "unexpected end of the header");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a", "")), "unterminated string");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\\", "")), "unterminated escape");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\\x\":1}", "")), "unknown escape \\x");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\\u12\":1}", "")), "bad hex digit");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\\u12", "")), "truncated \\u escape");
  POSENC_REQUIRE_ERROR(read(st_path("{\"\\udc00\":1}", "")), "lone low surrogate");
  POSENC_REQUIRE_ERROR(read(st_path("{\"\\ud800x\":1}", "")),
                       "high surrogate without its low half");
  POSENC_REQUIRE_ERROR(read(st_path("{\"\\ud800\\u0041\":1}", "")),
                       "high surrogate without its low half");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\nb\":1}", "")), "raw control character");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":tru}", "")), "unexpected character");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":-}", "")), "malformed number");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":1.}", "")), "malformed number");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":1e}", "")), "malformed number");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":01}", "")), "expected ',' or '}'");
  POSENC_REQUIRE_ERROR(read(st_path("{} x", "")), "unexpected characters after the JSON header");
  POSENC_REQUIRE_ERROR(
      read(st_path("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", "")),
      "nesting deeper than 64");
  POSENC_REQUIRE_ERROR(read(st_path("{\"a\":1,\"a\":2}", "")), "duplicate key \"a\"");
  // Entries.
  POSENC_REQUIRE_ERROR(read(st_path(entry("[1]"), "")), "tensor \"a\": entry must be an object");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":true})"), f32x2)),
      "unexpected key \"x\"");
  POSENC_REQUIRE_ERROR(read(st_path(entry(R"({"shape":[2],"data_offsets":[0,8]})"), f32x2)),
                       "missing \"dtype\"");
  POSENC_REQUIRE_ERROR(read(st_path(entry(R"({"dtype":"F32","data_offsets":[0,8]})"), f32x2)),
                       "missing \"shape\"");
  POSENC_REQUIRE_ERROR(read(st_path(entry(R"({"dtype":"F32","shape":[2]})"), f32x2)),
                       "missing \"data_offsets\"");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":32,"shape":[2],"data_offsets":[0,8]})"), f32x2)),
      "dtype must be a string");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})"), f32x2)),
      "unsupported dtype \"F8_E4M3\"");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), f32x2)),
      "unsupported dtype \"f32\"");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), f32x2)),
      "shape must be an array");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), f32x2)),
      "shape[0] must be a non-negative integer below 2^63 (got -2)");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), f32x2)),
      "(got 2.0)");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"), f32x2)),
      "shape[0] must be a non-negative integer");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[1,9223372036854775808],"data_offsets":[0,8]})"),
                   f32x2)),
      "shape[1] must be a non-negative integer below 2^63");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                   f32x2)),
      "shape product overflows at axis 1");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F64","shape":[1152921504606846976],"data_offsets":[0,8]})"),
                   f32x2)),
      "shape product overflows at axis 0");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), f32x2)),
      "data_offsets must be an array of two integers");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":{"b":0}})"), f32x2)),
      "data_offsets must be an array of two integers");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), f32x2)),
      "data_offsets [8, 0] are reversed");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-1,8]})"), f32x2)),
      "data_offsets[0] must be a non-negative integer");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,16]})"), f32x2)),
      "data_offsets end 16 is past the end of the data (8 bytes)");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]})"),
                   f32x2)),
      "data_offsets[1] must be a non-negative integer below 2^63");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), f32x2)),
      "data_offsets span 8 bytes but shape and dtype F32 need 12");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F64","shape":[2],"data_offsets":[0,8]})"), f32x2)),
      "need 16");
  // Tiling of the byte buffer.
  const std::string two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  POSENC_REQUIRE_ERROR(read(st_path(two, std::string(12, '\0'))),
                       "tensor \"b\" data_offsets [4, 12] overlap tensor \"a\"");
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  POSENC_REQUIRE_ERROR(read(st_path(same, f32x2)), "overlap");
  const std::string gap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  POSENC_REQUIRE_ERROR(read(st_path(gap, std::string(20, '\0'))),
                       "gap in the data before tensor \"b\"");
  POSENC_REQUIRE_ERROR(read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})"),
                                    std::string(12, '\0'))),
                       "gap in the data before tensor \"a\"");
  POSENC_REQUIRE_ERROR(read(st_path(ok, f32x2 + "xyz")),
                       "3 trailing bytes after the last tensor's data");
  // Every JSON escape decodes (the name is looked up by its decoded UTF-8 text).
  const std::string esc =
      R"({"a\n\t\/\b\f\r\"\\\u00e9\u4E2D\ud83d\ude00":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string esc_name = "a\n\t/\b\f\r\"\\\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80";
  CHECK(io::safetensors_names(st_path(esc, f32x2)) == std::vector<std::string>{esc_name});
  CHECK(io::read_safetensors<float>(st_path(esc, f32x2), esc_name).data.size() == 2);
  // JSON values of every kind are parsed (and ignored) inside __metadata__'s neighbours only
  // where allowed: here true/false/null/numbers in an entry are rejected as the wrong type.
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":null,"shape":[2],"data_offsets":[0,8]})"), f32x2)),
      "dtype must be a string");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[true],"data_offsets":[0,8]})"), f32x2)),
      "shape[0] must be a non-negative integer");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,-8e1]})"), f32x2)),
      "(got -8e1)");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.5E+0]})"), f32x2)),
      "(got 8.5E+0)");
  POSENC_REQUIRE_ERROR(
      read(st_path(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[false,8]})"), f32x2)),
      "data_offsets[0] must be");
  // Reversed order in the header is fine as long as the offsets tile the buffer.
  const std::string rev = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(read(st_path(rev, std::string(12, '\0'))).data.size() == 2);
  // Metadata.
  POSENC_REQUIRE_ERROR(read(st_path(R"({"__metadata__":[1]})", "")),
                       "__metadata__ must be an object of strings");
  POSENC_REQUIRE_ERROR(read(st_path(R"({"__metadata__":{"k":1}})", "")),
                       "__metadata__ value of \"k\" must be a string");
  // Truncations of a real file: every cut is an error, never a short read.
  const std::string full = posenc_test::read_bytes(data_path("io/mixed.safetensors"));
  for (std::size_t cut : {std::size_t{0}, std::size_t{4}, std::size_t{8}, std::size_t{100},
                          full.size() - 200, full.size() - 1}) {
    INFO("cut to " << cut);
    const std::string p = write_bytes("cut.safetensors", full.substr(0, cut));
    POSENC_REQUIRE_ERROR(io::read_safetensors<double>(p, "ramp_f64"), "path = ");
    POSENC_REQUIRE_ERROR(io::safetensors_names(p), "io::safetensors");
  }
  // The path is named in header errors.
  POSENC_REQUIRE_ERROR(read(st_path("[]", "")), "bad.safetensors");
}

TEST_CASE("safetensors: writer errors", "[io][safetensors]") {
  io::tensor<double> t;
  t.shape = {2};
  t.data = {1.5, 2.0};
  const std::string p = tmp_path("w.safetensors");
  POSENC_REQUIRE_ERROR(io::write_safetensors(p, {{"a", t}, {"a", t}}), "name = 'a': appears twice");
  POSENC_REQUIRE_ERROR(io::write_safetensors(p, {{"", t}}),
                       "name = '': tensor names must not be empty");
  POSENC_REQUIRE_ERROR(io::write_safetensors(p, {{"__metadata__", t}}), "is reserved");
  POSENC_REQUIRE_ERROR(io::write_safetensors(p, {{"a\xff", t}}), "must be valid UTF-8");
  POSENC_REQUIRE_ERROR(io::write_safetensors(p, {{"a", t}}, {{"k", "\xc3"}}), "metadata key = 'k'");
  POSENC_REQUIRE_ERROR(io::write_safetensors(tmp_path("no/dir/w.safetensors"), {{"a", t}}),
                       "cannot open the file for writing");
  POSENC_REQUIRE_ERROR(io::safetensors_entry("ints", t, io::dtype::i64),
                       "name = 'ints': element 0 (1.5) does not convert to dtype i64");
  POSENC_REQUIRE_ERROR(io::safetensors_entry("b", t, io::dtype::boolean), "element 0 (1.5)");
  t.data = {70000.0, 1.0};
  POSENC_REQUIRE_ERROR(io::safetensors_entry("h", t, io::dtype::f16),
                       "element 0 (70000) does not convert to dtype f16");
  t.data = {1e300, 1.0};
  POSENC_REQUIRE_ERROR(io::safetensors_entry("f", t, io::dtype::f32),
                       "does not convert to dtype f32");
  POSENC_REQUIRE_ERROR(io::safetensors_entry("bf", t, io::dtype::bf16),
                       "does not convert to dtype bf16");
  io::tensor<std::int64_t> big;
  big.shape = {1};
  big.data = {int64_t{1} << 40};
  POSENC_REQUIRE_ERROR(io::safetensors_entry("i", big, io::dtype::i32),
                       "does not convert to dtype i32");
  POSENC_REQUIRE_ERROR(io::safetensors_entry("u", big, io::dtype::u8),
                       "does not convert to dtype u8");
  t.shape = {3};
  POSENC_REQUIRE_ERROR(io::safetensors_entry("n", t), "data.size() = 2");
  t.shape = {-1};
  POSENC_REQUIRE_ERROR(io::safetensors_entry("n", t), "name = 'n': shape[0] = -1 is negative");
  // Inf and NaN are values, not errors, in every float dtype.
  t.shape = {2};
  t.data = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
  io::write_safetensors(
      p, {{"h", t, io::dtype::f16}, {"b", t, io::dtype::bf16}, {"f", t, io::dtype::f32}});
  for (const char* n : {"h", "b", "f"}) {
    const auto back = io::read_safetensors<double>(p, n);
    CHECK(std::isinf(back.data[0]));
    CHECK(std::isnan(back.data[1]));
  }
  // An empty file (no tensors) is valid.
  io::write_safetensors(p, {});
  CHECK(io::safetensors_names(p).empty());
  POSENC_REQUIRE_ERROR(io::read_safetensors<float>(p, "x"), "it has 0");
}

TEST_CASE("io: randomly damaged files are read or rejected, never read out of bounds",
          "[io][fuzz]") {
  // Each damaged file must either read (the damage hit only values or padding) or throw
  // posenc::error; anything else (a crash, a sanitizer report, another exception) fails.
  std::mt19937_64 rng(4242);
  const std::vector<std::string> sources = {
      posenc_test::read_bytes(data_path("io/mixed.safetensors")),
      posenc_test::read_bytes(data_path("io/wpe.safetensors")),
      posenc_test::read_bytes(data_path("io/f8_2x3x4.npy")),
      posenc_test::read_bytes(data_path("io/f2_specials.npy")),
      posenc_test::read_bytes(data_path("io/f8_v2_2x3.npy")),
  };
  int read_ok = 0, rejected = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const std::size_t which = static_cast<std::size_t>(trial) % sources.size();
    std::string s = sources[which];
    switch (rng() % 4) {
      case 0:  // flip a few bytes, biased towards the header
        for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
          const std::size_t at =
              static_cast<std::size_t>(rng() % std::min<std::size_t>(s.size(), 160));
          s[at] = static_cast<char>(s[at] ^ static_cast<char>(1 + rng() % 255));
        }
        break;
      case 1:  // truncate
        s.resize(static_cast<std::size_t>(rng() % s.size()));
        break;
      case 2: {  // insert a byte
        const std::size_t at = static_cast<std::size_t>(rng() % s.size());
        s.insert(at, 1, static_cast<char>(rng() & 0xFF));
        break;
      }
      default:  // overwrite a digit in the header with another digit
        for (std::size_t k = 0, n = 0; k < std::min<std::size_t>(s.size(), 400); ++k)
          if (s[k] >= '0' && s[k] <= '9' && rng() % 8 == 0 && n++ < 2)
            s[k] = static_cast<char>('0' + rng() % 10);
        break;
    }
    const bool st_file = which < 2;
    const std::string path = write_bytes(st_file ? "fuzz.safetensors" : "fuzz.npy", s);
    try {
      if (st_file) {
        for (const auto& name : io::safetensors_names(path))
          (void)io::read_safetensors<double>(path, name);
      } else {
        (void)io::read_npy<double>(path);
      }
      ++read_ok;
    } catch (const posenc::error&) {
      ++rejected;
    }
  }
  INFO("read " << read_ok << ", rejected " << rejected);
  CHECK(rejected > 300);
  CHECK(read_ok > 10);
}
