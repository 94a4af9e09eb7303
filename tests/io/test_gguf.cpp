// io::gguf_file on GGUF files this test writes byte by byte from the published format
// description (ggml docs/gguf.md): every metadata value type round-trips, tensors are listed
// with their type, shape, offset and size, every truncation and many corruptions are a
// posenc::error, and posenc::model_config_from_gguf maps llama.cpp's keys as the HF reader does.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <posenc/encoding/rotary/model_config.hpp>
#include <posenc/io/gguf.hpp>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"
#include "support/rope_models.hpp"

using posenc::Index;
using posenc_test::data_path;
using posenc_test::le_bytes;
using posenc_test::write_bytes;
namespace io = posenc::io;

namespace {

// ---- a GGUF writer, from the format description -----------------------------------------

// value type numbers of the format
enum : std::uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STR = 8,
  ARR = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12
};

std::string gstr(const std::string& s) { return le_bytes(s.size(), 8) + s; }
std::string f32_bytes(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return le_bytes(b, 4);
}
std::string f64_bytes(double d) {
  std::uint64_t b;
  std::memcpy(&b, &d, 8);
  return le_bytes(b, 8);
}
/// The payload of an array: element type, count, then the elements' bytes.
std::string arr(std::uint32_t type, std::uint64_t count, const std::string& elements) {
  return le_bytes(type, 4) + le_bytes(count, 8) + elements;
}

struct tensor_spec {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type;
  std::string data;  // its bytes (padded to the alignment by the writer)
};

/// A GGUF file: header, key/values (type + payload), tensor infos with offsets laid out in
/// order at the alignment, padding, data. `align` is what the layout uses (it writes no
/// general.alignment itself).
struct gguf_builder {
  std::uint32_t version = 3;
  std::vector<std::string> kvs;
  std::vector<tensor_spec> tensors;
  std::uint64_t align = 32;

  gguf_builder& kv(const std::string& key, std::uint32_t type, const std::string& payload) {
    kvs.push_back(gstr(key) + le_bytes(type, 4) + payload);
    return *this;
  }
  gguf_builder& tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type,
                       const std::string& data) {
    tensors.push_back({name, std::move(dims), type, data});
    return *this;
  }
  std::string bytes() const {
    std::string s =
        "GGUF" + le_bytes(version, 4) + le_bytes(tensors.size(), 8) + le_bytes(kvs.size(), 8);
    for (const std::string& k : kvs) s += k;
    std::uint64_t offset = 0;
    std::string data;
    for (const tensor_spec& t : tensors) {
      s += gstr(t.name) + le_bytes(t.dims.size(), 4);
      for (std::uint64_t d : t.dims) s += le_bytes(d, 8);
      s += le_bytes(t.type, 4) + le_bytes(offset, 8);
      data += t.data;
      const std::uint64_t padded = (t.data.size() + align - 1) / align * align;
      if (&t != &tensors.back()) data.append(padded - t.data.size(), '\0');
      offset += padded;
    }
    s.append((align - s.size() % align) % align, '\0');
    return s + data;
  }
};

std::string f32s(const std::vector<float>& v) {
  std::string s;
  for (float f : v) s += f32_bytes(f);
  return s;
}

/// The file of the round-trip test: every value type, and tensors of several ggml types.
gguf_builder sample() {
  gguf_builder b;
  b.kv("general.architecture", STR, gstr("llama"))
      .kv("u8", U8, le_bytes(200, 1))
      .kv("i8", I8, le_bytes(static_cast<std::uint8_t>(-5), 1))
      .kv("u16", U16, le_bytes(65000, 2))
      .kv("i16", I16, le_bytes(static_cast<std::uint16_t>(-30000), 2))
      .kv("u32", U32, le_bytes(4000000000u, 4))
      .kv("i32", I32, le_bytes(static_cast<std::uint32_t>(-2000000000), 4))
      .kv("f32", F32, f32_bytes(0.1f))
      .kv("bool", BOOL, le_bytes(1, 1))
      .kv("str", STR, gstr("h\xc3\xa9llo"))
      .kv("u64", U64, le_bytes((std::uint64_t{1} << 63) + 5, 8))
      .kv("i64", I64, le_bytes(static_cast<std::uint64_t>(-(std::int64_t{1} << 62)), 8))
      .kv("f64", F64, f64_bytes(3.141592653589793))
      .kv("arr.u32", ARR, arr(U32, 3, le_bytes(1, 4) + le_bytes(2, 4) + le_bytes(3, 4)))
      .kv("arr.f32", ARR, arr(F32, 2, f32_bytes(0.5f) + f32_bytes(-2.0f)))
      .kv("arr.str", ARR, arr(STR, 2, gstr("a") + gstr("bc")))
      .kv("arr.nested", ARR,
          arr(ARR, 2, arr(I8, 2, le_bytes(1, 1) + le_bytes(0xFE, 1)) + arr(STR, 0, "")))
      .kv("arr.empty", ARR, arr(U8, 0, ""));
  b.tensor("token_embd.weight", {4, 3}, 0,
           f32s({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}))  // ne0 = 4 (a row), 3 rows
      .tensor("blk.0.attn_q.weight", {64, 2}, 2, std::string(4 * 18, '\x11'))  // Q4_0
      .tensor("half", {3}, 1, le_bytes(0x3C00, 2) + le_bytes(0xC000, 2) + le_bytes(0x3800, 2))
      .tensor("future", {5}, 99, std::string(7, '\x22'))  // a type this reader does not know
      .tensor("scalar", {}, 0, f32s({42.0f}));
  return b;
}

