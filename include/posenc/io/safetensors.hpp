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
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
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

/// The non-negative JSON integer below 2^63 at the parser's cursor (consumed), else
/// posenc::error "<label>: <field>[<index>] must be a non-negative integer below 2^63
/// (got <text>)".
inline std::uint64_t json_uint(json_parser& p, const std::string& label, const char* field,
                               std::size_t index, const std::string& path) {
  const bool number = p.next_kind() == json_value::kind::number;
  const std::string_view text = number ? p.read_number() : std::string_view();
  const auto bad = [&] {
    fail("io::safetensors", "path", path,
         label + ": " + field + "[" + std::to_string(index) +
             "] must be a non-negative integer below 2^63" +
             (number ? " (got " + std::string(text) + ")" : ""));
  };
  if (!number || text.empty() || text[0] == '-') bad();
  std::uint64_t x = 0;
  for (char c : text) {
    if (c < '0' || c > '9') bad();
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (x > (static_cast<std::uint64_t>(INT64_MAX) - d) / 10) bad();
    x = x * 10 + d;
  }
  return x;
}

/// The number of elements of the array at the cursor, counted no further than `most + 1`
/// (nothing is stored); the cursor stays where it was.
inline std::size_t count_elements(json_parser& p, std::size_t most) {
  const std::size_t at = p.offset();
  std::size_t n = 0;
  if (p.enter_array()) do {
      p.skip_value();
      ++n;
    } while (n <= most && p.next_element());
  p.seek(at);
  return n;
}

/// The entry of tensor `name` at the cursor (the value of its header key), checked as
/// read_safetensors_header says; the cursor is left after it. The keys are checked first
/// (unknown ones, then missing ones), then dtype, shape and data_offsets in that order,
/// each array's length before any of its elements is stored.
inline safetensors_info read_entry(json_parser& p, std::string name, std::uint64_t buffer_size,
                                   const std::string& path) {
  using kind = json_value::kind;
  const std::string label = "tensor \"" + name + "\"";
  const auto bad = [&](const std::string& what) {
    fail("io::safetensors", "path", path, label + ": " + what);
  };
  if (p.next_kind() != kind::object) bad("entry must be an object");
  // Where each value starts: read once the set of keys is known to be right.
  constexpr std::size_t none = std::string_view::npos;
  std::size_t at_dtype = none, at_shape = none, at_offsets = none;
  std::string scratch;
  if (p.enter_object()) do {
      const std::string_view key = p.read_key(scratch);
      if (key == "dtype")
        at_dtype = p.offset();
      else if (key == "shape")
        at_shape = p.offset();
      else if (key == "data_offsets")
        at_offsets = p.offset();
      else
        bad("unexpected key \"" + std::string(key) + "\"");
      p.skip_value();
    } while (p.next_member());
  const std::size_t end = p.offset();
  if (at_dtype == none) bad("missing \"dtype\"");
  if (at_shape == none) bad("missing \"shape\"");
  if (at_offsets == none) bad("missing \"data_offsets\"");

  safetensors_info info;
  info.name = std::move(name);
  p.seek(at_dtype);
  if (p.next_kind() != kind::string) bad("dtype must be a string");
  const std::string_view d = p.read_string(scratch);
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
    bad("unsupported dtype \"" + std::string(d) +
        "\" (supported: F16 BF16 F32 F64 I32 I64 U8 BOOL)");

  p.seek(at_shape);
  if (p.next_kind() != kind::array) bad("shape must be an array");
  if (count_elements(p, max_rank) > max_rank) bad("shape has more than 64 axes");
  if (p.enter_array()) do {
      const std::uint64_t e = json_uint(p, label, "shape", info.shape.size(), path);
      if (e > static_cast<std::uint64_t>(std::numeric_limits<Index>::max()))
        bad("shape[" + std::to_string(info.shape.size()) + "] = " + std::to_string(e) +
            " does not fit Index");
      info.shape.push_back(static_cast<Index>(e));
    } while (p.next_element());
  const Index numel = checked_numel(info.shape, dtype_size(info.type), "io::safetensors", path,
                                    "path", label + ": ");

  p.seek(at_offsets);
  if (p.next_kind() != kind::array || count_elements(p, 2) != 2)
    bad("data_offsets must be an array of two integers");
  p.enter_array();
  info.begin = json_uint(p, label, "data_offsets", 0, path);
  p.next_element();
  info.end = json_uint(p, label, "data_offsets", 1, path);
  if (info.begin > info.end)
    bad("data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
        "] are reversed");
  if (info.end > buffer_size)
    bad("data_offsets end " + std::to_string(info.end) + " is past the end of the data (" +
        std::to_string(buffer_size) + " bytes): truncated file?");
  const std::uint64_t need = static_cast<std::uint64_t>(numel) * dtype_size(info.type);
  if (info.end - info.begin != need)
    bad("data_offsets span " + std::to_string(info.end - info.begin) +
        " bytes but shape and dtype " + safetensors_dtype_name(info.type) + " need " +
        std::to_string(need));
  p.seek(end);
  return info;
}

