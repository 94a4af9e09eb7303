#pragma once
// Which kernel ran. posenc calls POSENC_KERNEL_TRACE(op, arch) at every kernel entry
// (config.hpp); each translation unit of the include-order programs includes this file
// first, so the hook is defined the same way before any posenc header.
#include <cstdio>

namespace posenc_test {
inline const char* traced_op = "";
inline const char* traced_arch = "none";
inline void trace(const char* op, const char* arch) noexcept {
  traced_op = op;
  traced_arch = arch;
}
/// Prints "<what>: <op> <arch>" for the kernel the last call ran.
inline void report(const char* what) {
  std::printf("%s: %s %s\n", what, traced_op, traced_arch);
  traced_op = "";
  traced_arch = "none";
}
}  // namespace posenc_test

#define POSENC_KERNEL_TRACE(op, arch) ::posenc_test::trace(op, arch)