/// Writes `bytes` to a new file (rewriting one in place makes ext4 flush it at close, ms
/// per file) and removes it when done.
struct scratch_file {
  explicit scratch_file(const std::string& bytes) {
    static int n = 0;
    path = write_bytes("scratch" + std::to_string(n++) + ".gguf", bytes);
  }
  ~scratch_file() { std::remove(path.c_str()); }
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;
  std::string path;
};

/// The message of the posenc::error `f` throws; FAIL when it throws nothing, and rethrows
/// any other exception (which fails the test).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const posenc::error& e) {
    return e.what();
  }
  FAIL("no posenc::error");
  return {};
}

}  // namespace

TEST_CASE("gguf: every metadata value type round-trips", "[io][gguf]") {
  const std::string path = write_bytes("sample.gguf", sample().bytes());
  const io::gguf_file g(path);
  CHECK(g.path() == path);
  CHECK(g.version() == 3);
  CHECK(g.alignment() == 32);
  REQUIRE(g.metadata().size() == 18);
  CHECK(g.metadata()[0].key == "general.architecture");
  CHECK(g.metadata()[17].key == "arr.empty");

  CHECK(*g.get_string("general.architecture") == "llama");
  CHECK(g.find("u8")->type == io::gguf_type::uint8);
  CHECK(*g.get_integer("u8") == 200);
  CHECK(*g.get_integer("i8") == -5);
  CHECK(*g.get_integer("u16") == 65000);
  CHECK(*g.get_integer("i16") == -30000);
  CHECK(*g.get_integer("u32") == 4000000000);
  CHECK(*g.get_integer("i32") == -2000000000);
  CHECK(g.find("f32")->type == io::gguf_type::float32);
  CHECK(*g.get_number("f32") == static_cast<double>(0.1f));  // widened exactly
  CHECK(*g.get_bool("bool") == true);
  CHECK(*g.get_string("str") == "h\xc3\xa9llo");
  CHECK(g.find("u64")->u == (std::uint64_t{1} << 63) + 5);
  CHECK(*g.get_integer("i64") == -(std::int64_t{1} << 62));
  CHECK(*g.get_number("f64") == 3.141592653589793);
  CHECK(*g.get_number("i16") == -30000.0);
  CHECK(*g.get_numbers("arr.u32") == std::vector<double>{1, 2, 3});
  CHECK(*g.get_numbers("arr.f32") == std::vector<double>{0.5, -2.0});
  CHECK(*g.get_strings("arr.str") == std::vector<std::string>{"a", "bc"});
  CHECK(g.get_numbers("arr.empty")->empty());

  const io::gguf_value& nested = *g.find("arr.nested");
  CHECK(nested.type == io::gguf_type::array);
  CHECK(nested.element_type == io::gguf_type::array);
  REQUIRE(nested.count == 2);
  const io::gguf_value first = nested.element(0);
  CHECK(first.element_type == io::gguf_type::int8);
  CHECK(first.element(0).i == 1);
  CHECK(first.element(1).i == -2);
  CHECK(nested.element(1).element_type == io::gguf_type::string);
  CHECK(nested.element(1).count == 0);
  CHECK(g.find("arr.str")->element(1).s == "bc");
  POSENC_REQUIRE_ERROR(nested.element(2), "k = 2");

  // absent keys are none; wrong types name the key and the value
  CHECK_FALSE(g.contains("nope"));
  CHECK_FALSE(g.get_integer("nope").has_value());
  CHECK_FALSE(g.get_string("nope").has_value());
  POSENC_REQUIRE_ERROR(g.get_integer("str"), "str = \"h\xc3\xa9llo\": must be an integer");
  POSENC_REQUIRE_ERROR(g.get_integer("f32"), "f32 = 0.10000000149011612: must be an integer");
  POSENC_REQUIRE_ERROR(g.get_integer("u64"), "u64 = 9223372036854775813: does not fit int64");
  POSENC_REQUIRE_ERROR(g.get_string("u8"), "u8 = 200: must be a string");
  POSENC_REQUIRE_ERROR(g.get_bool("i8"), "i8 = -5: must be a bool");
  POSENC_REQUIRE_ERROR(g.get_number("bool"), "bool = true: must be a number");
  POSENC_REQUIRE_ERROR(g.get_numbers("arr.str"),
                       "arr.str = <array of string, 2 elements>: must be an array of numbers");
  POSENC_REQUIRE_ERROR(g.get_strings("arr.u32"), "must be an array of strings");
  POSENC_REQUIRE_ERROR(g.get_numbers("u8"), "u8 = 200: must be an array of numbers");
}

