#pragma once
/// \file
/// GGUF files (the checkpoint format of llama.cpp / ggml): the metadata key/values and the
/// tensor listing, and the data of tensors stored unquantised.
///
/// Format (github.com/ggml-org/ggml, docs/gguf.md), versions 2 and 3 (the same layout;
/// version 1 used 32-bit counts and is refused), all integers little-endian:
///
///     "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
///     metadata_kv_count x { string key | u32 value_type | value }
///     tensor_count x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type |
///                      u64 offset }
///     padding to general.alignment (default 32) | tensor data
///
///     string = u64 length | bytes (UTF-8, no terminator)
///     value  = u8 i8 u16 i16 u32 i32 f32 bool(u8) string f64 u64 i64, or
///              array = u32 element_type | u64 count | count values (arrays may nest)
///
/// dims are ggml's ne[]: ne[0] is the fastest-varying axis (a Llama token_embd is
/// `[n_embd, n_vocab]` in the file, `[n_vocab, n_embd]` as a row-major matrix; shape()
/// gives the latter). Offsets are relative to the data start and multiples of the alignment.
///
/// Nothing in the file is trusted: every count and length is checked against the bytes
/// left before anything is allocated, the metadata and tensor infos may span at most
/// gguf_max_metadata_bytes (they are read in chunks, the tensor data never), arrays nest at
/// most 64 deep, and every tensor of a known type must lie inside the file. Memory stays
/// within about 13 times the metadata's bytes (the worst case, arrays of empty arrays: 12
/// bytes of file per 152-byte gguf_value); scalar arrays take their file size, a string 32
/// bytes plus its text.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "tensor.hpp"

namespace posenc {
namespace io {

/// The largest span of the header, metadata and tensor infos the reader accepts: 64 MiB.
/// Real files need a few MB (a 256k-token vocabulary with its scores is about 6 MB).
inline constexpr std::uint64_t gguf_max_metadata_bytes = std::uint64_t{1} << 26;

/// Deepest nesting of arrays in a metadata value.
inline constexpr int gguf_max_array_depth = 64;

/// GGUF metadata value types (the numbers are the file's).
enum class gguf_type : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

/// "uint8", "int8", ..., "float64"; "?" for a number that is not a type.
inline const char* gguf_type_name(gguf_type t) noexcept {
  switch (t) {
    case gguf_type::uint8:
      return "uint8";
    case gguf_type::int8:
      return "int8";
    case gguf_type::uint16:
      return "uint16";
    case gguf_type::int16:
      return "int16";
    case gguf_type::uint32:
      return "uint32";
    case gguf_type::int32:
      return "int32";
    case gguf_type::float32:
      return "float32";
    case gguf_type::boolean:
      return "bool";
    case gguf_type::string:
      return "string";
    case gguf_type::array:
      return "array";
    case gguf_type::uint64:
      return "uint64";
    case gguf_type::int64:
      return "int64";
    case gguf_type::float64:
      return "float64";
  }
  return "?";
}

/// One metadata value. Scalars are held decoded (`u` for unsigned integers and bool, `i`
/// for signed integers, `f` for floats, float32 widened exactly); arrays keep their
/// elements compact: scalars as the file's little-endian bytes (element() decodes one),
/// strings and nested arrays as vectors.
struct gguf_value {
  gguf_type type = gguf_type::uint8;
  std::uint64_t u = 0;  ///< uint8, uint16, uint32, uint64, bool (0 or 1)
  std::int64_t i = 0;   ///< int8, int16, int32, int64
  double f = 0.0;       ///< float32, float64
  std::string s;        ///< string

  gguf_type element_type = gguf_type::uint8;  ///< array: the elements' type
  std::uint64_t count = 0;                    ///< array: number of elements
  std::vector<unsigned char> raw;             ///< array of scalars: count x element size
  std::vector<std::string> strings;           ///< array of strings
  std::vector<gguf_value> arrays;             ///< array of arrays

