#pragma once
/// \file
/// The in-memory tensor that the file readers return, the element types (dtypes) they
/// understand, fp16/bf16 conversions, and the checked byte-level helpers shared by
/// io/npy.hpp and io/safetensors.hpp.
///
/// Conversion rules when a file's dtype differs from the requested Scalar (both formats):
///
///     file dtype            -> float / double          -> std::int64_t / int32_t / uint8_t
///     f16 bf16 f32 f64         value conversion,          only if every value is integral
///                              rounded to nearest;        and in range (else posenc::error)
///                              inf/nan kept; a finite
///                              value beyond the target's
///                              range is an error
///     i32 i64 u8 bool          only if every value is     only if every value is in range
///                              exactly representable
///
/// Files are little-endian on disk whatever the host; bytes are assembled explicitly.

#include <Eigen/Core>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/types.hpp"

namespace posenc {
namespace io {

/// Limits of the file readers, checked before anything is allocated from the sizes a file
/// declares (docs/file-formats.md, "Limits"). Beyond them every size is bounded by the
/// file: tensor data is allocated only once its byte count matches what the file holds.
///
///     max_rank                        64 axes per tensor (.npy and .safetensors)
///     npy_max_header_bytes            2^24 bytes (16 MiB) of .npy header dict
///     safetensors_max_header_bytes    10^8 bytes (100 MB) of safetensors JSON header
///     JSON nesting                    64 levels (json_parser::max_depth)
inline constexpr std::size_t max_rank = 64;
inline constexpr std::uint64_t npy_max_header_bytes = std::uint64_t{1} << 24;
inline constexpr std::uint64_t safetensors_max_header_bytes = 100000000;

/// A row-major dynamic matrix: one token per row, the layout every posenc table uses.
template <class Scalar>
using matrix = row_matrix<Scalar>;

/// Element types of the supported file formats.
///
///     f16   IEEE binary16         npy '<f2'   safetensors F16
///     bf16  bfloat16 (8e/7m)      -           safetensors BF16
///     f32   IEEE binary32         npy '<f4'   safetensors F32
///     f64   IEEE binary64         npy '<f8'   safetensors F64
///     i32   int32                 npy '<i4'   safetensors I32
///     i64   int64                 npy '<i8'   safetensors I64
///     u8    uint8                 npy '|u1'   safetensors U8
///     boolean  one byte, 0 or 1   npy '|b1'   safetensors BOOL
enum class dtype { f16, bf16, f32, f64, i32, i64, u8, boolean };

/// Bytes per element of `t`.
constexpr std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
    case dtype::bf16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
    case dtype::u8:
    case dtype::boolean:
      return 1;
  }
  return 0;
}

/// Short name of `t` ("f16", "bf16", "f32", "f64", "i32", "i64", "u8", "bool").
constexpr const char* dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
      return "f16";
    case dtype::bf16:
      return "bf16";
    case dtype::f32:
      return "f32";
    case dtype::f64:
      return "f64";
    case dtype::i32:
      return "i32";
    case dtype::i64:
      return "i64";
    case dtype::u8:
      return "u8";
    case dtype::boolean:
      return "bool";
  }
  return "?";
}

/// True for the floating-point dtypes (f16, bf16, f32, f64).
constexpr bool dtype_is_float(dtype t) noexcept {
  return t == dtype::f16 || t == dtype::bf16 || t == dtype::f32 || t == dtype::f64;
}

/// True when Scalar is an element type the readers and writers accept:
/// float, double, std::int64_t, std::int32_t, std::uint8_t.
template <class Scalar>
inline constexpr bool is_io_scalar_v =
    std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double> ||
    std::is_same_v<Scalar, std::int64_t> || std::is_same_v<Scalar, std::int32_t> ||
    std::is_same_v<Scalar, std::uint8_t>;

