#include <cstdint>
#include <limits>
#include <new>
#include <posenc/core/allocator.hpp>
#include <vector>

#include "support/catch.hpp"

namespace {

bool on_huge_boundary(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % posenc::huge_page_bytes == 0;
}

}  // namespace

TEST_CASE("huge_page_allocator: large blocks start on a 2 MiB boundary and are usable to the end",
          "[core][allocator]") {
  posenc::huge_page_allocator<float> a;
  const std::size_t n = posenc::huge_page_bytes / sizeof(float) + 3;  // past one huge page
  float* p = a.allocate(n);
  CHECK(on_huge_boundary(p));
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(i);  // sanitizers: in bounds
  CHECK(p[n - 1] == static_cast<float>(n - 1));
  a.deallocate(p, n);
}

TEST_CASE("huge_page_allocator: small blocks, vectors growing past the threshold, overflow",
          "[core][allocator]") {
  posenc::huge_page_allocator<double> a;
  double* p = a.allocate(5);
  p[4] = 1.5;
  CHECK(p[4] == 1.5);
  a.deallocate(p, 5);

  // a vector that starts small and grows into huge blocks keeps its values (each
  // reallocation frees the old block the way it was allocated: ASan checks the pairing)
  std::vector<std::int32_t, posenc::huge_page_allocator<std::int32_t>> v;
  const std::size_t n = 3 * posenc::huge_page_bytes / sizeof(std::int32_t);
  for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<std::int32_t>(i * 7));
  CHECK(on_huge_boundary(v.data()));
  bool same = true;
  for (std::size_t i = 0; i < n; ++i) same = same && v[i] == static_cast<std::int32_t>(i * 7);
  CHECK(same);
  v.resize(10);
  v.shrink_to_fit();  // back below the threshold: operator new again
  CHECK(v[9] == 63);

  // sizes whose bytes, or their rounding up to whole huge pages, do not fit a size_t
  CHECK_THROWS_AS(a.allocate(std::numeric_limits<std::size_t>::max() / 4), std::bad_alloc);
  posenc::huge_page_allocator<float> f;
  CHECK_THROWS_AS(f.allocate(std::numeric_limits<std::size_t>::max() / sizeof(float)),
                  std::bad_alloc);
  CHECK_THROWS_AS(f.allocate(std::numeric_limits<std::size_t>::max() / sizeof(float) - 8),
                  std::bad_alloc);
  CHECK(posenc::huge_page_allocator<float>() == posenc::huge_page_allocator<double>());
}