/// The `__metadata__` object at the cursor into `out` (string pairs in document order).
inline void read_metadata(json_parser& p, std::vector<std::pair<std::string, std::string>>& out,
                          const std::string& path) {
  using kind = json_value::kind;
  if (p.next_kind() != kind::object)
    fail("io::safetensors", "path", path, "__metadata__ must be an object of strings");
  std::string key_scratch, value_scratch;
  if (p.enter_object()) do {
      std::string key(p.read_key(key_scratch));
      if (p.next_kind() != kind::string)
        fail("io::safetensors", "path", path,
             "__metadata__ value of \"" + key + "\" must be a string");
      out.emplace_back(std::move(key), std::string(p.read_string(value_scratch)));
    } while (p.next_member());
}

/// The header of the open file `f` (see read_safetensors_header): the one header reader
/// behind every reading entry point. Every size that decides an allocation is checked
/// before it: the header length against the file size and the 100 MB cap before the text
/// is read, the JSON validated (no tree is built: the entries are read in place), each
/// shape's length against 64 axes before its extents are stored.
inline safetensors_header parse_safetensors_header(input_file& f, const std::string& path) {
  const char* where = "io::safetensors";
  if (f.size() < 8)
    fail(
        where, "path", path,
        "truncated: " + std::to_string(f.size()) + " bytes, shorter than the 8-byte header length");
  unsigned char len_raw[8];
  f.read(0, len_raw, 8, "the header length");
  const std::uint64_t n = load_le(len_raw, 8);
  if (n > f.size() - 8)
    fail(where, "path", path,
         "header length " + std::to_string(n) + " runs past the end of the file (" +
             std::to_string(f.size()) + " bytes)");
  if (n > safetensors_max_header_bytes)
    fail(where, "path", path, "header length " + std::to_string(n) + " exceeds 100 MB");
  if (n < 2)
    fail(where, "path", path,
         "header length " + std::to_string(n) + " is too short for a JSON object");
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(8, text.data(), text.size(), "the header");
  if (!valid_utf8(text)) fail(where, "path", path, "malformed header: not valid UTF-8");
  if (text[0] != '{') fail(where, "path", path, "malformed header: must start with '{'");
  json_parser p(text, [&](const std::string& what, std::size_t at) {
    fail(where, "path", path,
         "malformed header: " + what + " (at header byte " + std::to_string(at) + ")");
  });
  p.validate_document("unexpected characters after the JSON header");

  safetensors_header h;
  h.data_start = 8 + n;
  const std::uint64_t buffer_size = f.size() - h.data_start;
  p.seek(0);
  std::string scratch;
  if (p.enter_object()) do {
      std::string name(p.read_key(scratch));
      if (name == "__metadata__")
        read_metadata(p, h.metadata, path);
      else
        h.tensors.push_back(read_entry(p, std::move(name), buffer_size, path));
    } while (p.next_member());

  // The tensors must tile the buffer: sorted by offsets, each starting where the previous
  // one ended, the last ending at the end of the file.
  std::vector<const safetensors_info*> order;
  order.reserve(h.tensors.size());
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

}  // namespace detail

/// Reads and validates the header of a `.safetensors` file: the length prefix against the
/// file size (and a 100 MB cap), UTF-8, the JSON (strict; duplicate keys are errors), every
/// entry's keys (exactly dtype, shape, data_offsets), dtype, shape (at most 64 axes, the
/// extent rule of tensor.hpp's checked_numel), offsets (begin <= end, end - begin =
/// prod(shape) * dtype size), and that the tensors tile the byte buffer with no gap, overlap
/// or trailing bytes. `__metadata__`, if present, must map strings to strings. Throws
/// posenc::error naming the path and the defect (and the tensor, for an entry's defect).
/// O(n log n) in the number of entries; to read several tensors, open a safetensors_file.
inline safetensors_header read_safetensors_header(const std::string& path) {
  detail::input_file f(path, "io::safetensors");
  return detail::parse_safetensors_header(f, path);
}

