#include <posenc/version.hpp>
#include <string>

#include "support/catch.hpp"

// The macros, the function and the string say the same version, and the CMake project
// (which reads the macros from version.hpp) agrees with all of them.
TEST_CASE("version macros, version() and version_string agree", "[core][version]") {
  constexpr posenc::version_info v = posenc::version();
  STATIC_REQUIRE(v.major == POSENC_VERSION_MAJOR);
  STATIC_REQUIRE(v.minor == POSENC_VERSION_MINOR);
  STATIC_REQUIRE(v.patch == POSENC_VERSION_PATCH);
  STATIC_REQUIRE(POSENC_VERSION == v.major * 10000 + v.minor * 100 + v.patch);
  STATIC_REQUIRE(noexcept(posenc::version()));
  const std::string dotted =
      std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch);
  CHECK(dotted == posenc::version_string);
  CHECK(dotted == POSENC_VERSION_STRING);
  CHECK(dotted == POSENC_TEST_PROJECT_VERSION);
  // Every part fits the two decimal digits POSENC_VERSION gives minor and patch.
  CHECK(v.minor < 100);
  CHECK(v.patch < 100);
}
