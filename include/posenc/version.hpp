#pragma once
/// \file
/// The library version, written once; CMake reads it from here.

#define POSENC_VERSION_MAJOR 0
#define POSENC_VERSION_MINOR 2
#define POSENC_VERSION_PATCH 0
#define POSENC_VERSION_STRING "0.2.0"

namespace posenc {
/// Version as "major.minor.patch".
inline constexpr const char* version_string = POSENC_VERSION_STRING;
}  // namespace posenc
