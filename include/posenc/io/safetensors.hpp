#pragma once
/// \file
/// `.safetensors` files (the format of Hugging Face checkpoints): read one named tensor,
/// list the names, write tables.
///
/// Format (github.com/huggingface/safetensors):
///
///     N: u64 LE | header: N bytes of UTF-8 JSON, space padded | byte buffer
///
///     header = {"wpe.weight": {"dtype": "F32", "shape": [1024, 768],
///                              "data_offsets": [begin, end]},      // into the byte buffer
///               ...,
///               "__metadata__": {"format": "pt"}}                 // optional, string -> string
///
/// Tensors are little-endian, C order, and tile the byte buffer exactly (sorted by offset,
/// no gap, no overlap, nothing after the last one). Supported dtypes: F16 BF16 F32 F64
/// I32 I64 U8 BOOL; the conversions to the requested Scalar are those of tensor.hpp.
///
/// Nothing in the file is trusted: the header length, the JSON, every shape and offset are
/// checked before any data is read, and only the requested tensor's bytes are read.

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "json.hpp"
#include "tensor.hpp"

namespace posenc {
namespace io {

/// One tensor as described by a safetensors header.
struct safetensors_info {
  std::string name;          ///< the header key (UTF-8)
  dtype type = dtype::f32;   ///< element type
  std::vector<Index> shape;  ///< extents, outermost first (empty: a scalar)
  std::uint64_t begin = 0;   ///< data_offsets[0], relative to the byte buffer
  std::uint64_t end = 0;     ///< data_offsets[1]
};

/// A validated safetensors header.
struct safetensors_header {
  std::vector<safetensors_info> tensors;  ///< in the order the header lists them
  std::vector<std::pair<std::string, std::string>> metadata;  ///< "__metadata__", if any
  std::uint64_t data_start = 0;  ///< file offset of the byte buffer (8 + N)
};

namespace detail {

/// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
inline bool valid_utf8(const std::string& s) noexcept {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned cp;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1Fu;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0Fu;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07u;
    else
      return false;
    if (i + static_cast<std::size_t>(len) > n) return false;
    for (int k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3Fu);
    }
    const unsigned min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<std::size_t>(len);
  }
  return true;
}

/// The safetensors dtype string of `t` ("F16", "BF16", "F32", ...).
inline const char* safetensors_dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
      return "F16";
    case dtype::bf16:
      return "BF16";
    case dtype::f32:
      return "F32";
    case dtype::f64:
      return "F64";
    case dtype::i32:
      return "I32";
    case dtype::i64:
      return "I64";
    case dtype::u8:
      return "U8";
    case dtype::boolean:
      return "BOOL";
  }
  return "?";
}

/// A non-negative JSON integer that fits in int64, else an error naming `what`.
inline std::uint64_t json_uint(const json_value& v, const std::string& what,
                               const std::string& path) {
  const auto bad = [&] {
    fail("io::safetensors", "path", path,
         what + " must be a non-negative integer below 2^63" +
             (v.k == json_value::kind::number ? " (got " + v.text + ")" : ""));
  };
  if (v.k != json_value::kind::number || v.text.empty() || v.text[0] == '-') bad();
  std::uint64_t x = 0;
  for (char c : v.text) {
    if (c < '0' || c > '9') bad();
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (x > (static_cast<std::uint64_t>(INT64_MAX) - d) / 10) bad();
    x = x * 10 + d;
  }
  return x;
}

/// JSON text of a string, with the escapes JSON requires.
inline std::string json_quote(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (u < 0x20) {
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else
      out += c;
  }
  return out + "\"";
}

}  // namespace detail

