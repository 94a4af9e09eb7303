#include <cstdint>
#include <posenc/io/npy.hpp>
#include <random>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/golden.hpp"

using posenc::Index;
using posenc_test::data_path;
using posenc_test::npy_raw;
using posenc_test::ramp;
using posenc_test::tmp_path;
using posenc_test::write_bytes;
using posenc_test::zeros;
namespace io = posenc::io;

TEST_CASE("npy: numpy-written float fixtures of rank 0 to 4", "[io][npy]") {
  SECTION("f4 [2,3] as float and double") {
    const auto f = io::read_npy<float>(data_path("io/f4_2x3.npy"));
    CHECK(f.shape == std::vector<Index>{2, 3});
    REQUIRE(f.data.size() == 6);
    for (int i = 0; i < 6; ++i)
      CHECK(f.data[static_cast<std::size_t>(i)] == static_cast<float>(ramp(i)));
    const auto m = io::read_npy_matrix<double>(data_path("io/f4_2x3.npy"), 2, 3);
    CHECK(m(1, 2) == ramp(5));
    CHECK(m(0, 1) == ramp(1));
  }
  SECTION("rank 0") {
    const auto t = posenc_test::golden<double>("io/f8_rank0.npy");
    CHECK(t.shape.empty());
    CHECK(t.size() == 1);
    REQUIRE(t.data.size() == 1);
    CHECK(t.data[0] == -1.375);
    POSENC_REQUIRE_ERROR(t.as_matrix(), "rank = 0");
  }
  SECTION("rank 1 reads as one row") {
    const auto m = posenc_test::golden_matrix<double>("io/f8_rank1.npy");
    REQUIRE(m.rows() == 1);
    REQUIRE(m.cols() == 5);
    for (int i = 0; i < 5; ++i) CHECK(m(0, i) == ramp(i));
  }
  SECTION("rank 3 and 4") {
    const auto t3 = io::read_npy<double>(data_path("io/f8_2x3x4.npy"));
    CHECK(t3.shape == std::vector<Index>{2, 3, 4});
    for (int i = 0; i < 24; ++i) CHECK(t3.data[static_cast<std::size_t>(i)] == ramp(i));
    const auto t4 = io::read_npy<float>(data_path("io/f8_1x2x2x3.npy"));
    CHECK(t4.shape == std::vector<Index>{1, 2, 2, 3});
    for (int i = 0; i < 12; ++i)
      CHECK(t4.data[static_cast<std::size_t>(i)] == static_cast<float>(ramp(i)));
    POSENC_REQUIRE_ERROR(io::read_npy_matrix<double>(data_path("io/f8_2x3x4.npy")), "rank = 3");
  }
  SECTION("empty [0,3]") {
    const auto m = io::read_npy_matrix<float>(data_path("io/f8_0x3.npy"), 0, 3);
    CHECK(m.rows() == 0);
    CHECK(m.cols() == 3);
  }
  SECTION("version 2.0 and 3.0 headers") {
    for (const char* f : {"io/f8_v2_2x3.npy", "io/f8_v3_2x3.npy"}) {
      const auto m = posenc_test::golden_matrix(f);
      REQUIRE(m.rows() == 2);
      for (int i = 0; i < 6; ++i) CHECK(m(i / 3, i % 3) == ramp(i));
    }
  }
  SECTION("f2 decodes exactly as numpy widens it (subnormals, inf, nan, signed zero)") {
    const auto h = io::read_npy<double>(data_path("io/f2_specials.npy"));
    const auto w = io::read_npy<double>(data_path("io/f2_specials_as_f8.npy"));
    REQUIRE(h.data.size() == w.data.size());
    REQUIRE(h.data.size() == 15);
    for (std::size_t i = 0; i < h.data.size(); ++i) {
      INFO("element " << i);
      CHECK(posenc_test::same_value(h.data[i], w.data[i]));
    }
    const auto hf = io::read_npy<float>(data_path("io/f2_specials.npy"));
    for (std::size_t i = 0; i < h.data.size(); ++i)
      CHECK(posenc_test::same_value(static_cast<double>(hf.data[i]), w.data[i]));
  }
}

