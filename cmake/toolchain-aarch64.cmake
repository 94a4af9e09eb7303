# Cross-compiling posenc's tests for AArch64 (the NEON backend) with Debian's
# g++-aarch64-linux-gnu, running them under qemu-user:
#   cmake -S . -B build/arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake ...
#   ctest --test-dir build/arm64        (CTest prefixes each test with qemu-aarch64)
# Eigen and Catch2 are header-only, so the host's copies under /usr serve the target too.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(POSENC_AARCH64_TRIPLE aarch64-linux-gnu CACHE STRING "GNU triple of the AArch64 cross toolchain")
set(CMAKE_C_COMPILER ${POSENC_AARCH64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${POSENC_AARCH64_TRIPLE}-g++)

# Target libraries (libc, libstdc++, libpthread) from the cross sysroot; headers and CMake
# package files (Eigen3, Catch2) may come from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${POSENC_AARCH64_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# Tests run through qemu-user with the cross sysroot's dynamic loader and libraries.
find_program(POSENC_QEMU_AARCH64 qemu-aarch64)
if(POSENC_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${POSENC_QEMU_AARCH64} -L /usr/${POSENC_AARCH64_TRIPLE})
endif()