/// The dtype that stores Scalar without conversion.
template <class Scalar>
constexpr dtype dtype_of() noexcept {
  static_assert(is_io_scalar_v<Scalar>,
                "posenc::io: Scalar must be float, double, int64_t, int32_t or uint8_t");
  if constexpr (std::is_same_v<Scalar, float>)
    return dtype::f32;
  else if constexpr (std::is_same_v<Scalar, double>)
    return dtype::f64;
  else if constexpr (std::is_same_v<Scalar, std::int64_t>)
    return dtype::i64;
  else if constexpr (std::is_same_v<Scalar, std::int32_t>)
    return dtype::i32;
  else
    return dtype::u8;
}

/// An N-d array in C order (last index fastest): `data[((i0 * s1 + i1) * s2 + i2) ...]`.
/// Rank 0 (empty shape) holds one element.
template <class Scalar>
struct tensor {
  std::vector<Index> shape;  ///< extents, outermost first
  std::vector<Scalar> data;  ///< prod(shape) elements, C order

  /// Number of elements: the product of the extents (1 for rank 0).
  Index size() const {
    Index n = 1;
    for (Index e : shape) n *= e;
    return n;
  }

  /// Number of axes.
  Index rank() const { return static_cast<Index>(shape.size()); }

  /// A copy as a row-major matrix: rank 2 `[r, c]` -> r x c; rank 1 `[n]` -> 1 x n.
  /// Any other rank, or data whose length does not match the shape, is a posenc::error.
  matrix<Scalar> as_matrix() const {
    posenc::detail::require(rank() == 1 || rank() == 2, "io::tensor::as_matrix", "rank", rank(),
                            "must be 1 or 2");
    for (Index e : shape)
      posenc::detail::require(e >= 0, "io::tensor::as_matrix", "shape extent", e, "must be >= 0");
    posenc::detail::require(static_cast<Index>(data.size()) == size(), "io::tensor::as_matrix",
                            "data.size()", data.size(), "must equal the product of the shape");
    const Index rows = rank() == 2 ? shape[0] : 1;
    const Index cols = rank() == 2 ? shape[1] : shape[0];
    matrix<Scalar> m(rows, cols);
    if (m.size() > 0) std::copy(data.begin(), data.end(), m.data());
    return m;
  }
};

// ---------------------------------------------------------------------------------------
// fp16 / bf16 <-> float, by bit manipulation.

namespace detail {

using posenc::detail::fail;
using posenc::detail::require;

inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Rounds a double to nearest-even in a small IEEE-style binary format with `E` exponent
/// and `M` fraction bits (f16: 5/10, bf16: 8/7), straight from the double's bits so there
/// is one rounding only. Overflow gives inf; NaN stays NaN (quiet, sign and top payload
/// bits kept). Returns the 1 + E + M bits in the low bits.
template <int E, int M>
std::uint32_t encode_small_float(double x) noexcept {
  std::uint64_t d;
  std::memcpy(&d, &x, sizeof d);
  const std::uint32_t sign = static_cast<std::uint32_t>(d >> 63) << (E + M);
  const int exp_d = static_cast<int>((d >> 52) & 0x7FF);
  const std::uint64_t frac_d = d & ((std::uint64_t{1} << 52) - 1);
  const std::uint32_t exp_all = (1u << E) - 1;
  const std::uint32_t inf = exp_all << M;
  if (exp_d == 0x7FF) {
    if (frac_d == 0) return sign | inf;
    const auto payload = static_cast<std::uint32_t>(frac_d >> (52 - M));
    return sign | inf | payload | (1u << (M - 1));
  }
  if (exp_d == 0)
    return sign;  // double zero or subnormal: far below half the smallest target subnormal
  const int bias = (1 << (E - 1)) - 1;
  const int e = exp_d - 1023;
  if (e > bias) return sign | inf;
  const std::uint64_t sig = frac_d | (std::uint64_t{1} << 52);
  const int emin = 1 - bias;
  const int shift = 52 - M + (e < emin ? emin - e : 0);
  if (shift > 60) return sign;  // below half the smallest subnormal
  std::uint64_t r = sig >> shift;
  const std::uint64_t rem = sig & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (r & 1))) ++r;
  std::uint64_t bits;
  if (e < emin) {
    bits = r;  // subnormal; a carry into bit M yields the smallest normal, correctly encoded
  } else {
    // r carries the implicit bit at position M; the addition lets a rounding carry bump
    // the exponent.
    bits = (static_cast<std::uint64_t>(e + bias - 1) << M) + r;
  }
  if (bits >= inf) return sign | inf;
  return sign | static_cast<std::uint32_t>(bits);
}

}  // namespace detail

