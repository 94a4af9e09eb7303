#pragma once
// What the fuzz harnesses share: the rule for exceptions (posenc::error is the answer to bad
// input; anything else, std::bad_alloc included, aborts so that libFuzzer, or the replay
// driver, reports the input) and a per-process file for the readers that take a path.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <posenc/core/error.hpp>
#include <posenc/io/tensor.hpp>
#include <random>
#include <string>
#include <system_error>
#include <typeinfo>

namespace posenc_fuzz {

/// Stops the process with a message on stderr: libFuzzer saves the input as a crash, the
/// replay driver fails its test.
[[noreturn]] inline void fail(const char* step, const std::string& what) {
  std::fprintf(stderr, "posenc fuzz: %s: %s\n", step, what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Runs `body`; an exception of one of the `Accepted` types (default posenc::error, the
/// library's documented answer to bad input) is the expected outcome for a bad input. Any
/// other exception (std::bad_alloc, std::length_error, std::bad_variant_access, ...) is a
/// finding: fail() names the step, the exception's type and its message.
/// Returns true when `body` returned normally.
template <class... Accepted, class Body>
bool guarded(const char* step, Body&& body) {
  try {
    body();
    return true;
  } catch (const std::exception& e) {
    if constexpr (sizeof...(Accepted) == 0) {
      if (dynamic_cast<const posenc::error*>(&e) != nullptr) return false;
    } else {
      if ((... || (dynamic_cast<const Accepted*>(&e) != nullptr))) return false;
    }
    fail(step, std::string("unexpected exception ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    fail(step, "unexpected exception of a type not derived from std::exception");
  }
}

/// Runs `body`, which must not throw at all (e.g. writing back a tensor just read): any
/// exception, posenc::error included, is a finding.
template <class Body>
void must(const char* step, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    fail(step, std::string("exception ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    fail(step, "exception of a type not derived from std::exception");
  }
}

/// True when two tensors hold the same shape and the same bytes (NaN payloads included).
template <class Scalar>
bool same_values(const posenc::io::tensor<Scalar>& a, const posenc::io::tensor<Scalar>& b) {
  return a.shape == b.shape && a.data.size() == b.data.size() &&
         (a.data.empty() ||
          std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(Scalar)) == 0);
}

/// A file holding the current input, for readers that take a path. Its name carries a
/// random tag drawn once per process, so harnesses running side by side (two fuzzers,
/// libFuzzer's -jobs, parallel CTest) never share one. It lives in $TMPDIR if set, else in
/// /dev/shm where that exists (memory), else in the system's temporary folder; it is
/// removed when the process exits normally.
class input_file {
 public:
  /// `stem` and `extension` name the file, e.g. ("npy", ".npy").
  input_file(const char* stem, const char* extension) {
    std::random_device rd;
    const std::uint64_t tag = (std::uint64_t{rd()} << 32) ^ rd();
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(tag));
    path_ = (folder() / (std::string("posenc-fuzz-") + stem + "-" + hex + extension)).string();
    std::ofstream create(path_, std::ios::binary);
    if (!create) fail("input_file", "cannot create " + path_);
  }
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  ~input_file() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }

  /// Replaces the file's contents with `size` bytes at `data`; returns its path.
  /// Overwritten in place, then cut to size: truncating to zero before writing would make
  /// ext4 flush the file at every close (its replace-via-truncate rule), ~3 ms an input.
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    std::fstream out(path_, std::ios::binary | std::ios::in | std::ios::out);
    if (size > 0)
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    std::error_code ec;
    if (out) std::filesystem::resize_file(path_, size, ec);
    if (!out || ec) fail("input_file", "cannot write " + path_);
    return path_;
  }

  const std::string& path() const noexcept { return path_; }

 private:
  static std::filesystem::path folder() {
    if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') return tmp;
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec)) return "/dev/shm";
    return std::filesystem::temp_directory_path();
  }

  std::string path_;
};

}  // namespace posenc_fuzz