TEST_CASE("npy: header info without the data", "[io][npy]") {
  const io::npy_info a = io::read_npy_info(data_path("io/f4_2x3.npy"));
  CHECK(a.type == io::dtype::f32);
  CHECK(a.descr == "<f4");
  CHECK(a.shape == std::vector<Index>{2, 3});
  const io::npy_info b = io::read_npy_info(data_path("io/i8_2x4.npy"));
  CHECK(b.type == io::dtype::i64);
  CHECK(io::read_npy_info(data_path("io/f2_specials.npy")).type == io::dtype::f16);
  CHECK(io::read_npy_info(data_path("io/b1_4.npy")).type == io::dtype::boolean);
  CHECK(io::read_npy_info(data_path("io/f8_rank0.npy")).shape.empty());
  POSENC_REQUIRE_ERROR(io::read_npy_info(data_path("io/f8_fortran_2x3.npy")),
                       "fortran_order = True");
  POSENC_REQUIRE_ERROR(io::read_npy_info(data_path("io/wpe.safetensors")), "bad magic");
}

TEST_CASE("npy: integer and bool fixtures, exact conversions", "[io][npy]") {
  const auto i8 = io::read_npy<std::int64_t>(data_path("io/i8_2x4.npy"));
  CHECK(i8.shape == std::vector<Index>{2, 4});
  for (int i = 0; i < 8; ++i) CHECK(i8.data[static_cast<std::size_t>(i)] == posenc_test::iramp(i));
  const auto i8d = io::read_npy_matrix<double>(data_path("io/i8_2x4.npy"));
  CHECK(i8d(1, 3) == static_cast<double>(posenc_test::iramp(7)));
  const auto i8f = io::read_npy<float>(data_path("io/i8_2x4.npy"));  // |v| < 2^24: exact
  CHECK(i8f.data[0] == -3000009.0f);
  const auto i4 = io::read_npy<std::int32_t>(data_path("io/i4_7.npy"));
  for (int i = 0; i < 7; ++i) CHECK(i4.data[static_cast<std::size_t>(i)] == posenc_test::iramp(i));
  const auto i4l = io::read_npy<std::int64_t>(data_path("io/i4_7.npy"));
  CHECK(i4l.data[6] == posenc_test::iramp(6));
  const auto u1 = io::read_npy<std::uint8_t>(data_path("io/u1_5.npy"));
  CHECK(u1.data == std::vector<std::uint8_t>{0, 1, 127, 128, 255});
  const auto u1d = io::read_npy<double>(data_path("io/u1_5.npy"));
  CHECK(u1d.data[4] == 255.0);
  const auto b1 = io::read_npy<float>(data_path("io/b1_4.npy"));
  CHECK(b1.data == std::vector<float>{1, 0, 0, 1});
  const std::string int_valued = write_bytes(
      "int_valued.npy", npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                posenc_test::le_bytes(0xC000000000000000ull, 8) +       // -2.0
                                    posenc_test::le_bytes(0x4059000000000000ull, 8)));  // 100.0
  const auto f8i = io::read_npy<std::int32_t>(int_valued);
  CHECK(f8i.data == std::vector<std::int32_t>{-2, 100});

  SECTION("inexact conversions are errors naming the path, dtype and element") {
    POSENC_REQUIRE_ERROR(io::read_npy<std::int64_t>(data_path("io/f8_frac_3.npy")),
                         "element 1 (2.5");
    POSENC_REQUIRE_ERROR(io::read_npy<std::int64_t>(data_path("io/f8_frac_3.npy")), "'<f8'");
    POSENC_REQUIRE_ERROR(io::read_npy<std::int64_t>(data_path("io/f8_frac_3.npy")),
                         "f8_frac_3.npy");
    POSENC_REQUIRE_ERROR(io::read_npy<std::uint8_t>(data_path("io/i8_2x4.npy")),
                         "element 0 (-3000009)");
    POSENC_REQUIRE_ERROR(io::read_npy<std::int32_t>(data_path("io/f2_specials.npy")), "element 5");
    POSENC_REQUIRE_ERROR(io::read_npy<std::int64_t>(data_path("io/f2_specials.npy")),
                         "does not convert exactly to the requested i64");
    // 2^53 + 1 is not a double; 2^24 + 1 is not a float.
    const std::string big = write_bytes(
        "big_i8.npy", npy_raw("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                              posenc_test::le_bytes((1ull << 53) + 1, 8)));
    POSENC_REQUIRE_ERROR(io::read_npy<double>(big), "element 0 (9007199254740993)");
    const std::string mid = write_bytes(
        "mid_i8.npy", npy_raw("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                              posenc_test::le_bytes((1ull << 24) + 1, 8)));
    POSENC_REQUIRE_ERROR(io::read_npy<float>(mid), "element 0 (16777217)");
    CHECK(io::read_npy<double>(mid).data[0] == 16777217.0);
    // int64 max rounds to 2^63 in double: inexact.
    const std::string mx = write_bytes(
        "max_i8.npy", npy_raw("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                              posenc_test::le_bytes(0x7FFFFFFFFFFFFFFFull, 8)));
    POSENC_REQUIRE_ERROR(io::read_npy<double>(mx), "element 0");
    CHECK(io::read_npy<std::int64_t>(mx).data[0] == INT64_MAX);
    // A finite f8 beyond float's range is refused rather than turned into inf.
    const std::string huge = write_bytes(
        "huge_f8.npy", npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
                               posenc_test::le_bytes(0x7E37E43C8800759Cull, 8)));  // 1e300
    POSENC_REQUIRE_ERROR(io::read_npy<float>(huge), "element 0");
    CHECK(io::read_npy<double>(huge).data[0] == 1e300);
  }
}

TEST_CASE("npy: the writer is byte-identical to numpy.save", "[io][npy]") {
  using posenc_test::read_bytes;
  {
    const auto t = io::read_npy<float>(data_path("io/f4_2x3.npy"));
    io::write_npy(tmp_path("w_f4.npy"), t);
    CHECK(read_bytes(tmp_path("w_f4.npy")) == read_bytes(data_path("io/f4_2x3.npy")));
  }
  for (const char* f : {"io/f8_rank0.npy", "io/f8_rank1.npy", "io/f8_2x3x4.npy",
                        "io/f8_1x2x2x3.npy", "io/f8_0x3.npy", "io/f8_rank20.npy"}) {
    INFO(f);
    const auto t = io::read_npy<double>(data_path(f));
    io::write_npy(tmp_path("w_f8.npy"), t);
    CHECK(read_bytes(tmp_path("w_f8.npy")) == read_bytes(data_path(f)));
  }
  {
    const auto t = io::read_npy<std::int64_t>(data_path("io/i8_2x4.npy"));
    io::write_npy(tmp_path("w_i8.npy"), t);
    CHECK(read_bytes(tmp_path("w_i8.npy")) == read_bytes(data_path("io/i8_2x4.npy")));
  }
  {
    const auto t = io::read_npy<std::int32_t>(data_path("io/i4_7.npy"));
    io::write_npy(tmp_path("w_i4.npy"), t);
    CHECK(read_bytes(tmp_path("w_i4.npy")) == read_bytes(data_path("io/i4_7.npy")));
  }
  {
    const auto t = io::read_npy<std::uint8_t>(data_path("io/u1_5.npy"));
    io::write_npy(tmp_path("w_u1.npy"), t);
    CHECK(read_bytes(tmp_path("w_u1.npy")) == read_bytes(data_path("io/u1_5.npy")));
  }
}

namespace {

template <class Scalar>
Scalar random_value(std::mt19937_64& rng) {
  if constexpr (std::is_floating_point_v<Scalar>) {
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // [0, 1)
    return static_cast<Scalar>((u - 0.5) * 2e4);
  } else {
    return static_cast<Scalar>(rng());
  }
}

template <class Scalar>
void round_trip_random_shapes(std::mt19937_64& rng, const char* label) {
  for (int trial = 0; trial < 40; ++trial) {
    const int rank = trial % 5;  // 0..4
    std::vector<Index> shape;
    for (int a = 0; a < rank; ++a)
      shape.push_back(static_cast<Index>(rng() % 6));  // zeros included
    io::tensor<Scalar> t;
    t.shape = shape;
    t.data.resize(static_cast<std::size_t>(t.size()));
    for (auto& v : t.data) v = random_value<Scalar>(rng);
    const std::string path = tmp_path(std::string("rt_") + label + ".npy");
    io::write_npy(path, t);
    const auto back = io::read_npy<Scalar>(path);
    INFO(label << " rank " << rank);
    REQUIRE(back.shape == t.shape);
    REQUIRE(back.data == t.data);
  }
}

}  // namespace

TEST_CASE("npy: random round-trips for every written dtype and rank 0..4", "[io][npy]") {
  std::mt19937_64 rng(20240601);
  round_trip_random_shapes<float>(rng, "f4");
  round_trip_random_shapes<double>(rng, "f8");
  round_trip_random_shapes<std::int64_t>(rng, "i8");
  round_trip_random_shapes<std::int32_t>(rng, "i4");
  round_trip_random_shapes<std::uint8_t>(rng, "u1");
}

TEST_CASE("npy: Eigen matrices are written in logical row-major order", "[io][npy]") {
  Eigen::MatrixXd col(3, 4);  // column-major storage
  for (Index i = 0; i < 3; ++i)
    for (Index j = 0; j < 4; ++j)
      col(i, j) = 10.0 * static_cast<double>(i) + static_cast<double>(j);
  io::write_npy(tmp_path("eigen_col.npy"), col);
  const auto t = io::read_npy<double>(tmp_path("eigen_col.npy"));
  CHECK(t.shape == std::vector<Index>{3, 4});
  CHECK(t.data[1] == 1.0);   // (0, 1)
  CHECK(t.data[4] == 10.0);  // (1, 0)
  const auto back = io::read_npy_matrix<double>(tmp_path("eigen_col.npy"), 3, 4);
  CHECK(posenc_test::max_abs_diff(back, col) == 0.0);

  // An expression (a block of a transpose) and a float row-major matrix.
  io::write_npy(tmp_path("eigen_expr.npy"), col.transpose().block(1, 0, 2, 3));
  const auto e = io::read_npy_matrix<double>(tmp_path("eigen_expr.npy"), 2, 3);
  CHECK(e(1, 2) == col(2, 2));
  io::matrix<float> rf = col.cast<float>();
  io::write_npy(tmp_path("eigen_rf.npy"), rf);
  CHECK(posenc_test::max_abs_diff(io::read_npy_matrix<float>(tmp_path("eigen_rf.npy")), rf) == 0.0);

  SECTION("expected shape mismatches name rows and cols") {
    POSENC_REQUIRE_ERROR(io::read_npy_matrix<double>(tmp_path("eigen_col.npy"), 4, 4), "rows = 3");
    POSENC_REQUIRE_ERROR(io::read_npy_matrix<double>(tmp_path("eigen_col.npy"), 3, 5), "cols = 4");
    POSENC_REQUIRE_ERROR(io::read_npy_matrix<double>(tmp_path("eigen_col.npy"), -1, 5),
                         "expected 5");
  }
}

TEST_CASE("npy: header variants that numpy accepts", "[io][npy]") {
  const std::string data = posenc_test::le_bytes(0x3FF0000000000000ull, 8) +
                           posenc_test::le_bytes(0x4000000000000000ull, 8);  // 1.0, 2.0
  for (const std::string dict : {"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                 "{'shape': (2,), 'fortran_order': False, 'descr': '<f8'}",
                                 "{\"descr\": \"=f8\", \"fortran_order\": False, \"shape\": (2L,)}",
                                 "  {'descr':'<f8','fortran_order':False,'shape':( 2 , ) }   ",
                                 "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }"}) {
    INFO(dict);
    const auto m =
        io::read_npy_matrix<double>(write_bytes("variant.npy", npy_raw(dict, data)), 1, 2);
    CHECK(m(0, 0) == 1.0);
    CHECK(m(0, 1) == 2.0);
  }
  const auto b = io::read_npy<std::uint8_t>(write_bytes(
      "u1_pipe.npy",
      npy_raw("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "\x01\x02\xff")));
  CHECK(b.data == std::vector<std::uint8_t>{1, 2, 255});
  const auto c = io::read_npy<std::uint8_t>(write_bytes(
      "u1_lt.npy", npy_raw("{'descr': '<u1', 'fortran_order': False, 'shape': (1,), }", "\x07")));
  CHECK(c.data == std::vector<std::uint8_t>{7});
}

TEST_CASE("npy: corrupted and unsupported files are clear errors", "[io][npy]") {
  const std::string f8x2 = zeros(16);
  const auto npy = [](const std::string& dict, const std::string& data) {
    return write_bytes("bad.npy", npy_raw(dict, data));
  };
  const std::string ok = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";

  POSENC_REQUIRE_ERROR(io::read_npy<double>(tmp_path("does/not/exist.npy")), "cannot open");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(tmp_path("does/not/exist.npy")), "path = ");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(std::string(POSENC_TEST_TMP_DIR)),
                       "path = ");  // a directory
  POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("empty.npy", "")), "truncated");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("short.npy", "\x93NUMP")), "truncated");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(write_bytes("magic.npy", "PK\x03\x04 this is a zip file")), "bad magic");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("v4.npy", npy_raw(ok, f8x2, 4, 0))),
                       "unsupported .npy version 4.0");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("v11.npy", npy_raw(ok, f8x2, 1, 1))),
                       "unsupported .npy version 1.1");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("v0.npy", npy_raw(ok, f8x2, 0, 0))),
                       "unsupported .npy version 0.0");
  {
    // Header length field larger than the rest of the file (v1 and v2 length widths).
    std::string s = npy_raw(ok, f8x2);
    s[8] = '\xff';
    s[9] = '\xff';
    POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("hlen.npy", s)),
                         "runs past the end of the file");
    std::string s2 = npy_raw(ok, f8x2, 2, 0);
    s2[11] = '\x7f';
    POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("hlen2.npy", s2)), "header length 21");
    POSENC_REQUIRE_ERROR(
        io::read_npy<double>(write_bytes("hlen3.npy", std::string("\x93NUMPY\x02\x00\x05", 9))),
        "truncated");
  }
  // Malformed dicts.
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("'descr': '<f8', 'fortran_order': False, 'shape': (2,)", f8x2)),
      "expected '{'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)", f8x2)),
      "expected ',' or '}'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8, 'fortran_order': False, 'shape': (2,)}", f8x2)),
      "malformed header");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}}", f8x2)),
      "unexpected characters after the header dict");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': false, 'shape': (2,)}", f8x2)),
      "True or False");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2)}", f8x2)),
      "trailing comma");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False, 'shape': [2]}", f8x2)),
      "expected '('");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2.0,)}", f8x2)),
      "expected ',' or ')'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (x,)}", f8x2)),
      "non-negative integer");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-2,)}", f8x2)),
      "negative extent");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy(
          "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,)}", f8x2)),
      "shape extent overflows");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", f8x2)),
      "shape product overflows at axis 1");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976,)}", f8x2)),
      "shape product overflows at axis 0");  // 2^60 elements * 8 bytes
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy("{'descr': '<f8', 'fortran_order': False}", f8x2)),
                       "no 'shape'");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy("{'fortran_order': False, 'shape': (2,)}", f8x2)),
                       "no 'descr'");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy("{'descr': '<f8', 'shape': (2,)}", f8x2)),
                       "no 'fortran_order'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", f8x2)),
      "duplicate key 'descr'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}", f8x2)),
      "duplicate key 'shape'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy(
          "{'descr': '<f8', 'fortran_order': False, 'fortran_order': False, 'shape': (2,)}", f8x2)),
      "duplicate key 'fortran_order'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}", f8x2)),
      "unexpected header key 'extra'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,)}", f8x2)),
      "structured dtypes");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy(
                           "{'descr': '<f\\x38', 'fortran_order': False, 'shape': (2,)}", f8x2)),
                       "unsupported character");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}\xc3\xa9", f8x2)),
      "non-ASCII");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(
          npy(std::string("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}\0", 56), f8x2)),
      "NUL");
  // Unsupported layouts and dtypes.
  POSENC_REQUIRE_ERROR(io::read_npy<double>(data_path("io/f8_fortran_2x3.npy")),
                       "fortran_order = True");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(data_path("io/f4_bigendian_3.npy")),
                       "dtype '>f4': big-endian");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '|f8', 'fortran_order': False, 'shape': (2,)}", f8x2)),
      "'|' is ambiguous");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<c16', 'fortran_order': False, 'shape': (1,)}", f8x2)),
      "dtype '<c16': not a supported dtype");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': 'O', 'fortran_order': False, 'shape': (2,)}", f8x2)),
      "dtype 'O'");
  POSENC_REQUIRE_ERROR(
      io::read_npy<double>(npy("{'descr': '<U3', 'fortran_order': False, 'shape': (2,)}", f8x2)),
      "not a supported dtype");
  // Data length.
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy(ok, zeros(15))),
                       "truncated data: shape needs 16 bytes, the file has 15");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy(ok, "")), "truncated data");
  POSENC_REQUIRE_ERROR(io::read_npy<double>(npy(ok, zeros(17))), "1 trailing bytes");
  {
    // A numpy file cut short by one byte.
    std::string s = posenc_test::read_bytes(data_path("io/f8_2x3x4.npy"));
    s.pop_back();
    POSENC_REQUIRE_ERROR(io::read_npy<double>(write_bytes("cut.npy", s)), "truncated data");
  }
  // The matrix reader's rank check, on a valid rank-0 file.
  POSENC_REQUIRE_ERROR(io::read_npy_matrix<double>(data_path("io/f8_rank0.npy")), "rank = 0");
}