  /// True for the eight integer types (not bool).
  bool is_integer() const noexcept {
    return type == gguf_type::uint8 || type == gguf_type::uint16 || type == gguf_type::uint32 ||
           type == gguf_type::uint64 || type == gguf_type::int8 || type == gguf_type::int16 ||
           type == gguf_type::int32 || type == gguf_type::int64;
  }
  /// True for the integer and float types.
  bool is_number() const noexcept {
    return is_integer() || type == gguf_type::float32 || type == gguf_type::float64;
  }
  /// A number as double (integers above 2^53 round).
  double as_double() const noexcept {
    if (type == gguf_type::float32 || type == gguf_type::float64) return f;
    if (is_signed()) return static_cast<double>(i);
    return static_cast<double>(u);
  }

  /// Element `k` (< count) of an array, as a value of its own.
  gguf_value element(std::uint64_t k) const;

 private:
  bool is_signed() const noexcept {
    return type == gguf_type::int8 || type == gguf_type::int16 || type == gguf_type::int32 ||
           type == gguf_type::int64;
  }
};

/// A value as error messages show it: a number's digits, a quoted string (its first 64
/// bytes), true / false, "<array of T, n elements>".
inline std::string gguf_value_text(const gguf_value& v) {
  switch (v.type) {
    case gguf_type::string:
      return "\"" + v.s.substr(0, 64) + (v.s.size() > 64 ? "...\"" : "\"");
    case gguf_type::boolean:
      return v.u != 0 ? "true" : "false";
    case gguf_type::array:
      return std::string("<array of ") + gguf_type_name(v.element_type) + ", " +
             std::to_string(v.count) + " elements>";
    case gguf_type::float32:
    case gguf_type::float64: {
      std::ostringstream os;
      os.precision(17);
      os << v.f;
      return os.str();
    }
    case gguf_type::int8:
    case gguf_type::int16:
    case gguf_type::int32:
    case gguf_type::int64:
      return std::to_string(v.i);
    default:
      return std::to_string(v.u);
  }
}

/// One metadata key/value pair.
struct gguf_kv {
  std::string key;
  gguf_value value;
};

/// ggml tensor types with their block size (elements) and block bytes; 0 bytes: a type
/// this reader does not know (its tensors are listed, with no byte size).
struct gguf_ggml_type_info {
  const char* name;
  std::uint64_t block_size;
  std::uint64_t block_bytes;
};

/// Name, block size and block bytes of ggml type `t` (ggml.h's enum ggml_type; removed
/// and unknown numbers give name "?" and 0 bytes).
inline gguf_ggml_type_info gguf_ggml_type(std::uint32_t t) noexcept {
  static constexpr gguf_ggml_type_info table[] = {
      {"F32", 1, 4},        {"F16", 1, 2},       {"Q4_0", 32, 18},     {"Q4_1", 32, 20},
      {"?", 0, 0},          {"?", 0, 0},         {"Q5_0", 32, 22},     {"Q5_1", 32, 24},
      {"Q8_0", 32, 34},     {"Q8_1", 32, 36},    {"Q2_K", 256, 84},    {"Q3_K", 256, 110},
      {"Q4_K", 256, 144},   {"Q5_K", 256, 176},  {"Q6_K", 256, 210},   {"Q8_K", 256, 292},
      {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74}, {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
      {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110}, {"IQ2_S", 256, 82},   {"IQ4_XS", 256, 136},
      {"I8", 1, 1},         {"I16", 1, 2},       {"I32", 1, 4},        {"I64", 1, 8},
      {"F64", 1, 8},        {"IQ1_M", 256, 56},  {"BF16", 1, 2},       {"?", 0, 0},
      {"?", 0, 0},          {"?", 0, 0},         {"TQ1_0", 256, 54},   {"TQ2_0", 256, 66},
      {"?", 0, 0},          {"?", 0, 0},         {"?", 0, 0},          {"MXFP4", 32, 17},
  };
  if (t >= sizeof(table) / sizeof(table[0])) return {"?", 0, 0};
  return table[t];
}

/// One tensor as the GGUF header describes it.
struct gguf_tensor_info {
  std::string name;
  std::vector<std::uint64_t> dims;     ///< ggml ne[]: ne[0] (fastest-varying) first
  std::uint32_t type = 0;              ///< ggml type number
  std::string type_name;               ///< "F32", "Q4_K", ...; "type <n>" when unknown
  std::uint64_t offset = 0;            ///< relative to gguf_file::data_start()
  std::optional<std::uint64_t> bytes;  ///< data size; none for an unknown type

  /// Number of elements (checked to fit Index when the file was read).
  std::uint64_t numel() const noexcept {
    std::uint64_t n = 1;
    for (std::uint64_t d : dims) n *= d;
    return n;
  }
  /// Extents outermost first (dims reversed), as a row-major array: `[n_vocab, n_embd]`.
  std::vector<Index> shape() const {
    std::vector<Index> s;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) s.push_back(static_cast<Index>(*it));
    return s;
  }
};

namespace detail {

inline std::size_t gguf_scalar_size(gguf_type t) noexcept {
  switch (t) {
    case gguf_type::uint8:
    case gguf_type::int8:
    case gguf_type::boolean:
      return 1;
    case gguf_type::uint16:
    case gguf_type::int16:
      return 2;
    case gguf_type::uint32:
    case gguf_type::int32:
    case gguf_type::float32:
      return 4;
    case gguf_type::uint64:
    case gguf_type::int64:
    case gguf_type::float64:
      return 8;
    case gguf_type::string:
    case gguf_type::array:
      return 0;
  }
  return 0;
}

/// Fills `v` (whose type is a scalar type) from its little-endian bytes `p`.
inline void gguf_decode_scalar(gguf_value& v, const unsigned char* p) noexcept {
  const std::size_t n = gguf_scalar_size(v.type);
  const std::uint64_t bits = load_le(p, n);
  switch (v.type) {
    case gguf_type::int8:
    case gguf_type::int16:
    case gguf_type::int32:
    case gguf_type::int64: {
      // sign-extend the n-byte two's complement value
      const std::uint64_t sign = std::uint64_t{1} << (8 * n - 1);
      const std::uint64_t ext = n == 8 ? bits : (bits ^ sign) - sign;
      std::int64_t s;
      std::memcpy(&s, &ext, sizeof s);
      v.i = s;
      break;
    }
    case gguf_type::float32:
      v.f = static_cast<double>(bits_float(static_cast<std::uint32_t>(bits)));
      break;
    case gguf_type::float64: {
      double d;
      std::memcpy(&d, &bits, sizeof d);
      v.f = d;
      break;
    }
    case gguf_type::boolean:
      v.u = bits != 0 ? 1 : 0;
      break;
    default:
      v.u = bits;
      break;
  }
}

/// A read cursor over the start of a GGUF file: bytes are read from the file in chunks as
/// the parser needs them, never past gguf_max_metadata_bytes. Every take() checks that
/// its bytes exist first, and names the field and its offset when they do not.
class gguf_cursor {
 public:
  gguf_cursor(input_file& f, const std::string& path) : f_(f), path_(path) {}