/// Reads and validates the header of a `.safetensors` file: the length prefix against the
/// file size (and a 100 MB cap), UTF-8, the JSON (strict; duplicate keys are errors), every
/// entry's keys (exactly dtype, shape, data_offsets), dtype, shape (non-negative, no
/// overflow), offsets (begin <= end, end - begin = prod(shape) * dtype size), and that the
/// tensors tile the byte buffer with no gap, overlap or trailing bytes. `__metadata__`, if
/// present, must map strings to strings. Throws posenc::error naming the path and the defect.
inline safetensors_header read_safetensors_header(const std::string& path) {
  using posenc::detail::fail;
  const char* where = "io::safetensors";
  detail::input_file f(path, where);
  if (f.size() < 8)
    fail(
        where, "path", path,
        "truncated: " + std::to_string(f.size()) + " bytes, shorter than the 8-byte header length");
  unsigned char len_raw[8];
  f.read(0, len_raw, 8, "the header length");
  const std::uint64_t n = detail::load_le(len_raw, 8);
  if (n > f.size() - 8)
    fail(where, "path", path,
         "header length " + std::to_string(n) + " runs past the end of the file (" +
             std::to_string(f.size()) + " bytes)");
  if (n > 100000000u)
    fail(where, "path", path, "header length " + std::to_string(n) + " exceeds 100 MB");
  if (n < 2)
    fail(where, "path", path,
         "header length " + std::to_string(n) + " is too short for a JSON object");
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(8, text.data(), text.size(), "the header");
  if (!detail::valid_utf8(text)) fail(where, "path", path, "malformed header: not valid UTF-8");
  if (text[0] != '{') fail(where, "path", path, "malformed header: must start with '{'");
  const detail::json_value root =
      detail::json_parser(text, [&](const std::string& what, std::size_t at) {
        fail(where, "path", path,
             "malformed header: " + what + " (at header byte " + std::to_string(at) + ")");
      }).parse_document("unexpected characters after the JSON header");

  if (root.k != detail::json_value::kind::object)
    fail(where, "path", path, "malformed header: not a JSON object");
  safetensors_header h;
  h.data_start = 8 + n;
  const std::uint64_t buffer_size = f.size() - h.data_start;
  for (std::size_t k = 0; k < root.keys.size(); ++k) {
    const std::string& name = root.keys[k];
    const detail::json_value& e = root.items[k];
    const std::string label = "tensor \"" + name + "\"";
    if (name == "__metadata__") {
      if (e.k != detail::json_value::kind::object)
        fail(where, "path", path, "__metadata__ must be an object of strings");
      for (std::size_t m = 0; m < e.keys.size(); ++m) {
        if (e.items[m].k != detail::json_value::kind::string)
          fail(where, "path", path, "__metadata__ value of \"" + e.keys[m] + "\" must be a string");
        h.metadata.emplace_back(e.keys[m], e.items[m].text);
      }
      continue;
    }
    if (e.k != detail::json_value::kind::object)
      fail(where, "path", path, label + ": entry must be an object");
    const detail::json_value* jd = nullptr;
    const detail::json_value* js = nullptr;
    const detail::json_value* jo = nullptr;
    for (std::size_t m = 0; m < e.keys.size(); ++m) {
      if (e.keys[m] == "dtype")
        jd = &e.items[m];
      else if (e.keys[m] == "shape")
        js = &e.items[m];
      else if (e.keys[m] == "data_offsets")
        jo = &e.items[m];
      else
        fail(where, "path", path, label + ": unexpected key \"" + e.keys[m] + "\"");
    }
    if (!jd) fail(where, "path", path, label + ": missing \"dtype\"");
    if (!js) fail(where, "path", path, label + ": missing \"shape\"");
    if (!jo) fail(where, "path", path, label + ": missing \"data_offsets\"");
    safetensors_info info;
    info.name = name;
    if (jd->k != detail::json_value::kind::string)
      fail(where, "path", path, label + ": dtype must be a string");
    const std::string& d = jd->text;
    if (d == "F16")
      info.type = dtype::f16;
    else if (d == "BF16")
      info.type = dtype::bf16;
    else if (d == "F32")
      info.type = dtype::f32;
    else if (d == "F64")
      info.type = dtype::f64;
    else if (d == "I32")
      info.type = dtype::i32;
    else if (d == "I64")
      info.type = dtype::i64;
    else if (d == "U8")
      info.type = dtype::u8;
    else if (d == "BOOL")
      info.type = dtype::boolean;
    else
      fail(where, "path", path,
           label + ": unsupported dtype \"" + d +
               "\" (supported: F16 BF16 F32 F64 I32 I64 U8 BOOL)");
    if (js->k != detail::json_value::kind::array)
      fail(where, "path", path, label + ": shape must be an array");
    if (js->items.size() > 64) fail(where, "path", path, label + ": shape has more than 64 axes");
    for (std::size_t a = 0; a < js->items.size(); ++a)
      info.shape.push_back(static_cast<Index>(
          detail::json_uint(js->items[a], label + ": shape[" + std::to_string(a) + "]", path)));
    const Index numel = detail::checked_numel(info.shape, dtype_size(info.type), where, path);
    if (jo->k != detail::json_value::kind::array || jo->items.size() != 2)
      fail(where, "path", path, label + ": data_offsets must be an array of two integers");
    info.begin = detail::json_uint(jo->items[0], label + ": data_offsets[0]", path);
    info.end = detail::json_uint(jo->items[1], label + ": data_offsets[1]", path);
    if (info.begin > info.end)
      fail(where, "path", path,
           label + ": data_offsets [" + std::to_string(info.begin) + ", " +
               std::to_string(info.end) + "] are reversed");
    if (info.end > buffer_size)
      fail(where, "path", path,
           label + ": data_offsets end " + std::to_string(info.end) +
               " is past the end of the data (" + std::to_string(buffer_size) +
               " bytes): truncated file?");
    const std::uint64_t need = static_cast<std::uint64_t>(numel) * dtype_size(info.type);
    if (info.end - info.begin != need)
      fail(where, "path", path,
           label + ": data_offsets span " + std::to_string(info.end - info.begin) +
               " bytes but shape and dtype " + d + " need " + std::to_string(need));
    h.tensors.push_back(std::move(info));
  }
  // The tensors must tile the buffer: sorted by offsets, each starting where the previous
  // one ended, the last ending at the end of the file.
  std::vector<const safetensors_info*> order;
  for (const auto& t : h.tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const safetensors_info* a, const safetensors_info* b) {
                     return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
                   });
  std::uint64_t at = 0;
  const safetensors_info* prev = nullptr;
  for (const safetensors_info* t : order) {
    if (t->begin < at)
      fail(where, "path", path,
           "tensor \"" + t->name + "\" data_offsets [" + std::to_string(t->begin) + ", " +
               std::to_string(t->end) + "] overlap tensor \"" + prev->name + "\"");
    if (t->begin > at)
      fail(where, "path", path,
           "gap in the data before tensor \"" + t->name + "\" (bytes [" + std::to_string(at) +
               ", " + std::to_string(t->begin) + ") belong to no tensor)");
    at = t->end;
    prev = t;
  }
  if (at != buffer_size)
    fail(where, "path", path,
         std::to_string(buffer_size - at) + " trailing bytes after the last tensor's data");
  return h;
}