/// Names of all tensors in a `.safetensors` file, in the order the header lists them
/// (`__metadata__` excluded). Validates the whole header (see read_safetensors_header).
inline std::vector<std::string> safetensors_names(const std::string& path) {
  std::vector<std::string> names;
  safetensors_header h = read_safetensors_header(path);
  names.reserve(h.tensors.size());
  for (auto& t : h.tensors) names.push_back(std::move(t.name));
  return names;
}

/// An open `.safetensors` file whose header was read and validated once: tensors are looked
/// up by name in O(log n) and read one at a time, each read touching only its own bytes.
///
///     io::safetensors_file f("model.safetensors");      // opens, validates the header
///     for (const std::string& name : f.names())         // header order
///       std::cout << name << " " << io::dtype_name(f.info(name).type) << "\n";
///     io::matrix<float> wpe = f.read_matrix<float>("wpe.weight", 1024, 768);
///     io::tensor<double> b = f.read<double>("h.0.attn.bias");
///
/// The header is validated exactly as read_safetensors_header does it, and the reads
/// convert exactly as read_safetensors does (tensor.hpp); the errors are the same (header
/// defects "io::safetensors", lookups and values "io::read_safetensors", matrix shapes
/// "io::read_safetensors_matrix"). The free functions are this class used once.
///
/// The file stays open for the object's lifetime (movable, not copyable). Reads move the
/// file position: use one object per thread; the const members may be shared.
class safetensors_file {
 public:
  /// Opens `path` and reads and validates its header (O(n log n) in the number of tensors);
  /// throws posenc::error for any defect, like read_safetensors_header.
  explicit safetensors_file(const std::string& path)
      : path_(path),
        file_(path_, "io::safetensors"),
        header_(detail::parse_safetensors_header(file_, path_)) {
    file_.set_where("io::read_safetensors");
    by_name_.resize(header_.tensors.size());
    for (std::size_t k = 0; k < by_name_.size(); ++k) by_name_[k] = k;
    std::sort(by_name_.begin(), by_name_.end(), [&](std::size_t a, std::size_t b) {
      return header_.tensors[a].name < header_.tensors[b].name;
    });
  }

  /// The path the file was opened with.
  const std::string& path() const noexcept { return path_; }

  /// The validated header: tensors in header order, metadata, data_start.
  const safetensors_header& header() const noexcept { return header_; }

  /// Number of tensors (`__metadata__` excluded).
  std::size_t size() const noexcept { return header_.tensors.size(); }