  std::uint64_t offset() const noexcept { return pos_; }
  /// Bytes of the file after the cursor.
  std::uint64_t left() const noexcept { return f_.size() - pos_; }

  /// `n` bytes at the cursor (consumed); valid until the next take.
  const unsigned char* take(std::uint64_t n, const std::string& what) {
    if (n > left())
      bad(what, "truncated: needs " + std::to_string(n) + " bytes but the file ends " +
                    std::to_string(left()) + " bytes later");
    if (pos_ + n > gguf_max_metadata_bytes)
      bad(what, "the metadata and tensor infos run past the " +
                    std::to_string(gguf_max_metadata_bytes) +
                    " bytes the reader accepts (io::gguf_max_metadata_bytes)");
    if (pos_ + n > buf_.size()) {
      // grow geometrically (1 MiB at least) so that many small fields cost few reads
      const std::uint64_t want = std::max<std::uint64_t>(
          {pos_ + n, 2 * static_cast<std::uint64_t>(buf_.size()), std::uint64_t{1} << 20});
      const std::uint64_t end = std::min({want, f_.size(), gguf_max_metadata_bytes});
      const std::size_t old = buf_.size();
      buf_.resize(static_cast<std::size_t>(end));
      f_.read(old, buf_.data() + old, buf_.size() - old, "the GGUF header");
    }
    const unsigned char* p = buf_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::uint64_t u32(const std::string& what) { return load_le(take(4, what), 4); }
  std::uint64_t u64(const std::string& what) { return load_le(take(8, what), 8); }

  /// A GGUF string: u64 length (checked against the bytes left), then its bytes.
  std::string str(const std::string& what) {
    const std::uint64_t at = pos_;
    const std::uint64_t n = u64(what + " length");
    if (n > left())
      bad(what, "length " + std::to_string(n) + " (at offset " + std::to_string(at) +
                    ") runs past the end of the file (" + std::to_string(left()) + " bytes left)");
    const unsigned char* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
  }

  /// posenc::error "io::gguf: path = <path>: <what> at offset <pos>: <problem>".
  [[noreturn]] void bad(const std::string& what, const std::string& problem) const {
    fail("io::gguf", "path", path_, what + " at offset " + std::to_string(pos_) + ": " + problem);
  }

 private:
  input_file& f_;
  const std::string& path_;
  std::vector<unsigned char> buf_;
  std::uint64_t pos_ = 0;
};

/// The value of type `t` at the cursor; `what` names it in errors, `depth` counts arrays.
inline gguf_value gguf_read_value(gguf_cursor& c, gguf_type t, const std::string& what, int depth) {
  gguf_value v;
  v.type = t;
  if (t == gguf_type::string) {
    v.s = c.str(what);
    return v;
  }
  if (t != gguf_type::array) {
    const std::size_t n = gguf_scalar_size(t);
    if (n == 0) c.bad(what, "unknown value type " + std::to_string(static_cast<std::uint32_t>(t)));
    gguf_decode_scalar(v, c.take(n, what));
    return v;
  }
  if (depth >= gguf_max_array_depth) c.bad(what, "arrays nested deeper than 64");
  const std::uint64_t et = c.u32(what + " element type");
  if (et > static_cast<std::uint64_t>(gguf_type::float64))
    c.bad(what, "unknown array element type " + std::to_string(et));
  v.element_type = static_cast<gguf_type>(et);
  v.count = c.u64(what + " count");
  // the smallest encoding of one element: its size, 8 for a string, 12 for an array
  const std::size_t scalar = gguf_scalar_size(v.element_type);
  const std::uint64_t least = scalar != 0 ? scalar : v.element_type == gguf_type::string ? 8 : 12;
  if (v.count > c.left() / least)
    c.bad(what, "array of " + std::to_string(v.count) + " " + gguf_type_name(v.element_type) +
                    " needs at least " + std::to_string(least) +
                    " bytes per element, more than the file has left");
  if (scalar != 0) {
    const std::uint64_t n = v.count * scalar;
    const unsigned char* p = c.take(n, what);
    v.raw.assign(p, p + n);
  } else if (v.element_type == gguf_type::string) {
    v.strings.reserve(static_cast<std::size_t>(v.count));
    for (std::uint64_t k = 0; k < v.count; ++k)
      v.strings.push_back(c.str(what + "[" + std::to_string(k) + "]"));
  } else {
    v.arrays.reserve(static_cast<std::size_t>(v.count));
    for (std::uint64_t k = 0; k < v.count; ++k)
      v.arrays.push_back(
          gguf_read_value(c, gguf_type::array, what + "[" + std::to_string(k) + "]", depth + 1));
  }
  return v;
}

}  // namespace detail

inline gguf_value gguf_value::element(std::uint64_t k) const {
  posenc::detail::require(type == gguf_type::array && k < count, "io::gguf_value::element", "k", k,
                          "must index an element of an array (count " +
                              std::to_string(type == gguf_type::array ? count : 0) + ")");
  gguf_value v;
  v.type = element_type;
  if (element_type == gguf_type::string) {
    v.s = strings[static_cast<std::size_t>(k)];
  } else if (element_type == gguf_type::array) {
    v = arrays[static_cast<std::size_t>(k)];
  } else {
    const std::size_t n = detail::gguf_scalar_size(element_type);
    detail::gguf_decode_scalar(v, raw.data() + static_cast<std::size_t>(k) * n);
  }
  return v;
}

/// An open GGUF file whose header, metadata and tensor infos were read and validated once.
///
///     io::gguf_file g("model.gguf");
///     std::string arch = *g.get_string("general.architecture");          // "llama"
///     std::int64_t heads = *g.get_integer(arch + ".attention.head_count");
///     for (const io::gguf_tensor_info& t : g.tensors())
///       std::cout << t.name << " " << t.type_name << " " << t.offset << "\n";
///     io::tensor<float> freqs = g.read<float>("rope_freqs.weight");      // F32/F16/BF16/...
///
/// Checked when opened (posenc::error "io::gguf: path = ...: <field> at offset N: ..."):
/// the magic, version 2 or 3, every count and string length against the bytes left, value
/// types, array nesting (64), no duplicate key or tensor name, general.alignment (an integer
/// power of two), n_dims <= 4, extents whose product fits Index, known-type extents ne[0]
/// a multiple of the block size, offsets multiples of the alignment, and each tensor of a
/// known type inside the file (tensors of unknown types only start inside it).
class gguf_file {
 public:
  explicit gguf_file(const std::string& path) : path_(path), file_(path_, "io::gguf") { parse(); }