/// IEEE binary16 bits -> float (exact; subnormals, inf and NaN payloads preserved).
inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t frac = h & 0x3FFu;
  if (exp == 0x1F) return detail::bits_float(sign | 0x7F800000u | (frac << 13));
  if (exp == 0) {
    if (frac == 0) return detail::bits_float(sign);
    // Subnormal half: normalise, since every half subnormal is a normal float.
    std::uint32_t e = 127 - 15 + 1;
    while ((frac & 0x400u) == 0) {
      frac <<= 1;
      --e;
    }
    return detail::bits_float(sign | (e << 23) | ((frac & 0x3FFu) << 13));
  }
  return detail::bits_float(sign | ((exp + 127 - 15) << 23) | (frac << 13));
}

/// double -> IEEE binary16 bits, rounded to nearest even (one rounding, from the double).
inline std::uint16_t double_to_half(double x) noexcept {
  return static_cast<std::uint16_t>(detail::encode_small_float<5, 10>(x));
}

/// float -> IEEE binary16 bits, rounded to nearest even; overflow gives inf.
inline std::uint16_t float_to_half(float f) noexcept {
  return double_to_half(static_cast<double>(f));
}

/// bfloat16 bits -> float (exact: bf16 is the top half of a float).
inline float bf16_to_float(std::uint16_t b) noexcept {
  return detail::bits_float(static_cast<std::uint32_t>(b) << 16);
}

/// double -> bfloat16 bits, rounded to nearest even (one rounding, from the double).
inline std::uint16_t double_to_bf16(double x) noexcept {
  return static_cast<std::uint16_t>(detail::encode_small_float<8, 7>(x));
}

/// float -> bfloat16 bits, rounded to nearest even; NaN stays NaN.
inline std::uint16_t float_to_bf16(float f) noexcept {
  return double_to_bf16(static_cast<double>(f));
}

// ---------------------------------------------------------------------------------------
// Byte-level helpers shared by the readers and writers.