TEST_CASE("npy: writer errors and the version 2.0 header", "[io][npy]") {
  const std::vector<double> v(4, 1.0);
  POSENC_REQUIRE_ERROR(io::write_npy(tmp_path("neg.npy"), v.data(), {2, -2}),
                       "shape[1] = -2 is negative");
  POSENC_REQUIRE_ERROR(io::write_npy(tmp_path("no/such/dir/x.npy"), v.data(), {4}),
                       "cannot open the file for writing");
  POSENC_REQUIRE_ERROR(io::write_npy<double>(tmp_path("null.npy"), nullptr, {4}), "data = nullptr");
  io::write_npy<double>(tmp_path("null_empty.npy"), nullptr, {0, 4});
  CHECK(io::read_npy<double>(tmp_path("null_empty.npy")).shape == std::vector<Index>{0, 4});
  io::tensor<float> bad;
  bad.shape = {2, 2};
  bad.data = {1, 2, 3};
  POSENC_REQUIRE_ERROR(io::write_npy(tmp_path("bad_tensor.npy"), bad), "data.size() = 3");
  POSENC_REQUIRE_ERROR(bad.as_matrix(), "data.size() = 3");
  bad.shape = {2, 3, 1};
  POSENC_REQUIRE_ERROR(bad.as_matrix(), "rank = 3");

  // A shape so long that its header exceeds 65535 bytes is written with a 2.0 header
  // (numpy itself caps arrays at 32 axes, so such a file is only readable with a limit error).
  const std::vector<Index> many(30000, 1);
  const double one = 1.0;
  io::write_npy(tmp_path("v2.npy"), &one, many);
  const std::string s = posenc_test::read_bytes(tmp_path("v2.npy"));
  REQUIRE(s.size() > 12);
  CHECK(s[6] == '\x02');
  CHECK(s[7] == '\x00');
  std::uint64_t hlen = 0;
  for (int i = 3; i >= 0; --i)
    hlen = (hlen << 8) | static_cast<unsigned char>(s[8 + static_cast<std::size_t>(i)]);
  CHECK((12 + hlen) % 64 == 0);
  CHECK(s.size() == 12 + hlen + 8);
  CHECK(s[12 + hlen - 1] == '\n');
  POSENC_REQUIRE_ERROR(io::read_npy<double>(tmp_path("v2.npy")), "more than 64 axes");
}