  const std::string& path() const noexcept { return path_; }
  /// 2 or 3.
  std::uint32_t version() const noexcept { return version_; }
  /// general.alignment, default 32.
  std::uint64_t alignment() const noexcept { return alignment_; }
  /// File offset of the tensor data: the end of the tensor infos rounded up to alignment().
  std::uint64_t data_start() const noexcept { return data_start_; }

  /// All key/values in file order.
  const std::vector<gguf_kv>& metadata() const noexcept { return kv_; }
  /// The value of `key`, or nullptr (O(log n)).
  const gguf_value* find(std::string_view key) const noexcept {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
  }
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }

  /// An integer value (any of the eight integer types); none when absent; posenc::error
  /// naming the key and its type when it is not an integer or (uint64) exceeds int64.
  std::optional<std::int64_t> get_integer(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_integer()) wrong_type(key, *v, "an integer");
    if (v->type == gguf_type::int8 || v->type == gguf_type::int16 || v->type == gguf_type::int32 ||
        v->type == gguf_type::int64)
      return v->i;
    if (v->u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      posenc::detail::fail("io::gguf", key, v->u, "does not fit int64 (in " + path_ + ")");
    return static_cast<std::int64_t>(v->u);
  }
  /// A number (integer or float) as double; none when absent; posenc::error otherwise.
  std::optional<double> get_number(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) wrong_type(key, *v, "a number");
    return v->as_double();
  }
  /// A bool; none when absent; posenc::error otherwise.
  std::optional<bool> get_bool(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_type::boolean) wrong_type(key, *v, "a bool");
    return v->u != 0;
  }
  /// A string; none when absent; posenc::error otherwise.
  std::optional<std::string> get_string(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_type::string) wrong_type(key, *v, "a string");
    return v->s;
  }
  /// An array of numbers as doubles; none when absent; posenc::error otherwise.
  std::optional<std::vector<double>> get_numbers(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    gguf_value probe;
    probe.type = v->element_type;
    if (v->type != gguf_type::array || !probe.is_number())
      wrong_type(key, *v, "an array of numbers");
    std::vector<double> out;
    out.reserve(static_cast<std::size_t>(v->count));
    for (std::uint64_t k = 0; k < v->count; ++k) out.push_back(v->element(k).as_double());
    return out;
  }
  /// An array of strings; none when absent; posenc::error otherwise.
  std::optional<std::vector<std::string>> get_strings(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_type::array || v->element_type != gguf_type::string)
      wrong_type(key, *v, "an array of strings");
    return v->strings;
  }

  /// The tensor infos in file order.
  const std::vector<gguf_tensor_info>& tensors() const noexcept { return tensors_; }
  /// Tensor `name`, or nullptr (O(log n)).
  const gguf_tensor_info* find_tensor(std::string_view name) const noexcept {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }
  /// Tensor `name`; posenc::error "io::gguf: name = '<name>': no such tensor in <path>".
  const gguf_tensor_info& tensor_info(std::string_view name) const {
    const gguf_tensor_info* t = find_tensor(name);
    if (t == nullptr)
      posenc::detail::fail(
          "io::gguf", "name", "'" + std::string(name) + "'",
          "no such tensor in " + path_ + " (it has " + std::to_string(tensors_.size()) + ")");
    return *t;
  }

  /// The data of an unquantised tensor (ggml F32, F16, BF16, F64, I32 or I64) converted to
  /// Scalar by the rules of tensor.hpp, shape() outermost first; posenc::error naming the
  /// tensor for any other type. Reads only that tensor's bytes.
  template <class Scalar>
  tensor<Scalar> read(std::string_view name) {
    static_assert(is_io_scalar_v<Scalar>,
                  "posenc::io::gguf_file::read: Scalar must be float, double, int64_t, int32_t "
                  "or uint8_t");
    const gguf_tensor_info& t = tensor_info(name);
    dtype d = dtype::f32;
    switch (t.type) {
      case 0:
        d = dtype::f32;
        break;
      case 1:
        d = dtype::f16;
        break;
      case 30:
        d = dtype::bf16;
        break;
      case 28:
        d = dtype::f64;
        break;
      case 26:
        d = dtype::i32;
        break;
      case 27:
        d = dtype::i64;
        break;
      default:
        posenc::detail::fail(
            "io::gguf", "name", "'" + t.name + "'",
            "its type (" + t.type_name + ") is not one read() decodes (F32 F16 BF16 F64 I32 I64)");
    }
    tensor<Scalar> out;
    out.shape = t.shape();
    out.data.resize(static_cast<std::size_t>(out.size()));
    file_.read_elements(data_start_ + t.offset, d, out.size(), out.data.data(),
                        t.type_name + " (tensor \"" + t.name + "\")");
    return out;
  }

 private:
  [[noreturn]] void wrong_type(std::string_view key, const gguf_value& v, const char* want) const {
    posenc::detail::fail("io::gguf", key, gguf_value_text(v),
                         std::string("must be ") + want + " (in " + path_ + ")");
  }

  void parse() {
    detail::gguf_cursor c(file_, path_);
    const unsigned char* magic = c.take(4, "magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) c.bad("magic", "not a GGUF file (no \"GGUF\")");
    const std::uint64_t version = c.u32("version");
    if (version == 0x02000000 || version == 0x03000000)
      c.bad("version", "a big-endian GGUF file (not supported)");
    if (version != 2 && version != 3)
      c.bad("version", std::to_string(version) + " is not supported (2 or 3)");
    version_ = static_cast<std::uint32_t>(version);
    const std::uint64_t n_tensors = c.u64("tensor_count");
    const std::uint64_t n_kv = c.u64("metadata_kv_count");
    // the smallest key/value is 13 bytes (empty key, type, one byte), a tensor info 24
    if (n_kv > c.left() / 13)
      c.bad("metadata_kv_count", std::to_string(n_kv) + " key/values cannot fit the " +
                                     std::to_string(c.left()) + " bytes left");
    if (n_tensors > c.left() / 24)
      c.bad("tensor_count", std::to_string(n_tensors) + " tensor infos cannot fit the " +
                                std::to_string(c.left()) + " bytes left");

    kv_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t k = 0; k < n_kv; ++k) {
      const std::string label = "metadata key/value " + std::to_string(k);
      gguf_kv kv;
      kv.key = c.str(label + " key");
      const std::string what = "metadata \"" + kv.key + "\"";
      if (kv_index_.count(kv.key) != 0) c.bad(what, "duplicate key");
      const std::uint64_t t = c.u32(what + " type");
      if (t > static_cast<std::uint64_t>(gguf_type::float64))
        c.bad(what, "unknown value type " + std::to_string(t));
      kv.value = detail::gguf_read_value(c, static_cast<gguf_type>(t), what, 0);
      kv_index_.emplace(kv.key, kv_.size());
      kv_.push_back(std::move(kv));
    }
    if (const gguf_value* a = find("general.alignment")) {
      const std::uint64_t at = c.offset();
      const bool ok = a->is_integer() && a->type != gguf_type::int8 &&
                      a->type != gguf_type::int16 && a->type != gguf_type::int32 &&
                      a->type != gguf_type::int64 && a->u > 0 && (a->u & (a->u - 1)) == 0 &&
                      a->u <= (std::uint64_t{1} << 30);
      if (!ok)
        posenc::detail::fail("io::gguf", "general.alignment", gguf_value_text(*a),
                             "must be an unsigned integer power of two <= 2^30 (in " + path_ +
                                 ", metadata ends at offset " + std::to_string(at) + ")");
      alignment_ = a->u;
    }

    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t k = 0; k < n_tensors; ++k) {
      gguf_tensor_info t;
      t.name = c.str("tensor info " + std::to_string(k) + " name");
      const std::string what = "tensor \"" + t.name + "\"";
      if (tensor_index_.count(t.name) != 0) c.bad(what, "duplicate tensor name");
      const std::uint64_t n_dims = c.u32(what + " n_dims");
      if (n_dims > 4) c.bad(what, "n_dims = " + std::to_string(n_dims) + " (ggml allows 4)");
      for (std::uint64_t a = 0; a < n_dims; ++a) {
        const std::uint64_t e = c.u64(what + " dims[" + std::to_string(a) + "]");
        if (e > static_cast<std::uint64_t>(std::numeric_limits<Index>::max()))
          c.bad(what,
                "dims[" + std::to_string(a) + "] = " + std::to_string(e) + " does not fit Index");
        t.dims.push_back(e);
      }
      // the extent rule of the other readers: the product fits Index (one-byte items)
      detail::checked_numel(t.shape(), 1, "io::gguf", path_, "path", what + ": ");
      t.type = static_cast<std::uint32_t>(c.u32(what + " type"));
      t.offset = c.u64(what + " offset");
      const gguf_ggml_type_info info = gguf_ggml_type(t.type);
      t.type_name = info.block_bytes != 0 ? info.name : "type " + std::to_string(t.type);
      if (info.block_bytes != 0) {
        const std::uint64_t ne0 = t.dims.empty() ? 1 : t.dims[0];
        if (ne0 % info.block_size != 0)
          c.bad(what, "dims[0] = " + std::to_string(ne0) + " is not a multiple of the " +
                          t.type_name + " block size " + std::to_string(info.block_size));
        const std::uint64_t blocks = t.numel() / info.block_size;
        if (blocks > std::numeric_limits<std::uint64_t>::max() / info.block_bytes)
          c.bad(what, "byte size overflows");
        t.bytes = blocks * info.block_bytes;
      }
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
    }

    // the data starts at the next multiple of the alignment; every tensor lies inside it
    const std::uint64_t end = c.offset();
    data_start_ = end + (alignment_ - end % alignment_) % alignment_;
    for (const gguf_tensor_info& t : tensors_) {
      const std::string what = "tensor \"" + t.name + "\"";
      if (t.offset % alignment_ != 0)
        posenc::detail::fail("io::gguf", "path", path_,
                             what + ": offset " + std::to_string(t.offset) +
                                 " is not a multiple of the alignment " +
                                 std::to_string(alignment_));
      // a data section that starts past the end (a file cut inside the padding) holds no
      // tensor, not even an empty one
      const bool starts_inside = data_start_ <= file_.size();
      const std::uint64_t room = starts_inside ? file_.size() - data_start_ : 0;
      const std::uint64_t need = t.bytes.value_or(0);
      if (!starts_inside || t.offset > room || need > room - t.offset)
        posenc::detail::fail("io::gguf", "path", path_,
                             what + ": data [" + std::to_string(t.offset) + ", " +
                                 (t.bytes ? std::to_string(t.offset + need) : "?") +
                                 ") past the data start " + std::to_string(data_start_) +
                                 " runs past the end of the file (" + std::to_string(file_.size()) +
                                 " bytes): truncated file?");
    }
  }

  std::string path_;
  detail::input_file file_;
  std::uint32_t version_ = 3;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_start_ = 0;
  std::vector<gguf_kv> kv_;
  std::map<std::string, std::size_t, std::less<>> kv_index_;
  std::vector<gguf_tensor_info> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

}  // namespace io
}  // namespace posenc
