#pragma once
// Helpers for the file-format tests: raw byte files and hand-built .npy headers.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace posenc_test {

/// Writes `bytes` verbatim to tmp_path(name) and returns that path.
inline std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = tmp_path(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
  return path;
}

/// The whole content of a file.
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Little-endian bytes of an unsigned value.
inline std::string le_bytes(std::uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

/// An .npy file with header text `dict` (padded with a newline, not aligned) and `data`.
inline std::string npy_raw(const std::string& dict, const std::string& data, int major = 1,
                           int minor = 0) {
  std::string s = std::string("\x93NUMPY", 6);
  s += static_cast<char>(major);
  s += static_cast<char>(minor);
  const std::string header = dict + "\n";
  s += le_bytes(header.size(), major == 1 ? 2 : 4);
  return s + header + data;
}

/// A .safetensors file's bytes from a header text (not padded) and a data buffer.
inline std::string safetensors_bytes(const std::string& json, const std::string& data) {
  return le_bytes(json.size(), 8) + json + data;
}

/// A .safetensors file of `n` one-element F32 tensors "t0", "t1", ... in that order, tensor
/// k holding the value k (exact in float for k < 2^24).
inline std::string many_tensors(std::size_t n) {
  std::string json = "{";
  std::string data(4 * n, '\0');
  for (std::size_t k = 0; k < n; ++k) {
    json += (k ? ",\"t" : "\"t") + std::to_string(k) +
            "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" + std::to_string(4 * k) + "," +
            std::to_string(4 * k + 4) + "]}";
    const float v = static_cast<float>(k);
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int b = 0; b < 4; ++b)
      data[4 * k + static_cast<std::size_t>(b)] = static_cast<char>(bits >> (8 * b));
  }
  return safetensors_bytes(json + "}", data);
}

/// `n` zero bytes.
inline std::string zeros(std::size_t n) { return std::string(n, '\0'); }

/// The test's value formulas (tests/reference/io_fixtures.py).
inline double ramp(std::int64_t i) { return 0.25 * static_cast<double>(i) - 1.5; }
inline std::int64_t iramp(std::int64_t i) { return (i - 3) * 1000003; }

/// Equality that treats two NaNs as equal and distinguishes signed zeros.
inline bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace posenc_test
