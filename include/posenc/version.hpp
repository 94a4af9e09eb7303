#pragma once
/// \file
/// The library version, written once; CMake reads it from here (the three
/// `#define POSENC_VERSION_<PART> <n>` lines).
///
///     #if POSENC_VERSION >= 200  // posenc 0.2.0 or later
///     static_assert(posenc::version().minor >= 2);
///     #endif

/// Major version: changes when the API breaks.
#define POSENC_VERSION_MAJOR 0
/// Minor version: new features, the API kept.
#define POSENC_VERSION_MINOR 2
/// Patch version: fixes only.
#define POSENC_VERSION_PATCH 0
/// The version as one integer for `#if`: major * 10000 + minor * 100 + patch (0.2.0 is 200).
#define POSENC_VERSION \
  (POSENC_VERSION_MAJOR * 10000 + POSENC_VERSION_MINOR * 100 + POSENC_VERSION_PATCH)
/// The version as "major.minor.patch".
#define POSENC_VERSION_STRING "0.2.0"

namespace posenc {

/// Version as "major.minor.patch".
inline constexpr const char* version_string = POSENC_VERSION_STRING;

/// The library version as numbers (the POSENC_VERSION_* macros).
struct version_info {
  int major;
  int minor;
  int patch;
};

/// The version of the posenc headers this translation unit was compiled with.
constexpr version_info version() noexcept {
  return {POSENC_VERSION_MAJOR, POSENC_VERSION_MINOR, POSENC_VERSION_PATCH};
}

}  // namespace posenc