TEST_CASE("gguf: tensors listed with type, shape, offset and size", "[io][gguf]") {
  const gguf_builder b = sample();
  const std::string path = write_bytes("tensors.gguf", b.bytes());
  io::gguf_file g(path);
  REQUIRE(g.tensors().size() == 5);
  CHECK(g.data_start() % 32 == 0);

  const io::gguf_tensor_info& emb = g.tensor_info("token_embd.weight");
  CHECK(emb.type == 0);
  CHECK(emb.type_name == "F32");
  CHECK(emb.dims == std::vector<std::uint64_t>{4, 3});
  CHECK(emb.shape() == std::vector<Index>{3, 4});
  CHECK(emb.offset == 0);
  CHECK(emb.bytes == std::optional<std::uint64_t>(48));
  CHECK(emb.numel() == 12);

  const io::gguf_tensor_info& q = g.tensors()[1];
  CHECK(q.name == "blk.0.attn_q.weight");
  CHECK(q.type_name == "Q4_0");
  CHECK(q.offset == 64);                               // 48 bytes padded to 32
  CHECK(q.bytes == std::optional<std::uint64_t>(72));  // 4 blocks of 32 values, 18 bytes each
  CHECK(q.shape() == std::vector<Index>{2, 64});

  const io::gguf_tensor_info& h = g.tensors()[2];
  CHECK(h.type_name == "F16");
  CHECK(h.offset == 160);
  CHECK(h.bytes == std::optional<std::uint64_t>(6));

  const io::gguf_tensor_info& future = g.tensors()[3];
  CHECK(future.type == 99);
  CHECK(future.type_name == "type 99");
  CHECK_FALSE(future.bytes.has_value());
  CHECK(future.offset == 192);

  const io::gguf_tensor_info& scalar = g.tensors()[4];
  CHECK(scalar.dims.empty());
  CHECK(scalar.shape().empty());
  CHECK(scalar.numel() == 1);
  CHECK(g.data_start() + scalar.offset + 4 == posenc_test::read_bytes(path).size());

  // data of the unquantised types, in row-major order
  const io::tensor<float> e = g.read<float>("token_embd.weight");
  CHECK(e.shape == std::vector<Index>{3, 4});
  CHECK(e.data == std::vector<float>{0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
  CHECK(g.read<double>("half").data == std::vector<double>{1.0, -2.0, 0.5});
  CHECK(g.read<float>("scalar").data == std::vector<float>{42.0f});
  POSENC_REQUIRE_ERROR(g.read<float>("blk.0.attn_q.weight"),
                       "its type (Q4_0) is not one read() decodes");
  POSENC_REQUIRE_ERROR(g.read<float>("future"), "its type (type 99) is not one read() decodes");
  POSENC_REQUIRE_ERROR(g.tensor_info("nope"), "name = 'nope': no such tensor");
  CHECK(g.find_tensor("nope") == nullptr);

  // ggml's type table
  CHECK(std::string(io::gguf_ggml_type(12).name) == "Q4_K");
  CHECK(io::gguf_ggml_type(12).block_bytes == 144);
  CHECK(io::gguf_ggml_type(30).block_bytes == 2);  // BF16
  CHECK(io::gguf_ggml_type(4).block_bytes == 0);   // removed Q4_2
  CHECK(io::gguf_ggml_type(1000).block_bytes == 0);
}

TEST_CASE("gguf: alignment, versions, magic", "[io][gguf]") {
  SECTION("general.alignment 64 moves the data start and the offsets") {
    gguf_builder b;
    b.align = 64;
    b.kv("general.alignment", U32, le_bytes(64, 4))
        .tensor("a", {3}, 0, f32s({1, 2, 3}))
        .tensor("b", {2}, 0, f32s({4, 5}));
    io::gguf_file g(write_bytes("align64.gguf", b.bytes()));
    CHECK(g.alignment() == 64);
    CHECK(g.data_start() % 64 == 0);
    CHECK(g.tensors()[1].offset == 64);
    CHECK(g.read<float>("b").data == std::vector<float>{4, 5});
  }
  SECTION("a bad general.alignment names its value") {
    gguf_builder b;
    b.kv("general.alignment", U32, le_bytes(48, 4));
    POSENC_REQUIRE_ERROR(io::gguf_file(write_bytes("align48.gguf", b.bytes())),
                         "general.alignment = 48: must be an unsigned integer power of two");
    gguf_builder s;
    s.kv("general.alignment", STR, gstr("32"));
    POSENC_REQUIRE_ERROR(io::gguf_file(write_bytes("align_str.gguf", s.bytes())),
                         "general.alignment = \"32\"");
    gguf_builder z;
    z.kv("general.alignment", U64, le_bytes(0, 8));
    POSENC_REQUIRE_ERROR(io::gguf_file(write_bytes("align0.gguf", z.bytes())),
                         "general.alignment = 0");
  }
  SECTION("an offset off the alignment") {
    std::string bytes = sample().bytes();
    // the Q4_0 tensor's offset (64) is the 8 bytes after its type: move it to 65
    const std::string name = gstr("blk.0.attn_q.weight");
    const std::size_t at = bytes.find(name) + name.size() + 4 + 16 + 4;
    REQUIRE(posenc::io::detail::load_le(reinterpret_cast<const unsigned char*>(&bytes[at]), 8) ==
            64);
    bytes[at] = 65;
    POSENC_REQUIRE_ERROR(io::gguf_file(write_bytes("unaligned.gguf", bytes)),
                         "offset 65 is not a multiple of the alignment 32");
  }
  SECTION("version 2 reads like 3; 1, 4 and big-endian files do not") {
    gguf_builder b = sample();
    b.version = 2;
    const io::gguf_file g(write_bytes("v2.gguf", b.bytes()));
    CHECK(g.version() == 2);
    CHECK(g.tensors().size() == 5);
    for (std::uint32_t v : {1u, 4u}) {
      b.version = v;
      POSENC_REQUIRE_ERROR(io::gguf_file(write_bytes("vbad.gguf", b.bytes())),
                           std::to_string(v) + " is not supported (2 or 3)");
    }
    b.version = 0x03000000;
    POSENC_REQUIRE_ERROR(io::gguf_file(write_bytes("vbe.gguf", b.bytes())), "big-endian");
  }
  SECTION("not a GGUF file") {
    POSENC_REQUIRE_ERROR(
        io::gguf_file(write_bytes("magic.gguf", "GGML" + sample().bytes().substr(4))),
        "magic at offset 4: not a GGUF file");
    POSENC_REQUIRE_ERROR(io::gguf_file(write_bytes("empty.gguf", "")), "magic");
    POSENC_REQUIRE_ERROR(io::gguf_file(posenc_test::tmp_path("absent.gguf")), "cannot open");
  }
}

TEST_CASE("gguf: every truncation is a posenc::error", "[io][gguf]") {
  const std::string full = sample().bytes();
  const io::gguf_file whole(write_bytes("whole.gguf", full));
  // the last tensor ends at the end of the file: every shorter prefix is refused
  for (std::size_t n = 0; n < full.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    const scratch_file cut(full.substr(0, n));
    const std::string what = error_of([&] { io::gguf_file g(cut.path); });
    CHECK(what.find("posenc::io::gguf: path = ") == 0);
  }
}

TEST_CASE("gguf: corrupted headers are a posenc::error naming the field", "[io][gguf]") {
  const auto open = [](const gguf_builder& b) {
    return error_of([&] { io::gguf_file g(write_bytes("bad.gguf", b.bytes())); });
  };
  gguf_builder b;
  SECTION("a string longer than the file") {
    b.kvs.push_back(le_bytes(1000, 8) + "abc");
    CHECK(open(b).find("metadata key/value 0 key at offset 32: length 1000 (at offset 24) runs "
                       "past the end of the file") != std::string::npos);
  }
  SECTION("counts that cannot fit the file") {
    std::string bytes = "GGUF" + le_bytes(3, 4) + le_bytes(0, 8) + le_bytes(~0ull, 8);
    CHECK(error_of([&] { io::gguf_file g(write_bytes("n_kv.gguf", bytes)); })
              .find("metadata_kv_count at offset 24: 18446744073709551615 key/values cannot "
                    "fit") != std::string::npos);
    bytes = "GGUF" + le_bytes(3, 4) + le_bytes(1ull << 60, 8) + le_bytes(0, 8);
    CHECK(error_of([&] { io::gguf_file g(write_bytes("n_t.gguf", bytes)); }).find("tensor_count") !=
          std::string::npos);
    b.kv("big", ARR, arr(U64, 1ull << 61, ""));
    CHECK(open(b).find("metadata \"big\"") != std::string::npos);
    CHECK(open(b).find("array of 2305843009213693952 uint64") != std::string::npos);
  }
  SECTION("unknown value types") {
    b.kv("t13", 13, le_bytes(0, 4));
    CHECK(open(b).find("metadata \"t13\" at offset") != std::string::npos);
    CHECK(open(b).find("unknown value type 13") != std::string::npos);
    gguf_builder c;
    c.kv("a", ARR, arr(77, 0, ""));
    CHECK(open(c).find("unknown array element type 77") != std::string::npos);
  }
  SECTION("arrays nested deeper than 64") {
    std::string v = arr(U8, 0, "");
    for (int d = 0; d < 64; ++d) v = arr(ARR, 1, v);
    b.kv("deep", ARR, v);
    CHECK(open(b).find("arrays nested deeper than 64") != std::string::npos);
    std::string ok = arr(U8, 0, "");
    for (int d = 0; d < 63; ++d) ok = arr(ARR, 1, ok);
    gguf_builder c;
    c.kv("deep", ARR, ok);
    CHECK(io::gguf_file(write_bytes("deep_ok.gguf", c.bytes())).find("deep")->count == 1);
  }
  SECTION("duplicate keys and tensor names") {
    b.kv("k", U8, "x").kv("k", U8, "y");
    CHECK(open(b).find("metadata \"k\" at offset") != std::string::npos);
    CHECK(open(b).find("duplicate key") != std::string::npos);
    gguf_builder c;
    c.tensor("t", {1}, 0, f32s({1})).tensor("t", {1}, 0, f32s({2}));
    CHECK(open(c).find("tensor \"t\" at offset") != std::string::npos);
    CHECK(open(c).find("duplicate tensor name") != std::string::npos);
  }
  SECTION("tensor dims") {
    b.tensor("t", {1, 1, 1, 1, 1}, 0, f32s({1}));
    CHECK(open(b).find("n_dims = 5 (ggml allows 4)") != std::string::npos);
    gguf_builder c;
    c.tensor("t", {1ull << 62, 4}, 0, "");
    CHECK(open(c).find("tensor \"t\": shape product overflows") != std::string::npos);
    gguf_builder d;
    d.tensor("t", {1ull << 63}, 0, "");
    CHECK(open(d).find("dims[0] = 9223372036854775808 does not fit Index") != std::string::npos);
    gguf_builder e;
    e.tensor("q", {48}, 2, std::string(36, '\0'));  // Q4_0 needs multiples of 32
    CHECK(open(e).find("dims[0] = 48 is not a multiple of the Q4_0 block size 32") !=
          std::string::npos);
  }
  SECTION("tensor data past the end of the file") {
    b.tensor("t", {4}, 0, f32s({1, 2, 3}));  // 12 bytes where 16 are due
    CHECK(open(b).find("tensor \"t\": data [0, 16) past the data start") != std::string::npos);
    gguf_builder c;
    c.tensor("u", {1}, 99, "");  // an unknown type: only where it starts is checked
    c.tensor("v", {1}, 0, f32s({1}));
    const std::string bytes = c.bytes();
    CHECK(error_of([&] {
            io::gguf_file g(write_bytes("past.gguf", bytes.substr(0, bytes.size() - 4)));
          }).find("tensor \"v\"") != std::string::npos);
    // an empty tensor in a file cut inside the padding before the data (the fuzzer's find):
    // its data [0, 0) would start past the end
    gguf_builder e;
    e.tensor("empty", {0}, 0, "");
    const std::string header = e.bytes();
    // header 24 bytes, then name (8 + 5), n_dims 4, dims[0] 8, type 4, offset 8: 61, padded to 64
    const std::size_t infos_end = 24 + 8 + 5 + 4 + 8 + 4 + 8;
    REQUIRE(header.size() == 64);
    for (std::size_t cut = infos_end; cut < header.size(); ++cut) {
      INFO("cut at " << cut);
      CHECK(error_of([&] {
              io::gguf_file g(write_bytes("cut.gguf", header.substr(0, cut)));
            }).find("tensor \"empty\": data [0, 0) past the data start") != std::string::npos);
    }
    CHECK(io::gguf_file(write_bytes("whole.gguf", header)).tensors().size() == 1);
  }
  SECTION("metadata over gguf_max_metadata_bytes") {
    b.kv("huge", STR, gstr(std::string(io::gguf_max_metadata_bytes, 'x')));
    CHECK(open(b).find("run past the 67108864 bytes the reader accepts") != std::string::npos);
  }
}

TEST_CASE("gguf: single-byte corruptions of the header never escape as another exception",
          "[io][gguf]") {
  const std::string full = sample().bytes();
  const std::uint64_t header_end = io::gguf_file(write_bytes("full.gguf", full)).data_start();
  std::size_t refused = 0, accepted = 0;
  for (std::size_t at = 0; at < header_end; ++at)
    for (unsigned char v : {0x00, 0x01, 0x7F, 0x80, 0xFF}) {
      std::string bytes = full;
      if (static_cast<unsigned char>(bytes[at]) == v) continue;
      bytes[at] = static_cast<char>(v);
      const scratch_file flipped(bytes);
      try {
        io::gguf_file g(flipped.path);
        for (const io::gguf_tensor_info& t : g.tensors())
          if (t.type == 0) (void)g.read<double>(t.name);
        ++accepted;
      } catch (const posenc::error&) {
        ++refused;
      }
    }
  INFO("accepted " << accepted << ", refused " << refused);
  CHECK(refused > 0);
  CHECK(accepted > 0);  // e.g. a changed value byte
}

// ---- the model config of a GGUF ----------------------------------------------------------

namespace {

/// The metadata llama.cpp's converter writes for Llama 3.1 8B, with its rope_freqs tensor:
/// the per-pair divisors that carry the llama3 scaling (convert_hf_to_gguf.py's formula).
gguf_builder llama31() {
  std::vector<float> factors;
  const double pi = 3.141592653589793;
  const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
  for (int i = 0; i < 64; ++i) {
    const double freq = 1.0 / std::pow(500000.0, 2.0 * i / 128.0);
    const double wavelen = 2 * pi / freq;
    double f = 1.0;
    if (wavelen > low_wavelen) {
      f = 8.0;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      f = 1.0 / ((1 - smooth) / 8.0 + smooth);
    }
    factors.push_back(static_cast<float>(f));
  }
  gguf_builder b;
  b.kv("general.architecture", STR, gstr("llama"))
      .kv("general.name", STR, gstr("Meta Llama 3.1 8B"))
      .kv("llama.block_count", U32, le_bytes(32, 4))
      .kv("llama.context_length", U32, le_bytes(131072, 4))
      .kv("llama.embedding_length", U32, le_bytes(4096, 4))
      .kv("llama.feed_forward_length", U32, le_bytes(14336, 4))
      .kv("llama.attention.head_count", U32, le_bytes(32, 4))
      .kv("llama.attention.head_count_kv", U32, le_bytes(8, 4))
      .kv("llama.rope.freq_base", F32, f32_bytes(500000.0f))
      .kv("llama.attention.layer_norm_rms_epsilon", F32, f32_bytes(1e-5f))
      .kv("llama.rope.dimension_count", U32, le_bytes(128, 4))
      .kv("general.file_type", U32, le_bytes(15, 4))
      .kv("tokenizer.ggml.tokens", ARR, arr(STR, 2, gstr("<|begin_of_text|>") + gstr("a")));
  b.tensor("rope_freqs.weight", {64}, 0, f32s(factors))
      .tensor("token_embd.weight", {4096, 2}, 12, std::string(2 * 16 * 144, '\0'));
  return b;
}

}  // namespace

TEST_CASE("gguf model_config: Llama 3.1 as llama.cpp converts it", "[io][gguf][model_config]") {
  io::gguf_file g(write_bytes("llama31.gguf", llama31().bytes()));
  const posenc::model_config m = posenc::model_config_from_gguf(g);
  const posenc::model_config hf =
      posenc::model_config_from_hf_json_file(data_path("configs/llama-3.1-8b.json"));
  CHECK(m.model_type == "llama");
  CHECK(m.num_attention_heads == hf.num_attention_heads);
  CHECK(m.num_key_value_heads == hf.num_key_value_heads);
  CHECK(m.head_dim == hf.head_dim);
  CHECK(m.hidden_size == hf.hidden_size);
  CHECK(m.max_position_embeddings == hf.max_position_embeddings);
  CHECK(m.rotary_dim == 128);
  CHECK(m.partial_rotary_factor == 1.0);
  CHECK_FALSE(m.sliding_window.has_value());
  // llama.cpp rotates llama's permuted q/k interleaved; the frequencies are the llama3 ones
  CHECK(m.rope.pairing == posenc::rope_pairing::interleaved);
  CHECK(m.rope.base == 500000.0);
  CHECK(m.rope.freq_factors.size() == 64);
  const auto a = m.rope.frequencies(0), b = hf.rope.frequencies(0);
  REQUIRE(a.inv_freq.size() == b.inv_freq.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.inv_freq.size(); ++i)
    worst = std::max(worst, std::fabs(a.inv_freq[i] / b.inv_freq[i] - 1.0));
  CHECK(worst < 1e-6);  // the divisors are stored as float32
  CHECK(worst > 0.0);   // and they are not the exact ones
  CHECK(a.attention_factor == 1.0);
}

TEST_CASE("gguf model_config: qwen2 yarn, gemma key_length, phi3 longrope",
          "[io][gguf][model_config]") {
  SECTION("qwen2 with YaRN") {
    gguf_builder b;
    b.kv("general.architecture", STR, gstr("qwen2"))
        .kv("qwen2.context_length", U32, le_bytes(131072, 4))
        .kv("qwen2.embedding_length", U32, le_bytes(3584, 4))
        .kv("qwen2.attention.head_count", U32, le_bytes(28, 4))
        .kv("qwen2.attention.head_count_kv", U32, le_bytes(4, 4))
        .kv("qwen2.rope.freq_base", F32, f32_bytes(1e6f))
        .kv("qwen2.rope.scaling.type", STR, gstr("yarn"))
        .kv("qwen2.rope.scaling.factor", F32, f32_bytes(4.0f))
        .kv("qwen2.rope.scaling.original_context_length", U32, le_bytes(32768, 4));
    io::gguf_file g(write_bytes("qwen2.gguf", b.bytes()));
    const posenc::model_config m = posenc::model_config_from_gguf(g);
    CHECK(m.num_attention_heads == 28);
    CHECK(m.num_key_value_heads == 4);
    CHECK(m.head_dim == 128);
    CHECK(m.max_position_embeddings == 131072);
    CHECK(m.rope.pairing == posenc::rope_pairing::half);
    CHECK(m.rope.scaling == posenc::rope_scaling_type::yarn);
    CHECK(m.rope.factor == 4.0);
    CHECK(m.rope.original_max_positions == 32768);
    CHECK(m.rope.base == 1e6);
    // the same frequencies as the Qwen2 YaRN config the scaling tests use
    const auto f = m.rope.frequencies(0), r = posenc_test::qwen2_yarn().frequencies(0);
    REQUIRE(f.inv_freq.size() == r.inv_freq.size());
    for (std::size_t i = 0; i < f.inv_freq.size(); ++i)
      CHECK(f.inv_freq[i] == Approx(r.inv_freq[i]).epsilon(1e-12));
  }
  SECTION("linear: .rope.scaling.factor, or the older .rope.scale_linear") {
    const auto linear = [](const std::string& factor_key) {
      gguf_builder b;
      b.kv("general.architecture", STR, gstr("llama"))
          .kv("llama.embedding_length", U32, le_bytes(4096, 4))
          .kv("llama.attention.head_count", U32, le_bytes(32, 4))
          .kv("llama.rope.scaling.type", STR, gstr("linear"))
          .kv(factor_key, F32, f32_bytes(4.0f));
      io::gguf_file g(write_bytes("linear.gguf", b.bytes()));
      return posenc::model_config_from_gguf(g).rope;
    };
    for (const char* k : {"llama.rope.scaling.factor", "llama.rope.scale_linear"}) {
      INFO(k);
      const posenc::rope_config r = linear(k);
      CHECK(r.scaling == posenc::rope_scaling_type::linear);
      CHECK(r.factor == 4.0);
    }
  }
  SECTION("gemma: key_length 256 is the head dim") {
    gguf_builder b;
    b.kv("general.architecture", STR, gstr("gemma"))
        .kv("gemma.context_length", U32, le_bytes(8192, 4))
        .kv("gemma.embedding_length", U32, le_bytes(3072, 4))
        .kv("gemma.attention.head_count", U32, le_bytes(16, 4))
        .kv("gemma.attention.head_count_kv", U32, le_bytes(16, 4))
        .kv("gemma.attention.key_length", U32, le_bytes(256, 4))
        .kv("gemma.attention.value_length", U32, le_bytes(256, 4));
    io::gguf_file g(write_bytes("gemma.gguf", b.bytes()));
    const posenc::model_config m = posenc::model_config_from_gguf(g);
    CHECK(m.head_dim == 256);
    CHECK(m.rotary_dim == 256);
    CHECK(m.rope.base == 10000.0);
    CHECK(m.rope.pairing == posenc::rope_pairing::half);
    CHECK(m.rope.scaling == posenc::rope_scaling_type::none);
  }
  SECTION("phi3: the long/short factor tensors make longrope") {
    std::vector<float> s(posenc_test::phi3_short.begin(), posenc_test::phi3_short.end());
    std::vector<float> l(posenc_test::phi3_long.begin(), posenc_test::phi3_long.end());
    gguf_builder b;
    b.kv("general.architecture", STR, gstr("phi3"))
        .kv("phi3.context_length", U32, le_bytes(131072, 4))
        .kv("phi3.rope.scaling.original_context_length", U32, le_bytes(4096, 4))
        .kv("phi3.embedding_length", U32, le_bytes(3072, 4))
        .kv("phi3.attention.head_count", U32, le_bytes(32, 4))
        .kv("phi3.attention.head_count_kv", U32, le_bytes(32, 4))
        .kv("phi3.attention.sliding_window", U32, le_bytes(262144, 4))
        .kv("phi3.rope.dimension_count", U32, le_bytes(96, 4))
        .kv("phi3.rope.freq_base", F32, f32_bytes(10000.0f))
        .kv("phi3.rope.scaling.attn_factor", F32, f32_bytes(1.1902380714238083f));
    b.tensor("rope_factors_long.weight", {48}, 0, f32s(l))
        .tensor("rope_factors_short.weight", {48}, 0, f32s(s));
    io::gguf_file g(write_bytes("phi3.gguf", b.bytes()));
    const posenc::model_config m = posenc::model_config_from_gguf(g);
    CHECK(m.head_dim == 96);
    REQUIRE(m.sliding_window.has_value());
    CHECK(*m.sliding_window == 262144);
    CHECK(m.rope.scaling == posenc::rope_scaling_type::longrope);
    CHECK(m.rope.original_max_positions == 4096);
    CHECK(m.rope.factor == 32.0);
    CHECK(m.rope.long_factor.size() == 48);
    CHECK(m.rope.long_factor[47] == static_cast<double>(l[47]));
    CHECK(m.rope.short_factor[0] == static_cast<double>(s[0]));
    REQUIRE(m.rope.attention_factor.has_value());
    CHECK(*m.rope.attention_factor == static_cast<double>(1.1902380714238083f));
  }
}

TEST_CASE("gguf model_config: errors name the key and the value", "[io][gguf][model_config]") {
  const auto with = [](const std::string& key, std::uint32_t type, const std::string& payload) {
    gguf_builder b;
    b.kv("general.architecture", STR, gstr("llama"))
        .kv("llama.embedding_length", U32, le_bytes(4096, 4));
    if (key != "llama.attention.head_count")
      b.kv("llama.attention.head_count", U32, le_bytes(32, 4));
    if (!key.empty()) b.kv(key, type, payload);
    return b;
  };
  const auto config_error = [](const gguf_builder& b) {
    io::gguf_file g(write_bytes("cfg.gguf", b.bytes()));
    return error_of([&] { (void)posenc::model_config_from_gguf(g); });
  };
  {
    io::gguf_file g(write_bytes("cfg_ok.gguf", with("", 0, "").bytes()));
    const posenc::model_config m = posenc::model_config_from_gguf(g);
    CHECK(m.num_key_value_heads == 32);  // absent: equal to the heads
    CHECK(m.head_dim == 128);
    CHECK(m.max_position_embeddings == 0);
  }
  CHECK(config_error(with("llama.attention.head_count_kv", U32, le_bytes(6, 4)))
            .find("llama.attention.head_count_kv = 6: must be > 0 and divide "
                  "llama.attention.head_count = 32") != std::string::npos);
  CHECK(config_error(with("llama.attention.head_count", STR, gstr("32")))
            .find("llama.attention.head_count = \"32\": must be an integer") != std::string::npos);
  CHECK(config_error(with("llama.attention.head_count", I32, le_bytes(0xFFFFFFFF, 4)))
            .find("llama.attention.head_count = -1: must be > 0") != std::string::npos);
  CHECK(config_error(with("llama.rope.scaling.type", STR, gstr("su")))
            .find("llama.rope.scaling.type = \"su\": not a type this reader maps") !=
        std::string::npos);
  CHECK(config_error(with("llama.rope.dimension_count", U32, le_bytes(130, 4)))
            .find("llama.rope.dimension_count = 130: must be in (0, head dim = 128]") !=
        std::string::npos);
  gguf_builder no_arch;
  no_arch.kv("llama.attention.head_count", U32, le_bytes(32, 4));
  CHECK(config_error(no_arch).find("general.architecture = <missing>") != std::string::npos);

  gguf_builder odd;
  odd.kv("general.architecture", STR, gstr("mystery"))
      .kv("mystery.embedding_length", U32, le_bytes(512, 4))
      .kv("mystery.attention.head_count", U32, le_bytes(8, 4));
  CHECK(config_error(odd).find("general.architecture = \"mystery\"") != std::string::npos);
  io::gguf_file g(write_bytes("mystery.gguf", odd.bytes()));
  CHECK(posenc::model_config_from_gguf(g, posenc::rope_pairing::half).rope.pairing ==
        posenc::rope_pairing::half);
}

TEST_CASE("gguf: the fuzz seeds, written by an independent Python writer, read back",
          "[io][gguf][model_config]") {
  // tests/fuzz/make_gguf_inputs.py writes them from the format description with struct
  const std::string dir = data_path("../fuzz/corpus/gguf/");
  {
    io::gguf_file g(dir + "llama31.gguf");
    const posenc::model_config m = posenc::model_config_from_gguf(g);
    CHECK(m.num_attention_heads == 32);
    CHECK(m.num_key_value_heads == 8);
    CHECK(m.head_dim == 128);
    CHECK(m.rope.freq_factors.size() == 64);
    CHECK(*g.get_strings("tokenizer.ggml.tokens") == std::vector<std::string>{"<s>", "a", "b"});
    CHECK(g.tensor_info("blk.0.attn_q.weight").type_name == "Q4_K");
    CHECK(g.tensor_info("blk.0.attn_q.weight").bytes == std::optional<std::uint64_t>(288));
  }
  {
    io::gguf_file g(dir + "qwen2_yarn.gguf");
    CHECK(posenc::model_config_from_gguf(g).rope.scaling == posenc::rope_scaling_type::yarn);
  }
  {
    io::gguf_file g(dir + "phi3_longrope.gguf");
    const posenc::model_config m = posenc::model_config_from_gguf(g);
    CHECK(m.rope.scaling == posenc::rope_scaling_type::longrope);
    CHECK(m.rope.long_factor[47] == 48.0);
  }
  {
    io::gguf_file g(dir + "gemma.gguf");
    CHECK(posenc::model_config_from_gguf(g).head_dim == 256);
  }
  io::gguf_file g(dir + "all_types_v2.gguf");
  CHECK(g.version() == 2);
  CHECK(g.alignment() == 64);
  CHECK(*g.get_integer("i16") == -30000);
  CHECK(g.find("u64")->u == (std::uint64_t{1} << 63) + 5);
  CHECK(*g.get_number("f64") == 3.141592653589793);
  CHECK(g.find("arr")->element(2).element(0).element_type == io::gguf_type::uint16);
  CHECK(g.read<double>("f16").data == std::vector<double>{1.0, -2.0});
  CHECK(g.read<double>("bf16").data == std::vector<double>{1.0});
  CHECK(g.read<double>("f64").data == std::vector<double>{0.5});
  CHECK(g.read<std::int64_t>("i32").data == std::vector<std::int64_t>{-7});
  CHECK(g.read<std::int64_t>("i64").data == std::vector<std::int64_t>{9});
  CHECK(g.read<float>("f32").shape == std::vector<Index>{2, 2});
  CHECK(g.tensor_info("q8").bytes == std::optional<std::uint64_t>(34));
  CHECK_FALSE(g.tensor_info("unknown").bytes.has_value());
}