namespace detail {

/// Little-endian unsigned integer of `n` bytes at `p`.
inline std::uint64_t load_le(const unsigned char* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

/// Stores the low `n` bytes of `v` little-endian at `p`.
inline void store_le(unsigned char* p, std::uint64_t v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

/// True when the host stores integers little-endian (then a same-dtype read is a copy).
inline bool host_is_little_endian() noexcept {
  const std::uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

/// A little-endian unsigned integer of type U at `p` (a plain load on little-endian hosts;
/// the check folds to a constant).
template <class U>
U load_le_as(const unsigned char* p) noexcept {
  U v;
  if (host_is_little_endian()) {
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  return static_cast<U>(load_le(p, sizeof(U)));
}

// One loader per dtype, small enough to inline into the conversion loops.
inline float load_f16(const unsigned char* p) noexcept {
  return half_to_float(load_le_as<std::uint16_t>(p));
}
inline float load_bf16(const unsigned char* p) noexcept {
  return bf16_to_float(load_le_as<std::uint16_t>(p));
}
inline float load_f32(const unsigned char* p) noexcept {
  return bits_float(load_le_as<std::uint32_t>(p));
}
inline double load_f64(const unsigned char* p) noexcept {
  const std::uint64_t u = load_le_as<std::uint64_t>(p);
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}
inline std::int64_t load_i32(const unsigned char* p) noexcept {
  const std::uint32_t u = load_le_as<std::uint32_t>(p);
  std::int32_t v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
inline std::int64_t load_i64(const unsigned char* p) noexcept {
  const std::uint64_t u = load_le_as<std::uint64_t>(p);
  std::int64_t v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
inline std::int64_t load_u8(const unsigned char* p) noexcept { return p[0]; }
inline std::int64_t load_bool(const unsigned char* p) noexcept { return p[0] != 0 ? 1 : 0; }

/// Element of a little-endian buffer of dtype `t`, as a double (float dtypes).
inline double load_float(dtype t, const unsigned char* p) noexcept {
  switch (t) {
    case dtype::f16:
      return load_f16(p);
    case dtype::bf16:
      return load_bf16(p);
    case dtype::f32:
      return load_f32(p);
    default:
      return load_f64(p);
  }
}

/// Element of a little-endian buffer of an integer/bool dtype `t`, as int64.
inline std::int64_t load_int(dtype t, const unsigned char* p) noexcept {
  switch (t) {
    case dtype::i32:
      return load_i32(p);
    case dtype::i64:
      return load_i64(p);
    case dtype::boolean:
      return load_bool(p);
    default:
      return load_u8(p);
  }
}

/// Converts a float value to Scalar under the rules at the top of this file.
template <class Scalar>
bool assign_from_float(double v, Scalar& out) noexcept {
  if constexpr (std::is_same_v<Scalar, double>) {
    out = v;
    return true;
  } else if constexpr (std::is_same_v<Scalar, float>) {
    constexpr double max = static_cast<double>(std::numeric_limits<float>::max());
    // Round-to-nearest sends [max, max + half an ulp) to max and the rest to inf; a
    // finite value that would become inf is refused (and the cast would be undefined).
    constexpr double overflow = max + 0x1p103;
    if (std::isfinite(v) && std::fabs(v) > max) {
      if (std::fabs(v) >= overflow) return false;
      out = v < 0 ? -std::numeric_limits<float>::max() : std::numeric_limits<float>::max();
      return true;
    }
    out = static_cast<float>(v);
    return true;
  } else {
    // NaN fails both comparisons.
    const double lo = static_cast<double>(std::numeric_limits<Scalar>::min());
    const double hi_excl = static_cast<double>(std::numeric_limits<Scalar>::max()) + 1.0;
    if (!(v >= lo && v < hi_excl)) return false;
    if (std::trunc(v) != v) return false;
    out = static_cast<Scalar>(v);
    return true;
  }
}

/// Converts an integer value to Scalar exactly, or returns false.
template <class Scalar>
bool assign_from_int(std::int64_t v, Scalar& out) noexcept {
  if constexpr (std::is_floating_point_v<Scalar>) {
    const auto f = static_cast<Scalar>(v);
    // 2^63 is representable in Scalar but not in int64: anything that large is inexact.
    if (!(f < static_cast<Scalar>(9223372036854775808.0))) return false;
    if (static_cast<std::int64_t>(f) != v) return false;
    out = f;
    return true;
  } else {
    if (v < static_cast<std::int64_t>(std::numeric_limits<Scalar>::min()) ||
        v > static_cast<std::int64_t>(std::numeric_limits<Scalar>::max()))
      return false;
    out = static_cast<Scalar>(v);
    return true;
  }
}

/// Overloads picking the rule by the decoded value's type.
template <class Scalar>
bool assign_value(double v, Scalar& out) noexcept {
  return assign_from_float(v, out);
}
template <class Scalar>
bool assign_value(float v, Scalar& out) noexcept {
  if constexpr (std::is_floating_point_v<Scalar>) {
    out = v;  // float -> float or double: always exact, no range check needed
    return true;
  } else {
    return assign_from_float(static_cast<double>(v), out);
  }
}
template <class Scalar>
bool assign_value(std::int64_t v, Scalar& out) noexcept {
  return assign_from_int(v, out);
}

/// The element loop for one source dtype (`load` decodes one element), so the dtype switch
/// stays outside the loop.
template <class Scalar, class Load>
Index decode_loop(const unsigned char* src, Index n, std::size_t w, Scalar* dst,
                  Load load) noexcept {
  for (Index i = 0; i < n; ++i)
    if (!assign_value(load(src + static_cast<std::size_t>(i) * w), dst[i])) return i;
  return -1;
}

/// Decodes `n` elements of dtype `t` from `src` into `dst`; returns the index of the first
/// element that does not convert (see the rules above), or -1 when all converted.
template <class Scalar>
Index decode_elements(dtype t, const unsigned char* src, Index n, Scalar* dst) noexcept {
  const std::size_t w = dtype_size(t);
  if (t == dtype_of<Scalar>() && host_is_little_endian()) {
    if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * w);
    return -1;
  }
  // One lambda type per dtype: each loop is its own instantiation with the load inlined.
  switch (t) {
    case dtype::f16:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_f16(p); });
    case dtype::bf16:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_bf16(p); });
    case dtype::f32:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_f32(p); });
    case dtype::f64:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_f64(p); });
    case dtype::i32:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_i32(p); });
    case dtype::i64:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_i64(p); });
    case dtype::u8:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_u8(p); });
    case dtype::boolean:
      return decode_loop(src, n, w, dst, [](const unsigned char* p) { return load_bool(p); });
  }
  return -1;
}

