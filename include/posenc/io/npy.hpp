#pragma once
/// \file
/// NumPy `.npy` files: read and write C-order arrays.
///
/// Format (numpy.lib.format, NEP 1):
///
///     "\x93NUMPY" major minor  header_len  header                          data
///     6 bytes     1     1      u16 LE (v1) ASCII dict literal, space-padded C-order elements
///                              u32 LE (v2, v3: UTF-8)  and ending in '\n'
///
///     header = {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
///
/// Supported descr: '<f2' '<f4' '<f8' '<i4' '<i8' '|u1' '|b1'; '=' (native) is read as
/// little-endian, '|' is accepted only for one-byte types, '>' (big-endian) is refused.
/// fortran_order True, structured or object dtypes are refused. See tensor.hpp for the
/// conversions to the requested Scalar, and docs/file-formats.md.

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "tensor.hpp"

namespace posenc {
namespace io {
namespace detail {

/// What an .npy header says.
struct npy_header {
  dtype type = dtype::f64;
  std::string descr;
  std::vector<Index> shape;
  std::uint64_t data_offset = 0;  // bytes from the start of the file
};

/// A tiny parser for the Python dict literal of an .npy header.
class npy_header_parser {
 public:
  npy_header_parser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  void parse(npy_header& h) {
    bool has_descr = false, has_fortran = false, has_shape = false;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (has_descr) bad("duplicate key 'descr'");
        has_descr = true;
        if (peek() != '\'' && peek() != '"')
          bad("'descr' must be a string (structured dtypes are not supported)");
        h.descr = parse_string();
      } else if (key == "fortran_order") {
        if (has_fortran) bad("duplicate key 'fortran_order'");
        has_fortran = true;
        if (parse_bool()) bad("fortran_order = True: only C-order arrays are supported");
      } else if (key == "shape") {
        if (has_shape) bad("duplicate key 'shape'");
        has_shape = true;
        h.shape = parse_shape();
      } else {
        bad("unexpected header key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') {
        ++i_;
        break;
      }
      bad("expected ',' or '}' in the header dict");
    }
    skip_ws();
    if (i_ != s_.size()) bad("unexpected characters after the header dict");
    if (!has_descr) bad("header has no 'descr'");
    if (!has_fortran) bad("header has no 'fortran_order'");
    if (!has_shape) bad("header has no 'shape'");
    h.type = parse_descr(h.descr);
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail("io::read_npy", "path", path_, "malformed header: " + what);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string parse_string() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\' || s_[i_] == '\n') bad("unsupported character in a string");
      out += s_[i_++];
    }
    if (i_ == s_.size()) bad("unterminated string");
    ++i_;
    return out;
  }
  bool parse_bool() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    bad("fortran_order must be True or False");
  }
  std::vector<Index> parse_shape() {
    std::vector<Index> shape;
    expect('(');
    skip_ws();
    if (peek() == ')') {
      ++i_;
      return shape;
    }
    for (;;) {
      skip_ws();
      // Checked before the next extent is stored: a 16 MB header of "1, 1, ..." stops here.
      if (shape.size() == max_rank) bad("shape has more than 64 axes");
      shape.push_back(parse_dim());
      skip_ws();
      if (peek() == ',') {
        ++i_;
        skip_ws();
        if (peek() == ')') {
          ++i_;
          break;
        }
        continue;
      }
      if (peek() == ')') {
        if (shape.size() == 1) bad("a one-element shape needs a trailing comma, e.g. (3,)");
        ++i_;
        break;
      }
      bad("expected ',' or ')' in the shape");
    }
    return shape;
  }
  Index parse_dim() {
    if (peek() == '-') bad("negative extent in the shape");
    if (peek() < '0' || peek() > '9') bad("expected a non-negative integer in the shape");
    Index v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (v > (std::numeric_limits<Index>::max() - digit) / 10) bad("shape extent overflows");
      v = v * 10 + digit;
      ++i_;
    }
    if (peek() == 'L') ++i_;  // Python 2 long literal, written by old numpy
    return v;
  }
  dtype parse_descr(const std::string& d) const {
    const auto unsupported = [&](const std::string& why) {
      fail("io::read_npy", "path", path_, "dtype '" + d + "': " + why);
    };
    if (d.size() < 2) unsupported("not a supported dtype");
    std::size_t k = 0;
    char order = '=';
    if (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=') order = d[k++];
    const std::string code = d.substr(k);
    dtype t;
    if (code == "f2")
      t = dtype::f16;
    else if (code == "f4")
      t = dtype::f32;
    else if (code == "f8")
      t = dtype::f64;
    else if (code == "i4")
      t = dtype::i32;
    else if (code == "i8")
      t = dtype::i64;
    else if (code == "u1")
      t = dtype::u8;
    else if (code == "b1")
      t = dtype::boolean;
    else {
      unsupported("not a supported dtype (supported: f2 f4 f8 i4 i8 u1 b1)");
      return dtype::f64;
    }
    if (order == '>' && dtype_size(t) > 1) unsupported("big-endian data is not supported");
    if (order == '|' && dtype_size(t) > 1)
      unsupported("byte order '|' is ambiguous for a multi-byte type");
    return t;
  }

  const std::string& s_;
  const std::string& path_;
  std::size_t i_ = 0;
};