/// Names of all tensors in a `.safetensors` file, in the order the header lists them
/// (`__metadata__` excluded). Validates the whole header (see read_safetensors_header).
inline std::vector<std::string> safetensors_names(const std::string& path) {
  std::vector<std::string> names;
  for (const auto& t : read_safetensors_header(path).tensors) names.push_back(t.name);
  return names;
}

namespace detail {

/// The header entry of tensor `name`, or posenc::error "name = '...'" listing a few names.
inline const safetensors_info& find_tensor(const safetensors_header& h, const std::string& path,
                                           const std::string& name, const char* where) {
  const auto it = std::find_if(h.tensors.begin(), h.tensors.end(),
                               [&](const safetensors_info& t) { return t.name == name; });
  if (it == h.tensors.end()) {
    std::string have;
    for (std::size_t k = 0; k < h.tensors.size() && k < 8; ++k)
      have += (k ? ", " : "") + ("\"" + h.tensors[k].name + "\"");
    if (h.tensors.size() > 8) have += ", ...";
    posenc::detail::fail(where, "name", "'" + name + "'",
                         "no such tensor in " + path + " (it has " +
                             std::to_string(h.tensors.size()) +
                             (h.tensors.empty() ? "" : ": " + have) + ")");
  }
  return *it;
}

/// Reads the data of `info` into `dst` (info's element count), converting to Scalar.
template <class Scalar>
void read_tensor_data(const std::string& path, const safetensors_header& h,
                      const safetensors_info& info, Index n, Scalar* dst) {
  input_file f(path, "io::read_safetensors");
  f.read_elements(
      h.data_start + info.begin, info.type, n, dst,
      std::string(safetensors_dtype_name(info.type)) + " (tensor \"" + info.name + "\")");
}

}  // namespace detail