/// Encodes one Scalar as dtype `t` (little-endian) at `p`; returns false when the value does
/// not convert (an integer target and a non-integral or out-of-range value, or a finite
/// value beyond the range of a float target).
template <class Scalar>
bool encode_element(dtype t, Scalar v, unsigned char* p) noexcept {
  if (dtype_is_float(t)) {
    const double d = static_cast<double>(v);
    switch (t) {
      case dtype::f16: {
        const std::uint16_t h = double_to_half(d);
        if (std::isfinite(d) && (h & 0x7C00u) == 0x7C00u) return false;
        store_le(p, h, 2);
        return true;
      }
      case dtype::bf16: {
        const std::uint16_t b = double_to_bf16(d);
        if (std::isfinite(d) && (b & 0x7F80u) == 0x7F80u) return false;
        store_le(p, b, 2);
        return true;
      }
      case dtype::f32: {
        float f;
        if (!assign_from_float(d, f)) return false;
        store_le(p, float_bits(f), 4);
        return true;
      }
      default: {
        std::uint64_t u;
        std::memcpy(&u, &d, sizeof u);
        store_le(p, u, 8);
        return true;
      }
    }
  }
  std::int64_t i = 0;
  if constexpr (std::is_floating_point_v<Scalar>) {
    if (!assign_from_float(static_cast<double>(v), i)) return false;
  } else {
    i = static_cast<std::int64_t>(v);
  }
  switch (t) {
    case dtype::i32: {
      std::int32_t j;
      if (!assign_from_int(i, j)) return false;
      store_le(p, static_cast<std::uint32_t>(j), 4);
      return true;
    }
    case dtype::i64:
      store_le(p, static_cast<std::uint64_t>(i), 8);
      return true;
    case dtype::boolean:
      if (i != 0 && i != 1) return false;
      p[0] = static_cast<unsigned char>(i);
      return true;
    default: {
      std::uint8_t u;
      if (!assign_from_int(i, u)) return false;
      p[0] = u;
      return true;
    }
  }
}

