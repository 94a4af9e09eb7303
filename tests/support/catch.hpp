#pragma once
// One include for Catch2 v2 (Debian 2.13) and v3.
#if POSENC_CATCH_V3
#include <catch2/catch_all.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