/// Reads the tensor `name` from a `.safetensors` file, converted to Scalar (float, double,
/// std::int64_t, std::int32_t or std::uint8_t) by the rules of tensor.hpp: F16/BF16/F32/F64
/// to float/double by value; integers only when exact. Only that tensor's bytes are read.
/// Throws posenc::error for a missing name ("name = '...'") or any defect of the file.
template <class Scalar>
tensor<Scalar> read_safetensors(const std::string& path, const std::string& name) {
  static_assert(
      is_io_scalar_v<Scalar>,
      "posenc::io::read_safetensors: Scalar must be float, double, int64_t, int32_t or uint8_t");
  const safetensors_header h = read_safetensors_header(path);
  const safetensors_info& info = detail::find_tensor(h, path, name, "io::read_safetensors");
  tensor<Scalar> t;
  t.shape = info.shape;
  t.data.resize(static_cast<std::size_t>(t.size()));
  detail::read_tensor_data(path, h, info, t.size(), t.data.data());
  return t;
}

/// Reads tensor `name` as a row-major matrix: rank 2 `[rows, cols]`, rank 1 `[n]` as `[1, n]`.
/// When `expected_rows` / `expected_cols` are >= 0 they must match, else posenc::error
/// naming "rows" / "cols"; other ranks are an error naming "rank".
template <class Scalar>
matrix<Scalar> read_safetensors_matrix(const std::string& path, const std::string& name,
                                       Index expected_rows = -1, Index expected_cols = -1) {
  static_assert(is_io_scalar_v<Scalar>,
                "posenc::io::read_safetensors_matrix: Scalar must be float, double, int64_t, "
                "int32_t or uint8_t");
  const safetensors_header h = read_safetensors_header(path);
  const safetensors_info& info = detail::find_tensor(h, path, name, "io::read_safetensors");
  const auto [rows, cols] = detail::matrix_extents(info.shape, expected_rows, expected_cols,
                                                   "io::read_safetensors_matrix",
                                                   " (tensor \"" + name + "\" in " + path + ")");
  matrix<Scalar> m(rows, cols);
  detail::read_tensor_data(path, h, info, m.size(), m.data());
  return m;
}

/// One named tensor to write, already encoded to its file dtype.
///
///     io::write_safetensors("table.safetensors",
///                           {{"wpe.weight", table},                  // an Eigen matrix, or
///                            {"freqs", freqs_tensor, io::dtype::bf16}});  // a tensor, as BF16
///
/// Any dtype of io::dtype can be requested; float Scalars round to nearest into F16/BF16/F32,
/// integer dtypes accept only exactly representable values (else posenc::error naming the
/// entry and element).
class safetensors_entry {
 public:
  /// A tensor, stored as `as` (default: the dtype of Scalar).
  template <class Scalar>
  safetensors_entry(std::string name, const tensor<Scalar>& t, dtype as = dtype_of<Scalar>())
      : name_(std::move(name)), type_(as), shape_(t.shape) {
    const Index n = detail::checked_numel(shape_, dtype_size(as), "io::safetensors_entry",
                                          "'" + name_ + "'", "name");
    posenc::detail::require(static_cast<Index>(t.data.size()) == n, "io::safetensors_entry",
                            "data.size()", t.data.size(),
                            "must equal the product of the shape of \"" + name_ + "\"");
    detail::append_elements(bytes_, t.data.data(), n, as, "io::safetensors_entry", "name",
                            "'" + name_ + "'");
  }

