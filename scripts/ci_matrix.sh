#!/usr/bin/env bash
# CI matrix, run by .ci/run after the README test command (g++, baseline x86-64 flags).
# Each configuration builds the tests (no benchmarks, no examples unless noted) and runs them:
#
#   v3     g++      -march=x86-64-v3   AVX2 + FMA backend: only the tests that run SIMD
#                                      kernels ($simd_tests, as asan4). The other tests run
#                                      no AVX2 kernel of posenc's: the README build already
#                                      runs every test with g++, and asan every test with
#                                      AVX2 under clang++; building them a third time here
#                                      took v3 from 206 s to 448 s (2 cores, Nov 2026)
#   v4     g++      -march=x86-64-v4   AVX-512 backend: the tests whose programs run posenc's
#                                      kernels ($kernel_tests: the SIMD ones, the flash
#                                      kernel's users, backend selection) and the
#                                      self-checking examples (e.g. the N = 32768 flash run);
#                                      the rest is portable code the README build and asan
#                                      run (the reference attention, relative schemes, file
#                                      readers, CLI: 460 s of this build's 1200 s of CPU,
#                                      Zen 4, Dec 2026). Where the CPU cannot run it, only the
#                                      programs of the tests that run SIMD kernels are built
#   bf16   g++      -march=x86-64-v4 -mavx512bf16   the bfloat16 narrowing by vcvtneps2bf16
#                                      (POSENC_NATIVE_BF16): only the tests of the 16-bit
#                                      conversions, and only on a host with avx512_bf16
#   arm64  aarch64-linux-gnu-g++ (cmake/toolchain-aarch64.cmake), NEON backend, the tests
#          executed under qemu-aarch64: the tests that run SIMD kernels ($simd_tests), the
#          file readers (test_io*, the fuzz replays: byte order, unsigned char) and the
#          threaded paths (test_threads: a weaker memory order than x86's). The rest is
#          portable code the README build and asan already run; cross-building it too
#          cost most of this configuration's ~9 minutes
#   asan   clang++  -march=x86-64-v3 -O1 with AddressSanitizer and UndefinedBehaviorSanitizer
#                                      (any report fails the test), on the AVX2 kernels, the
#                                      portable code and the CLI's file parsing (the CLI and
#                                      tour tests). It is also the second compiler: every test
#                                      and warning through clang++ (ASAN_CXX=g++ picks GCC's
#                                      sanitizers instead; clang's build in half the time:
#                                      test_flash.cpp 199 s against 418 s). The numbered
#                                      examples and the MPI ring run in the README build
#                                      (their library paths are the tests'), and clang++
#                                      checks their warnings by -fsyntax-only (clang_syntax_*
#                                      tests): built under ASan they cost ~250 s of CPU;
#                                      so do the machine-code checks of a release build's
#                                      prefetches (*_prefetch_kept: g++'s, the README's)
#   clang  clang++  -march=x86-64-v3 -O2, the second compiler with its optimiser: not in the
#                                      default list (asan compiles the same code with clang),
#                                      run it by name
#   asan4  clang++  -march=x86-64-v4 -O1, the same sanitizers on the AVX-512 kernels: only the
#                                      tests that run SIMD kernels (GCC's sanitizers took
#                                      548 s to build them, clang's 305 s: 2 cores, Nov 2026;
#                                      ASAN_CXX=g++ picks GCC's, as for asan)
#   tsan   clang++  -march=x86-64-v3 -O1 -g with ThreadSanitizer: only test_threads (the
#                                      threaded flash prefill, decode over a kv_cache and a
#                                      rotary_policy shared by a call's threads), with
#                                      TSAN_OPTIONS=halt_on_error=1: any report fails it
#
# Each SIMD configuration tells the tests which backend its flags must select
# (POSENC_TEST_EXPECTED_BACKEND), so a build that silently fell back to scalar fails. On a
# CPU without AVX-512 F/BW/DQ/VL the v4 configuration is built (every warning and error
# still counts) but its tests are not run, and asan4 is skipped; the summary says so.
# The python reference checks (and the PyTorch parity one), the install/consumer tests (the strict-warnings ones compile
# with both compilers already), the nvcc compile of the maths layer and the doc-tests (the
# docs' examples, one program per page) do not depend on the flags; the README command runs
# them, so they are skipped here.
#
# Usage: scripts/ci_matrix.sh [config ...]     (default: v4 bf16 arm64 asan asan4 tsan; v3 and
#        clang by name: asan already runs every test on the AVX2 kernels, and .ci/run must
#        stay under 60 minutes on 2 cores)
# Needs: POSENC_EXTRA_PACKAGES="g++-aarch64-linux-gnu qemu-user clang libclang-rt-dev"
#        scripts/install_deps.sh (libclang-rt-dev: clang's sanitizer runtimes, only a
#        Recommends of clang)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="$(nproc)"
root="${CI_MATRIX_DIR:-build/ci}"
configs=("$@")
((${#configs[@]})) || configs=(v4 bf16 arm64 asan asan4 tsan)

# Tests only, optimised but without debug info (faster to build); asserts stay on.
common=(-G Ninja -DCMAKE_BUILD_TYPE=CI -DPOSENC_WARNINGS_AS_ERRORS=ON
        -DPOSENC_BUILD_TESTS=ON -DPOSENC_BUILD_BENCHMARKS=OFF -DPOSENC_BUILD_EXAMPLES=OFF
        -DPOSENC_INSTALL=OFF)
skip='^(reference_|consumer_|math_device_compile$|doc_|torch_parity$)'
# the sanitizer configurations: a report aborts the test (-fno-sanitize-recover), and
# ASan's leak check is on by default (CMake passes these flags to the link step too, which
# links the sanitizer runtimes)
sanitize="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
tsan_flags="-O1 -g -fno-omit-frame-pointer -fsanitize=thread"
# GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsics (their unmasked
# forms start from _mm512_undefined_*()) once Eigen's AVX-512 reductions and transposes are
# inlined into a test: a known false positive in headers posenc does not own (posenc's packet
# layer avoids it). Shown, but not an error, in the -march=x86-64-v4 GCC configurations (v4,
# bf16; asan4 with ASAN_CXX=g++); the README, v3, clang, arm64, asan and clang's asan4
# builds keep them as errors.
avx512_warnings="-Wno-error=uninitialized -Wno-error=maybe-uninitialized"
only=''  # a configuration may run only the tests matching this (ctest -R)
skip_more=''  # and leave out those matching this too (ctest -E, beside $skip)
# the tests whose programs run SIMD kernels (v3, asan4; v4 where it cannot run)
simd_tests='^(test_sinusoidal|test_rotary|test_rotary_lowp|test_rope_scaling_apply|test_flash|test_flash_decode|test_flash_kernels|test_backend_simd|include_order)$'
# and those plus the other programs whose calls reach posenc's kernels (the flash kernel's
# users, backend selection, the prefetches kept in release code) and the self-checking
# examples (v4, on a CPU that runs it)
kernel_tests="${simd_tests%)\$}|test_core|test_backend_override|test_kv_cache|test_rotary_policy|test_merge|test_threads|test_hardening|flash_xl_rejected|flash_prefetch_kept|rope_prefetch_kept|example_[0-9][0-9]_.*|mpi_ring_attention_.*)\$"
build_only=''  # a configuration may be built without running its tests (the reason)
avx512_host=1
for f in avx512f avx512bw avx512dq avx512vl; do grep -qw "$f" /proc/cpuinfo || avx512_host=0; done
no_avx512="this CPU has no AVX-512 (F/BW/DQ/VL): built, tests not run"
json_py="$(command -v python3)"

summary=()
# CPU seconds (user + sys) used so far by this script's child processes, into $cpu.
# `times` must run in this shell (in a $(...) subshell it would see no children).
cpu_file="$(mktemp)"
trap 'rm -f "$cpu_file"' EXIT
cpu_now() {
  times > "$cpu_file"
  cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$cpu_file")
}
run_config() {
  local name="$1"
  shift
  local dir="$root/$name" start=$SECONDS cpu cpu0
  local select=(-E "$skip${skip_more:+|$skip_more}")
  if [[ -n "$only" ]]; then select+=(-R "$only"); fi
  cpu_now
  cpu0=$cpu
  echo "== ci_matrix: $name"
  cmake -S . -B "$dir" "${common[@]}" "$@"
  local built=$SECONDS
  if [[ "$name" == clang ]]; then
    cmake --build "$dir" -j "$jobs"
  else
    # only the executables the selected tests run (not the self-contained-header check,
    # which the README and clang builds compile): ask CTest which ones those are
    local targets known
    # the build's own targets (Ninja's listing): a path named in a test that is not one of
    # them (an output folder, say) is not built
    known=$(cmake --build "$dir" --target help | sed -n 's/^\([A-Za-z0-9_.+-]*\): phony$/\1/p' | tr '\n' ' ')
    targets=$(ctest --test-dir "$dir" --show-only=json-v1 "${select[@]}" | "$json_py" -c '
import json, os, sys
root = os.path.realpath(sys.argv[1])
names = set()
for test in json.load(sys.stdin)["tests"]:
    if "command" not in test:  # its executable is not built yet: target named as the test
        names.add(test["name"])
    for arg in test.get("command", []):
        # a path argument, or a -DVAR=path one (cmake -P scripts that run executables)
        path = arg.split("=", 1)[1] if arg.startswith("-D") and "=" in arg else arg
        if os.path.realpath(path).startswith(root + os.sep):
            names.add(os.path.basename(path))
print(" ".join(sorted(names & set(sys.argv[2].split()))))' "$dir" "$known")
    # shellcheck disable=SC2086
    cmake --build "$dir" -j "$jobs" --target $targets
  fi
  local tested=$SECONDS
  if [[ -n "$build_only" ]]; then
    echo "== ci_matrix: $name: $build_only"
  else
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${select[@]}"
  fi
  cpu_now
  # CPU time as well as wall time: on a shared machine wall time includes waiting for a core
  summary+=("$(printf '%-6s build %5d s  tests %5d s  total %5d s wall, %6d s CPU%s' "$name" \
    $((tested - built)) $((SECONDS - tested)) $((SECONDS - start)) $((cpu - cpu0)) \
    "${build_only:+  ($build_only)}")")
}

for c in "${configs[@]}"; do
  case "$c" in
    v3) only="$simd_tests" run_config v3 -DCMAKE_CXX_COMPILER=g++ \
          -DCMAKE_CXX_FLAGS_CI="-O2 -march=x86-64-v3" -DPOSENC_TEST_EXPECTED_BACKEND=avx2 ;;
    # where it cannot run, only the programs that instantiate the AVX-512 kernels are built
    # (the asan4 list plus the include-order pair): the rest compile no AVX-512 code
    v4) if ((avx512_host)); then v4_only="$kernel_tests"; else v4_only="$simd_tests"; fi
        # built only: -O0 compiles (and type-checks every AVX-512 intrinsic) in a third of the time
        if ((avx512_host)); then v4_opt=-O2; else v4_opt=-O0; fi
        only="$v4_only" build_only="$( ((avx512_host)) || echo "$no_avx512")" run_config v4 \
          -DCMAKE_CXX_COMPILER=g++ -DCMAKE_CXX_FLAGS_CI="$v4_opt -march=x86-64-v4 $avx512_warnings" \
          -DPOSENC_TEST_EXPECTED_BACKEND=avx512 -DPOSENC_BUILD_EXAMPLES="$( ((avx512_host)) && echo ON || echo OFF)" ;;
    # needs the instructions to run the tests: skipped (and said so) on other hosts
    bf16) if grep -qw avx512_bf16 /proc/cpuinfo; then
            only='^(test_backend_simd|test_rotary_lowp)$' run_config bf16 -DCMAKE_CXX_COMPILER=g++ \
              -DCMAKE_CXX_FLAGS_CI="-O2 -march=x86-64-v4 -mavx512bf16 $avx512_warnings" \
              -DPOSENC_TEST_EXPECTED_BACKEND=avx512 -DPOSENC_TEST_EXPECT_NATIVE_BF16=1
          else
            echo "== ci_matrix: bf16 skipped: this CPU has no avx512_bf16"
            summary+=("bf16   skipped: no avx512_bf16 on this CPU")
          fi ;;
    # clang also builds the examples (the CLI tests run), as the README build does with g++
    # (and so does asan, with clang++ by default)
    clang) run_config clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_CI="-O2 -march=x86-64-v3" \
          -DPOSENC_TEST_EXPECTED_BACKEND=avx2 -DPOSENC_BUILD_EXAMPLES=ON ;;
    arm64) only="${simd_tests%)\$}|test_io.*|test_threads|fuzz_replay_.*)\$" \
          run_config arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
          -DCMAKE_CXX_FLAGS_CI="-O2" -DPOSENC_PYTHON= \
          -DPOSENC_TEST_EXPECTED_BACKEND=neon ;;
    asan) skip_more='^(example_[0-9][0-9]_.*|mpi_ring_attention_.*|(flash|rope)_prefetch_kept)$' run_config asan -DCMAKE_CXX_COMPILER="${ASAN_CXX:-clang++}" -DCMAKE_CXX_FLAGS_CI="$sanitize -march=x86-64-v3" \
          -DPOSENC_TEST_EXPECTED_BACKEND=avx2 -DPOSENC_BUILD_EXAMPLES=ON ;;
        # needs the instructions to be of any use: the v4 build already compiles the same code
    asan4) if ((avx512_host)); then
             # GCC's AVX-512 intrinsics need avx512_warnings (above), clang's do not (clang++
             # also rejects the maybe-uninitialized name)
             asan4_cxx="${ASAN_CXX:-clang++}"
             asan4_warnings=''
             if [[ "${asan4_cxx##*/}" != clang* ]]; then asan4_warnings="$avx512_warnings"; fi
             only="$simd_tests" \
             run_config asan4 -DCMAKE_CXX_COMPILER="$asan4_cxx" \
               -DCMAKE_CXX_FLAGS_CI="$sanitize -march=x86-64-v4 $asan4_warnings" \
               -DPOSENC_TEST_EXPECTED_BACKEND=avx512
           else
             echo "== ci_matrix: asan4 skipped: $no_avx512"
             summary+=("asan4  skipped: this CPU has no AVX-512 (the v4 build compiles the same code)")
           fi ;;
    # the sanitizer stops at its first report (halt_on_error) and the test fails
    tsan) TSAN_OPTIONS="halt_on_error=1${TSAN_OPTIONS:+ $TSAN_OPTIONS}" only='^test_threads$' \
          run_config tsan -DCMAKE_CXX_COMPILER=clang++ \
            -DCMAKE_CXX_FLAGS_CI="$tsan_flags -march=x86-64-v3" \
            -DPOSENC_TEST_EXPECTED_BACKEND=avx2 ;;
    *) echo "ci_matrix: unknown configuration '$c' (v3 v4 bf16 clang arm64 asan asan4 tsan)" >&2; exit 2 ;;
  esac
done

echo "== ci_matrix timings"
printf '%s\n' "${summary[@]}"