/// Reads and validates the header; checks that the data fits the file exactly.
inline npy_header read_npy_header(input_file& f, const std::string& path) {
  const char* where = "io::read_npy";
  unsigned char pre[8];
  if (f.size() < 10)
    fail(where, "path", path, "truncated: not an .npy file (shorter than its preamble)");
  f.read(0, pre, 8, "the preamble");
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0)
    fail(where, "path", path, "bad magic: not an .npy file");
  const int major = pre[6], minor = pre[7];
  if (!((major == 1 || major == 2 || major == 3) && minor == 0))
    fail(where, "path", path,
         "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor) +
             " (supported: 1.0, 2.0, 3.0)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  unsigned char len_raw[4];
  f.read(8, len_raw, len_bytes, "the header length");
  const std::uint64_t header_len = load_le(len_raw, len_bytes);
  const std::uint64_t header_start = 8 + len_bytes;
  if (header_len > f.size() - header_start)
    fail(where, "path", path,
         "header length " + std::to_string(header_len) + " runs past the end of the file (" +
             std::to_string(f.size()) + " bytes)");
  if (header_len > npy_max_header_bytes)
    fail(where, "path", path,
         "header length " + std::to_string(header_len) + " is implausibly large");
  std::string text(static_cast<std::size_t>(header_len), '\0');
  f.read(header_start, text.data(), text.size(), "the header");
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80 || c == '\0')
      fail(where, "path", path, "malformed header: non-ASCII or NUL byte");
  npy_header h;
  npy_header_parser(text, path).parse(h);
  h.data_offset = header_start + header_len;
  const Index n = checked_numel(h.shape, dtype_size(h.type), where, path);
  const std::uint64_t need = static_cast<std::uint64_t>(n) * dtype_size(h.type);
  const std::uint64_t have = f.size() - h.data_offset;
  if (have < need)
    fail(where, "path", path,
         "truncated data: shape needs " + std::to_string(need) + " bytes, the file has " +
             std::to_string(have) + " after the header");
  if (have > need)
    fail(where, "path", path,
         std::to_string(have - need) + " trailing bytes after the data (shape needs " +
             std::to_string(need) + ")");
  return h;
}

/// The header text numpy 1.24 writes for `descr` and `shape`, padded and terminated, with
/// its preamble: files are byte-identical to `numpy.save`.
inline std::vector<unsigned char> npy_preamble(const char* descr, const std::vector<Index>& shape) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t a = 0; a < shape.size(); ++a) {
    if (a > 0) dict += ", ";
    dict += std::to_string(shape[a]);
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  // numpy leaves room to grow the first axis in place (GROWTH_AXIS_MAX_DIGITS = 21).
  if (!shape.empty()) dict.append(21 - std::to_string(shape[0]).size(), ' ');
  std::size_t prefix = 10;
  std::size_t hlen = dict.size() + 1;
  int major = 1;
  std::size_t pad = 64 - (prefix + hlen) % 64;
  if (hlen + pad > 65535) {
    major = 2;
    prefix = 12;
    pad = 64 - (prefix + hlen) % 64;
  }
  std::vector<unsigned char> out(prefix);
  std::memcpy(out.data(), "\x93NUMPY", 6);
  out[6] = static_cast<unsigned char>(major);
  out[7] = 0;
  store_le(out.data() + 8, hlen + pad, prefix - 8);
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), pad, ' ');
  out.push_back('\n');
  return out;
}

inline const char* npy_descr(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
      return "<f2";
    case dtype::f32:
      return "<f4";
    case dtype::f64:
      return "<f8";
    case dtype::i32:
      return "<i4";
    case dtype::i64:
      return "<i8";
    case dtype::u8:
      return "|u1";
    case dtype::boolean:
      return "|b1";
    default:
      return nullptr;
  }
}

}  // namespace detail

/// What an `.npy` file holds, without its data.
struct npy_info {
  dtype type = dtype::f64;   ///< element type
  std::string descr;         ///< the header's descr, e.g. "<f4"
  std::vector<Index> shape;  ///< extents, outermost first (empty: rank 0)
};

