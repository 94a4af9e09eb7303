#pragma once
/// \file
/// Compile-time configuration: instruction-set feature macros and host/device markers.
///
/// Every POSENC_ARCH_* macro is always defined, as 0 or 1, from the compiler's own
/// predefines (so the consumer's -march decides; posenc never forces ISA flags).
/// A user may pre-define one to 0 to keep a backend out of the build.

#ifndef POSENC_ARCH_AVX2
#if defined(__AVX2__) && defined(__FMA__)
#define POSENC_ARCH_AVX2 1
#else
#define POSENC_ARCH_AVX2 0
#endif
#endif

#ifndef POSENC_ARCH_AVX512
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#define POSENC_ARCH_AVX512 1
#else
#define POSENC_ARCH_AVX512 0
#endif
#endif

#ifndef POSENC_ARCH_NEON
#if defined(__ARM_NEON) && defined(__aarch64__)
#define POSENC_ARCH_NEON 1
#else
#define POSENC_ARCH_NEON 0
#endif
#endif

#ifndef POSENC_ARCH_CUDA
#if defined(__CUDACC__)
#define POSENC_ARCH_CUDA 1
#else
#define POSENC_ARCH_CUDA 0
#endif
#endif

#if POSENC_ARCH_AVX512 && !POSENC_ARCH_AVX2
#error \
    "posenc: POSENC_ARCH_AVX512 requires POSENC_ARCH_AVX2 (AVX-512 backend builds on the AVX2 one)"
#endif
#if POSENC_ARCH_NEON && (POSENC_ARCH_AVX2 || POSENC_ARCH_AVX512)
#error "posenc: NEON and x86 SIMD backends cannot both be enabled"
#endif

/// Marks a function usable from host and device code: one copy of the maths.
#if defined(__CUDACC__)
#define POSENC_HOST_DEVICE __host__ __device__
#else
#define POSENC_HOST_DEVICE
#endif

/// Forces inlining of small kernels in hot loops.
#if defined(_MSC_VER)
#define POSENC_INLINE __forceinline
#else
#define POSENC_INLINE inline __attribute__((always_inline))
#endif

/// Unrolls the loop after it completely (a constant trip count): the loops of a register
/// tile over its rows and columns, which GCC at -O2 keeps as loops, and the tile then lives
/// in memory (3-4x slower kernels than at -O3; docs/benchmarks.md). Nothing in a CUDA
/// translation unit, whose front end knows neither GCC's pragma nor passes `unroll` on to
/// GCC without a warning (the host kernels are not what such a unit runs fast).
#if defined(__clang__)
#define POSENC_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define POSENC_UNROLL
#elif defined(__GNUC__)
#define POSENC_UNROLL _Pragma("GCC unroll 64")
#else
#define POSENC_UNROLL
#endif

/// The same for a lambda, after its parameter list: `[&](P x) POSENC_LAMBDA_INLINE { ... }`.
/// GCC at -O2 leaves a kernel's lambda that is called twice (main loop and tail) out of line,
/// and then its register tile goes through memory at every step.
#if defined(__GNUC__) || defined(__clang__)
#define POSENC_LAMBDA_INLINE __attribute__((always_inline))
#else
#define POSENC_LAMBDA_INLINE
#endif

/// Keeps a function out of line: a loop that only some calls take, kept from growing
/// the hot function it would join (GCC then inlines that function's kernels otherwise).
#if defined(_MSC_VER)
#define POSENC_NOINLINE __declspec(noinline)
#else
#define POSENC_NOINLINE __attribute__((noinline))
#endif

/// Hints the cache to fetch the line at address p for reading, or (_WRITE) for writing,
/// or (_L2) for reading into the outer caches only, for data needed later than soon
/// (no-ops where unsupported). POSENC_PREFETCH_KEEP(p), once after a function's
/// prefetches, keeps calls to that function: GCC counts a prefetch as free of side
/// effects, so it found a function that only prefetches pure and deleted every call to it
/// as dead code (all of decode's prefetches in release builds, GCC 12 at -O1 and up,
/// until 2026-11-28; clang kept them). An empty volatile asm taking the address emits no
/// instruction.
#if defined(__GNUC__) || defined(__clang__)
#define POSENC_PREFETCH(p) __builtin_prefetch(p)
#define POSENC_PREFETCH_WRITE(p) __builtin_prefetch(p, 1)
#define POSENC_PREFETCH_L2(p) __builtin_prefetch(p, 0, 2)
#define POSENC_PREFETCH_KEEP(p) __asm__ volatile("" : : "r"(p))
#else
#define POSENC_PREFETCH(p) ((void)(p))
#define POSENC_PREFETCH_WRITE(p) ((void)(p))
#define POSENC_PREFETCH_L2(p) ((void)(p))
#define POSENC_PREFETCH_KEEP(p) ((void)(p))
#endif

/// A hook called at each kernel entry with the operation and the name of the tag whose
/// code runs: ("rope_rotate", "avx512") per token, ("sinusoidal_rows", ...) per call,
/// ("flash_tiles", ...) per block of query rows ("scalar" where the portable kernel takes
/// the call). Nothing by default. Tests define it (identically in every translation unit
/// of a program, before any posenc include) to see which kernel a call ran.
#ifndef POSENC_KERNEL_TRACE
#define POSENC_KERNEL_TRACE(op, arch) ((void)0)
#endif
