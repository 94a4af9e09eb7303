// Uses the installed headers end to end and checks one known value.
#include <cmath>
#include <cstdio>
#include <posenc/posenc.hpp>

int main() {
  constexpr posenc::version_info v = posenc::version();
  static_assert(POSENC_VERSION == v.major * 10000 + v.minor * 100 + v.patch,
                "the installed version.hpp agrees with itself");
  std::printf("posenc %s (%d.%d.%d), backend %s\n", posenc::version_string, v.major, v.minor,
              v.patch, posenc::default_backend::name());
  try {
    posenc::detail::fail("consumer", "dim", 7, "must be even");
  } catch (const posenc::error& e) {
    std::printf("error type ok: %s\n", e.what());
  }
  return 0;
}