/// The number of elements of `shape` under the one extent rule of every reader and writer
/// (docs/file-formats.md): each extent is >= 0, and the product of the non-zero extents
/// times `item_size` bytes fits in Index, whatever the order of the axes. A zero extent
/// does not excuse the others: `(0, 2^62, 2^62)` is refused exactly like `(2^62, 2^62, 0)`,
/// and `(2^63 - 1, 0)` is accepted for one-byte items exactly like `(0, 2^63 - 1)`. The
/// result (0 when an extent is 0) times `item_size` then fits Index and std::size_t.
/// Throws posenc::error "<where>: <param> = <value>: <context>shape[a] = e is negative" or
/// "...: <context>shape product overflows at axis a (extent e)", `a` being the axis at
/// which the product of the non-zero extents passes the limit.
inline Index checked_numel(const std::vector<Index>& shape, std::size_t item_size,
                           const char* where, const std::string& value, const char* param = "path",
                           const std::string& context = "") {
  const Index limit = std::numeric_limits<Index>::max() / static_cast<Index>(item_size);
  Index nonzero = 1;
  bool empty = false;
  for (std::size_t a = 0; a < shape.size(); ++a) {
    const Index e = shape[a];
    if (e < 0)
      fail(where, param, value,
           context + "shape[" + std::to_string(a) + "] = " + std::to_string(e) + " is negative");
    if (e == 0) {
      empty = true;
      continue;
    }
    if (nonzero > limit / e)
      fail(where, param, value,
           context + "shape product overflows at axis " + std::to_string(a) + " (extent " +
               std::to_string(e) + ")");
    nonzero *= e;
  }
  return empty ? 0 : nonzero;
}

