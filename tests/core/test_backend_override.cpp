// Compiled with -DPOSENC_DEFAULT_BACKEND=scalar: the macro overrides the default.
#include <posenc/core/backend.hpp>
#include <type_traits>

#include "support/catch.hpp"

TEST_CASE("POSENC_DEFAULT_BACKEND overrides the default backend", "[core][backend]") {
  STATIC_REQUIRE(std::is_same_v<posenc::default_backend, posenc::backend::scalar>);
}
