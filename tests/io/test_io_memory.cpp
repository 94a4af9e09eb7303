// How much memory the readers take from the sizes a file declares (issue 25): this
// executable replaces the global operator new / delete with counting ones and checks the
// peak of live heap bytes while a header is read against a multiple of its length.
//
// Before issue 25 the safetensors header became a json_value tree (about 90 bytes per JSON
// value, so a 10 MB header of "[0,0,...]" took 750 MB), and an .npy shape tuple was stored
// whole before its 64-axis limit was checked.

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <posenc/io/npy.hpp>
#include <posenc/io/safetensors.hpp>
#include <string>

#include "io_test_util.hpp"
#include "support/catch.hpp"
#include "support/check.hpp"

namespace {

std::atomic<std::size_t> g_live{0};
std::atomic<std::size_t> g_peak{0};

// Each block carries its size in front (16 bytes keep malloc's alignment).
constexpr std::size_t kPrefix = 16;

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n + kPrefix);
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<std::size_t*>(p) = n;
  const std::size_t live = g_live.fetch_add(n) + n;
  std::size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + kPrefix;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kPrefix;
  g_live.fetch_sub(*reinterpret_cast<std::size_t*>(base));
  std::free(base);
}

/// The peak of live heap bytes above the level at the call, while `f` runs.
template <class F>
std::size_t peak_bytes_during(F&& f) {
  const std::size_t base = g_live.load();
  g_peak.store(base);
  f();
  return g_peak.load() - base;
}

/// The message of the posenc::error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const posenc::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Every replaceable form but the over-aligned ones (which pair among themselves), so that
// no block crosses between this allocator and another (a sanitizer's, say).
void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace io = posenc::io;
using posenc_test::safetensors_bytes;
using posenc_test::write_bytes;

TEST_CASE("io memory: the safetensors header is read in place, not as a tree",
          "[io][safetensors][memory]") {
  // 8 MB of "0," in one array: the entry is wrong (not an object), but the header is valid
  // JSON, so all of it is parsed before that is found.
  std::string json = "{\"a\":[0";
  while (json.size() < 8000000) json += ",0";
  json += "]}";
  const std::string path = write_bytes("mem_array.safetensors", safetensors_bytes(json, ""));
  std::string what;
  const std::size_t peak =
      peak_bytes_during([&] { what = error_of([&] { (void)io::read_safetensors_header(path); }); });
  CHECK(what.find("tensor \"a\": entry must be an object") != std::string::npos);
  INFO("header " << json.size() << " bytes, peak " << peak << " bytes");
  CHECK(peak < 2 * json.size() + (1u << 20));  // the text, and little else (was ~75x)
}

TEST_CASE("io memory: a header of many tensors costs a few times its length",
          "[io][safetensors][memory]") {
  const std::string bytes = posenc_test::many_tensors(20000);
  const std::string path = write_bytes("mem_many.safetensors", bytes);
  std::size_t tensors = 0;
  const std::size_t peak = peak_bytes_during([&] {
    const io::safetensors_file f(path);
    tensors = f.size();
  });
  CHECK(tensors == 20000);
  INFO("file " << bytes.size() << " bytes, peak " << peak << " bytes");
  // The text, the key set while it is validated, then the entries and the name index
  // (was ~20x with the tree).
  CHECK(peak < 8 * bytes.size());
}

TEST_CASE("io memory: an .npy shape stops at its 65th extent", "[io][npy][memory]") {
  // A 12 MB header whose shape tuple has four million extents.
  std::string shape = "(";
  while (shape.size() < 12000000) shape += "1, ";
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + "), }";
  const std::string path = write_bytes("mem_rank.npy", posenc_test::npy_raw(dict, "", 2));
  std::string what;
  const std::size_t peak =
      peak_bytes_during([&] { what = error_of([&] { (void)io::read_npy_info(path); }); });
  CHECK(what.find("shape has more than 64 axes") != std::string::npos);
  INFO("header " << dict.size() << " bytes, peak " << peak << " bytes");
  CHECK(peak < dict.size() + (1u << 20));  // the header text only (was 5x: the extents)
}