/// The shortest decimal text that reads back as `v` in its own type (std::to_chars):
/// `0.1`, `1e-300`, `1e+300`, `70000`, `inf`, `-nan`. What the error messages show, so a
/// value is never rounded away (std::to_string shows 1e-300 as 0.000000).
template <class Float>
std::string shortest_text(Float v) {
  static_assert(std::is_floating_point_v<Float>, "shortest_text: a float or double");
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// A value of Scalar as the error messages show it: shortest round-trip text for float and
/// double, decimal for integers.
template <class Scalar>
std::string value_text(Scalar v) {
  if constexpr (std::is_floating_point_v<Scalar>)
    return shortest_text(v);
  else
    return std::to_string(+v);
}

/// Element of a little-endian buffer of dtype `t`, as the error messages show it: a float
/// dtype in its own precision (f16, bf16 and f32 as float, f64 as double), integers in
/// decimal.
inline std::string element_text(dtype t, const unsigned char* p) {
  if (t == dtype::f64) return shortest_text(load_f64(p));
  if (dtype_is_float(t)) return shortest_text(static_cast<float>(load_float(t, p)));
  return std::to_string(load_int(t, p));
}

/// [rows, cols] of a tensor read as a matrix: rank 2 as it is, rank 1 `[n]` as `[1, n]`;
/// other ranks, and extents differing from `expected_rows` / `expected_cols` when those are
/// >= 0, throw posenc::error naming "rank" / "rows" / "cols" with `context` appended.
inline std::pair<Index, Index> matrix_extents(const std::vector<Index>& shape, Index expected_rows,
                                              Index expected_cols, const char* where,
                                              const std::string& context) {
  const auto rank = static_cast<Index>(shape.size());
  if (rank != 1 && rank != 2) fail(where, "rank", rank, "must be 1 or 2" + context);
  const Index rows = rank == 2 ? shape[0] : 1;
  const Index cols = rank == 2 ? shape[1] : shape[0];
  if (expected_rows >= 0 && rows != expected_rows)
    fail(where, "rows", rows, "expected " + std::to_string(expected_rows) + context);
  if (expected_cols >= 0 && cols != expected_cols)
    fail(where, "cols", cols, "expected " + std::to_string(expected_cols) + context);
  return {rows, cols};
}

/// A read-only binary file with checked positional reads.
class input_file {
 public:
  input_file(const std::string& path, const char* where) : path_(path), where_(where) {
    in_.open(path, std::ios::binary);
    if (!in_) fail(where_, "path", path_, "cannot open the file for reading");
    in_.seekg(0, std::ios::end);
    const std::streamoff end = in_.tellg();
    if (!in_ || end < 0) fail(where_, "path", path_, "cannot determine the file size");
    size_ = static_cast<std::uint64_t>(end);
  }

  std::uint64_t size() const noexcept { return size_; }

  /// The function name later errors start with (the constructor's `where` until then).
  void set_where(const char* where) noexcept { where_ = where; }

  /// Reads exactly `n` bytes at `offset`; `what` names the part for the error message.
  void read(std::uint64_t offset, void* dst, std::size_t n, const char* what) {
    if (offset > size_ || n > size_ - offset)
      fail(where_, "path", path_,
           std::string("truncated: ") + what + " needs bytes [" + std::to_string(offset) + ", " +
               std::to_string(offset + n) + ") but the file has " + std::to_string(size_));
    if (n == 0) return;
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset), std::ios::beg);
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in_ || static_cast<std::size_t>(in_.gcount()) != n)
      fail(where_, "path", path_, std::string("read error in ") + what);
  }

  /// Reads `n` elements of dtype `t` at `offset` and converts them to Scalar in chunks of
  /// at most 1 MiB (the only buffer); a value that does not convert is an error naming its
  /// index and its value (element_text).
  template <class Scalar>
  void read_elements(std::uint64_t offset, dtype t, Index n, Scalar* dst,
                     const std::string& dtype_label) {
    const std::size_t w = dtype_size(t);
    const Index chunk = static_cast<Index>((std::size_t{1} << 20) / w);
    std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(n, chunk)) * w);
    for (Index i0 = 0; i0 < n; i0 += chunk) {
      const Index m = std::min(chunk, n - i0);
      const std::size_t bytes = static_cast<std::size_t>(m) * w;
      read(offset + static_cast<std::uint64_t>(i0) * w, buf.data(), bytes, "the tensor data");
      const Index bad = decode_elements(t, buf.data(), m, dst + i0);
      if (bad >= 0)
        fail(where_, "path", path_,
             "dtype " + dtype_label + ": element " + std::to_string(i0 + bad) + " (" +
                 element_text(t, buf.data() + static_cast<std::size_t>(bad) * w) +
                 ") does not convert exactly to the requested " + dtype_name(dtype_of<Scalar>()));
    }
  }

 private:
  std::ifstream in_;
  std::string path_;
  const char* where_;
  std::uint64_t size_ = 0;
};

/// Writes `bytes` to `path` (created or truncated); throws posenc::error on failure.
inline void write_file(const std::string& path, const std::vector<unsigned char>& bytes,
                       const char* where) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(where, "path", path, "cannot open the file for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(where, "path", path, "write failed");
}

/// Appends `n` Scalars encoded as dtype `t` to `bytes`; a value that does not convert is
/// an error "<where>: <param> = <value>: element i (v) does not convert to dtype t".
template <class Scalar>
void append_elements(std::vector<unsigned char>& bytes, const Scalar* data, Index n, dtype t,
                     const char* where, const char* param, const std::string& value) {
  const std::size_t w = dtype_size(t);
  const std::size_t start = bytes.size();
  bytes.resize(start + static_cast<std::size_t>(n) * w);
  if (t == dtype_of<Scalar>() && host_is_little_endian()) {
    if (n > 0) std::memcpy(bytes.data() + start, data, static_cast<std::size_t>(n) * w);
    return;
  }
  for (Index i = 0; i < n; ++i) {
    if (!encode_element(t, data[i], bytes.data() + start + static_cast<std::size_t>(i) * w))
      fail(where, param, value,
           "element " + std::to_string(i) + " (" + value_text(data[i]) +
               ") does not convert to dtype " + dtype_name(t));
  }
}

}  // namespace detail
}  // namespace io
}  // namespace posenc