  /// An Eigen matrix or expression as `[rows, cols]` in logical row-major order, stored as
  /// `as` (default: the dtype of its Scalar).
  template <class Derived>
  safetensors_entry(std::string name, const Eigen::DenseBase<Derived>& m,
                    dtype as = dtype_of<typename Derived::Scalar>())
      : name_(std::move(name)), type_(as), shape_{m.rows(), m.cols()} {
    const matrix<typename Derived::Scalar> rm = m;
    detail::append_elements(bytes_, rm.data(), rm.size(), as, "io::safetensors_entry", "name",
                            "'" + name_ + "'");
  }

  const std::string& name() const noexcept { return name_; }           ///< the header key
  dtype type() const noexcept { return type_; }                        ///< the file dtype
  const std::vector<Index>& shape() const noexcept { return shape_; }  ///< extents
  const std::vector<unsigned char>& bytes() const noexcept {
    return bytes_;
  }  ///< little-endian data

 private:
  std::string name_;
  dtype type_;
  std::vector<Index> shape_;
  std::vector<unsigned char> bytes_;
};

/// Writes a `.safetensors` file: the entries in the given order (contiguous, little-endian),
/// an optional `__metadata__` of string pairs, the JSON header space-padded to a multiple of
/// 8 bytes. Names must be unique, non-empty, valid UTF-8 and not "__metadata__"; metadata
/// keys and values must be valid UTF-8. Throws posenc::error otherwise or when the file
/// cannot be written.
inline void write_safetensors(const std::string& path,
                              const std::vector<safetensors_entry>& entries,
                              const std::map<std::string, std::string>& metadata = {}) {
  using posenc::detail::fail;
  const char* where = "io::write_safetensors";
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& kv : metadata) {
      if (!detail::valid_utf8(kv.first) || !detail::valid_utf8(kv.second))
        fail(where, "metadata key", "'" + kv.first + "'", "keys and values must be valid UTF-8");
      if (!first) json += ",";
      first = false;
      json += detail::json_quote(kv.first) + ":" + detail::json_quote(kv.second);
    }
    json += "}";
    first = false;
  }
  std::uint64_t offset = 0;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const safetensors_entry& e = entries[k];
    if (e.name().empty()) fail(where, "name", "''", "tensor names must not be empty");
    if (e.name() == "__metadata__")
      fail(where, "name", "'__metadata__'", "is reserved for the metadata");
    if (!detail::valid_utf8(e.name()))
      fail(where, "name", "'" + e.name() + "'", "must be valid UTF-8");
    for (std::size_t j = 0; j < k; ++j)
      if (entries[j].name() == e.name()) fail(where, "name", "'" + e.name() + "'", "appears twice");
    if (!first) json += ",";
    first = false;
    json += detail::json_quote(e.name()) + ":{\"dtype\":\"" +
            detail::safetensors_dtype_name(e.type()) + "\",\"shape\":[";
    for (std::size_t a = 0; a < e.shape().size(); ++a)
      json += (a ? "," : "") + std::to_string(e.shape()[a]);
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," +
            std::to_string(offset + e.bytes().size()) + "]}";
    offset += e.bytes().size();
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::vector<unsigned char> bytes(8);
  detail::store_le(bytes.data(), json.size(), 8);
  bytes.insert(bytes.end(), json.begin(), json.end());
  for (const auto& e : entries) bytes.insert(bytes.end(), e.bytes().begin(), e.bytes().end());
  detail::write_file(path, bytes, where);
}

}  // namespace io
}  // namespace posenc