/// Reads and validates an `.npy` header (everything read_npy checks except the values),
/// e.g. to pick the Scalar to read a file with. Throws posenc::error like read_npy.
inline npy_info read_npy_info(const std::string& path) {
  detail::input_file f(path, "io::read_npy");
  const detail::npy_header h = detail::read_npy_header(f, path);
  return npy_info{h.type, h.descr, h.shape};
}

/// Reads a `.npy` file (format 1.0, 2.0 or 3.0; C order) into a tensor of Scalar
/// (float, double, std::int64_t, std::int32_t or std::uint8_t).
/// The file's dtype converts to Scalar as described in tensor.hpp: float dtypes become
/// float/double by value (f8 -> float rounds to nearest), integers convert only when exact.
/// Throws posenc::error naming the path for: a missing or unreadable file, bad magic, an
/// unsupported version, a header length past the end of the file, a malformed header dict,
/// missing or unexpected keys, fortran_order True, an unsupported dtype or byte order,
/// negative or overflowing extents, truncated or trailing data, a value that does not convert.
template <class Scalar>
tensor<Scalar> read_npy(const std::string& path) {
  static_assert(is_io_scalar_v<Scalar>,
                "posenc::io::read_npy: Scalar must be float, double, int64_t, int32_t or uint8_t");
  detail::input_file f(path, "io::read_npy");
  const detail::npy_header h = detail::read_npy_header(f, path);
  tensor<Scalar> t;
  t.shape = h.shape;
  t.data.resize(static_cast<std::size_t>(t.size()));
  f.read_elements(h.data_offset, h.type, t.size(), t.data.data(), "'" + h.descr + "'");
  return t;
}

/// Reads a rank-2 `.npy` as a row-major `[rows, cols]` matrix; a rank-1 file `[n]` is read
/// as `[1, n]`. When `expected_rows` / `expected_cols` are >= 0 they must match, else
/// posenc::error naming "rows" / "cols". Other ranks are an error naming "rank".
template <class Scalar>
matrix<Scalar> read_npy_matrix(const std::string& path, Index expected_rows = -1,
                               Index expected_cols = -1) {
  static_assert(
      is_io_scalar_v<Scalar>,
      "posenc::io::read_npy_matrix: Scalar must be float, double, int64_t, int32_t or uint8_t");
  detail::input_file f(path, "io::read_npy");
  const detail::npy_header h = detail::read_npy_header(f, path);
  const auto [rows, cols] = detail::matrix_extents(h.shape, expected_rows, expected_cols,
                                                   "io::read_npy_matrix", " (file " + path + ")");
  // Straight into the matrix: no intermediate tensor copy.
  matrix<Scalar> m(rows, cols);
  f.read_elements(h.data_offset, h.type, m.size(), m.data(), "'" + h.descr + "'");
  return m;
}

/// Writes a C-order `.npy` (format 1.0; 2.0 when the header exceeds 65535 bytes) of
/// `prod(shape)` elements at `data`, dtype from Scalar: float '<f4', double '<f8',
/// std::int64_t '<i8', std::int32_t '<i4', std::uint8_t '|u1'. An empty shape writes a
/// rank-0 array (one element). Byte-identical to numpy.save for the same array.
/// Throws posenc::error for a negative extent or a file that cannot be written.
template <class Scalar>
void write_npy(const std::string& path, const Scalar* data, const std::vector<Index>& shape) {
  static_assert(is_io_scalar_v<Scalar>,
                "posenc::io::write_npy: Scalar must be float, double, int64_t, int32_t or uint8_t");
  constexpr dtype t = dtype_of<Scalar>();
  const Index n = detail::checked_numel(shape, dtype_size(t), "io::write_npy", path);
  posenc::detail::require(data != nullptr || n == 0, "io::write_npy", "data", "nullptr",
                          "a non-empty array needs data");
  std::vector<unsigned char> bytes = detail::npy_preamble(detail::npy_descr(t), shape);
  detail::append_elements(bytes, data, n, t, "io::write_npy", "path", path);
  detail::write_file(path, bytes, "io::write_npy");
}

/// Writes a tensor as a C-order `.npy` (see the pointer overload).
template <class Scalar>
void write_npy(const std::string& path, const tensor<Scalar>& t) {
  posenc::detail::require(static_cast<Index>(t.data.size()) == t.size(), "io::write_npy",
                          "data.size()", t.data.size(), "must equal the product of the shape");
  write_npy(path, t.data.data(), t.shape);
}

/// Writes an Eigen matrix or expression as a `[rows, cols]` `.npy`, in logical row-major
/// order whatever its storage order (one token per row stays one row).
template <class Derived>
void write_npy(const std::string& path, const Eigen::DenseBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  const matrix<Scalar> rm = m;
  write_npy(path, rm.data(), std::vector<Index>{rm.rows(), rm.cols()});
}

}  // namespace io
}  // namespace posenc