  /// Names of all tensors in header order (`__metadata__` excluded).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(header_.tensors.size());
    for (const auto& t : header_.tensors) out.push_back(t.name);
    return out;
  }

  /// True when the file has a tensor `name` (O(log n)).
  bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }

  /// Tensor `name`'s dtype, shape and data offsets (relative to header().data_start), in
  /// O(log n); posenc::error "io::read_safetensors: name = '<name>': no such tensor in
  /// <path> (it has N: "a", "b", ...)" when there is none.
  const safetensors_info& info(std::string_view name) const {
    const safetensors_info* t = find(name);
    if (t == nullptr) {
      std::string have;
      for (std::size_t k = 0; k < header_.tensors.size() && k < 8; ++k)
        have += (k ? ", " : "") + ("\"" + header_.tensors[k].name + "\"");
      if (header_.tensors.size() > 8) have += ", ...";
      posenc::detail::fail("io::read_safetensors", "name", "'" + std::string(name) + "'",
                           "no such tensor in " + path_ + " (it has " +
                               std::to_string(header_.tensors.size()) +
                               (header_.tensors.empty() ? "" : ": " + have) + ")");
    }
    return *t;
  }

  /// Tensor `name` converted to Scalar (float, double, std::int64_t, std::int32_t or
  /// std::uint8_t) by the rules of tensor.hpp; reads only that tensor's bytes.
  template <class Scalar>
  tensor<Scalar> read(std::string_view name) {
    static_assert(is_io_scalar_v<Scalar>,
                  "posenc::io::safetensors_file::read: Scalar must be float, double, int64_t, "
                  "int32_t or uint8_t");
    const safetensors_info& t = info(name);
    tensor<Scalar> out;
    out.shape = t.shape;
    out.data.resize(static_cast<std::size_t>(out.size()));
    read_data(t, out.size(), out.data.data());
    return out;
  }

  /// Tensor `name` as a row-major matrix: rank 2 `[rows, cols]`, rank 1 `[n]` as `[1, n]`.
  /// When `expected_rows` / `expected_cols` are >= 0 they must match, else posenc::error
  /// naming "rows" / "cols"; other ranks are an error naming "rank".
  template <class Scalar>
  matrix<Scalar> read_matrix(std::string_view name, Index expected_rows = -1,
                             Index expected_cols = -1) {
    static_assert(is_io_scalar_v<Scalar>,
                  "posenc::io::safetensors_file::read_matrix: Scalar must be float, double, "
                  "int64_t, int32_t or uint8_t");
    const safetensors_info& t = info(name);
    const auto [rows, cols] =
        detail::matrix_extents(t.shape, expected_rows, expected_cols, "io::read_safetensors_matrix",
                               " (tensor \"" + t.name + "\" in " + path_ + ")");
    matrix<Scalar> m(rows, cols);
    read_data(t, m.size(), m.data());
    return m;
  }

 private:
  const safetensors_info* find(std::string_view name) const noexcept {
    const auto it = std::lower_bound(
        by_name_.begin(), by_name_.end(), name,
        [&](std::size_t k, std::string_view n) { return header_.tensors[k].name < n; });
    if (it == by_name_.end() || header_.tensors[*it].name != name) return nullptr;
    return &header_.tensors[*it];
  }

  template <class Scalar>
  void read_data(const safetensors_info& t, Index n, Scalar* dst) {
    file_.read_elements(
        header_.data_start + t.begin, t.type, n, dst,
        std::string(detail::safetensors_dtype_name(t.type)) + " (tensor \"" + t.name + "\")");
  }

  std::string path_;
  detail::input_file file_;
  safetensors_header header_;
  std::vector<std::size_t> by_name_;  ///< indices into header_.tensors, sorted by name
};

/// Reads the tensor `name` from a `.safetensors` file, converted to Scalar (float, double,
/// std::int64_t, std::int32_t or std::uint8_t) by the rules of tensor.hpp: F16/BF16/F32/F64
/// to float/double by value; integers only when exact. Only that tensor's bytes are read.
/// Throws posenc::error for a missing name ("name = '...'") or any defect of the file.
/// Each call reads the whole header: for several tensors of one file, use safetensors_file.
template <class Scalar>
tensor<Scalar> read_safetensors(const std::string& path, const std::string& name) {
  static_assert(
      is_io_scalar_v<Scalar>,
      "posenc::io::read_safetensors: Scalar must be float, double, int64_t, int32_t or uint8_t");
  return safetensors_file(path).read<Scalar>(name);
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
  return safetensors_file(path).read_matrix<Scalar>(name, expected_rows, expected_cols);
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
/// keys and values must be valid UTF-8; the header must fit the readers' 100 MB
/// (safetensors_max_header_bytes). Throws posenc::error otherwise or when the file cannot
/// be written. O(n log n) in the number of entries.
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
  std::set<std::string_view> names;  // O(n log n) for n entries
  for (const safetensors_entry& e : entries) {
    if (e.name().empty()) fail(where, "name", "''", "tensor names must not be empty");
    if (e.name() == "__metadata__")
      fail(where, "name", "'__metadata__'", "is reserved for the metadata");
    if (!detail::valid_utf8(e.name()))
      fail(where, "name", "'" + e.name() + "'", "must be valid UTF-8");
    if (!names.insert(e.name()).second) fail(where, "name", "'" + e.name() + "'", "appears twice");
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
  if (json.size() > safetensors_max_header_bytes)
    fail(where, "path", path,
         "the header would be " + std::to_string(json.size()) +
             " bytes, over the 100 MB the readers accept (io::safetensors_max_header_bytes)");
  // Sized once and filled in place: growing an 8-byte vector by insert() trips g++ 12's
  // -Warray-bounds at -O2 -std=c++20 (a false positive in its inlined memmove).
  std::vector<unsigned char> bytes(8 + json.size() + static_cast<std::size_t>(offset));
  detail::store_le(bytes.data(), json.size(), 8);
  unsigned char* out = std::copy(json.begin(), json.end(), bytes.data() + 8);
  for (const auto& e : entries) out = std::copy(e.bytes().begin(), e.bytes().end(), out);
  detail::write_file(path, bytes, where);
}

}  // namespace io
}  // namespace posenc
