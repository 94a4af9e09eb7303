#pragma once
/// \file
/// The running CPU's maker, family and model, and the tuning choices that follow from them
/// where a backend tag (fixed at compile time: core/backend.hpp) leaves one open. An AVX-512
/// build runs on Intel's and AMD's cores alike, and they differ in what their memory
/// systems favour: on the 2-core Intel Xeon measured here (docs/benchmarks.md) one core
/// reads a single ascending stream at about half the rate of four; Zen 5 needs rows asked
/// for ahead that Zen 3's and Zen 4's prefetchers bring alone.
///
///     cpu::maker_of_this_cpu()     intel, amd or unknown (CPUID's vendor string; unknown
///                                  off x86)
///     cpu::family_of_this_cpu()    CPUID's family and model (0 off x86)
///     cpu::model_of_this_cpu()
///     cpu::tuning()                the choices in effect (cpu::settings), found from the
///                                  maker, family and model on first use; a program (a
///                                  test, a benchmark) may set them before its calls
#include <atomic>
#include <cstring>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define POSENC_CPUID_GNU 1
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <intrin.h>
#define POSENC_CPUID_MSVC 1
#endif

namespace posenc {
namespace cpu {

/// Who made the CPU this program runs on, as far as the tuning choices care.
enum class maker { unknown, intel, amd };

/// The running CPU's maker, from CPUID leaf 0's vendor string (unknown off x86).
inline maker maker_of_this_cpu() noexcept {
  char id[13] = {};
#if defined(POSENC_CPUID_GNU)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return maker::unknown;
  std::memcpy(id, &b, 4);
  std::memcpy(id + 4, &d, 4);
  std::memcpy(id + 8, &c, 4);
#elif defined(POSENC_CPUID_MSVC)
  int r[4] = {};
  __cpuid(r, 0);
  std::memcpy(id, &r[1], 4);
  std::memcpy(id + 4, &r[3], 4);
  std::memcpy(id + 8, &r[2], 4);
#else
  return maker::unknown;
#endif
  if (std::strcmp(id, "GenuineIntel") == 0) return maker::intel;
  if (std::strcmp(id, "AuthenticAMD") == 0) return maker::amd;
  return maker::unknown;
}

namespace detail {
/// CPUID leaf 1's EAX, the processor signature that family_of_this_cpu and
/// model_of_this_cpu read their fields from; 0 off x86 (every field then reads 0).
inline unsigned signature_of_this_cpu() noexcept {
  unsigned eax = 0;
#if defined(POSENC_CPUID_GNU)
  unsigned b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &eax, &b, &c, &d)) return 0;
#elif defined(POSENC_CPUID_MSVC)
  int r[4] = {};
  __cpuid(r, 1);
  eax = static_cast<unsigned>(r[0]);
#endif
  return eax;
}
}  // namespace detail

/// The running CPU's family as its maker numbers it (CPUID leaf 1: the base family, plus
/// the extended family where the base reads 15, so AMD's Zen 3 and Zen 4 are 25 and Zen 5
/// is 26); 0 off x86.
inline unsigned family_of_this_cpu() noexcept {
  const unsigned eax = detail::signature_of_this_cpu();
  const unsigned base = (eax >> 8) & 0xFu;
  return base == 0xFu ? base + ((eax >> 20) & 0xFFu) : base;
}

/// The running CPU's model within its family (CPUID leaf 1: the base model, with the
/// extended model as its high four bits where the base family reads 6 or 15, as Linux's
/// /proc/cpuinfo gives it); 0 off x86. AMD's family 25 holds two generations: Zen 3 (models
/// 0x00-0x0F, 0x20-0x5F) and Zen 4 (0x10-0x1F, 0x60-0xAF).
inline unsigned model_of_this_cpu() noexcept {
  const unsigned eax = detail::signature_of_this_cpu();
  const unsigned base_family = (eax >> 8) & 0xFu;
  const unsigned model = (eax >> 4) & 0xFu;
  return base_family == 6u || base_family == 15u ? model | (((eax >> 16) & 0xFu) << 4) : model;
}

/// Tuning choices that depend on the running CPU rather than on the instruction set. Every
/// choice gives the same bits; only the speed differs. Atomic so that reading them in a
/// kernel's setup is safe while another thread sets them (a call already running keeps
/// what it read).
struct settings {
  /// Decode's GQA block kernels on AVX-512 (backend/scalar/flash.hpp, accumulate_heads,
  /// head-major K/V): take a key tile's dots as four runs a quarter of the tile apart
  /// (simd::dot_block_runs) and ask for each key's value row beside its dot, instead
  /// of one run of neighbouring keys with the rows asked for 64 keys ahead. On the Intel
  /// Xeon one query's GQA group of four ran 1.2-1.5x so (calls alternated in one process),
  /// on Zen 5 1.31-1.51x with float rows of 128 values (16-bit ones 1.03-1.14x) but 0.80x
  /// with rows of 64 (decode_key_runs_min_values), and on Zen 4 1.37-2.36x on every GQA
  /// row measured (float, half and bfloat16, d 64 and 128, 1 to 8 queries, 1 and 2
  /// threads; processes alternated, docs/benchmarks.md). On AVX2, whose float GQA dots
  /// take two runs on every CPU, it asks for the value rows beside them the same way (the
  /// Intel Xeon: 1.09-1.17x from 16k keys, 1.03x at 4k keys on one thread, 0.95x on two;
  /// Zen 4's AVX2 builds 1.11-1.28x on float rows of 128, 0.76-1.09x on the rest; Zen 3
  /// keeps its spread value blocks; Zen 5's AVX2 builds not measured). True on Intel CPUs,
  /// AMD's Zen 4 (family 25, its models) and family 26 (Zen 5).
  std::atomic<bool> decode_key_runs{false};
  /// The shortest rows (values per key row) that take decode_key_runs where it is on: 0
  /// on Intel and Zen 4 (every d measured faster), 128 on Zen 5 (d 64 ran 0.80x with the
  /// runs).
  std::atomic<int> decode_key_runs_min_values{0};
  /// Decode's one-query MHA path over head-major K/V (backend/scalar/flash.hpp,
  /// accumulate_one_query; each head's rows back to back): how many bytes ahead in each
  /// row's stream the key and value rows are asked for again as they are read
  /// (simd::dot_axpy), 0 for none. Zen 5's hardware prefetchers left one core reading
  /// these four streams at about half its read roofline; 2 KiB ahead ran 1.17-1.70x at one
  /// and two threads over 4k to 64k keys (processes alternated, docs/benchmarks.md). On
  /// the Intel Xeon of model 207 2 KiB ran 1.07-1.41x (1 and 3 KiB less). 2048 on Intel
  /// CPUs and AMD's family 26 (Zen 5); 0 on other AMD CPUs, where the hardware alone kept
  /// up (Zen 3) or the hints cost more than they gave (Zen 4: 0.59-0.70x at one thread,
  /// 0.82-1.05x at two, medians of 4 rounds).
  std::atomic<int> decode_stream_prefetch{0};
  /// Decode's GQA key runs (decode_key_runs, head-major K/V): how many bytes ahead in each
  /// run its key rows are asked for too, a share at each step of the dot kernel beside the
  /// value rows (backend/scalar/flash.hpp, accumulate_heads), 0 for none. Zen 5's hardware
  /// prefetchers alone left the four runs of key rows late: 2 KiB ahead (4 float rows of
  /// 128) ran 1.08-1.29x at one and two threads over 4k to 64k keys, every one of 36
  /// rounds faster (processes alternated, docs/benchmarks.md). On the Intel Xeon of model
  /// 207 2, 4 and 8 rows ahead were within that host's noise (0.91-1.26x), and on Zen 4
  /// 2 KiB ran 0.87-1.17x (medians of 4 rounds, 10 of 16 rows slower): 2048 on AMD's
  /// family 26 (Zen 5), 0 elsewhere.
  std::atomic<int> decode_key_run_prefetch{0};
  /// Decode's GQA key runs with their value rows asked for beside the dots
  /// (decode_key_runs, head-major K/V): whether each tile's value pass asks for the next
  /// tile's key rows too, into L2 (backend/scalar/flash.hpp, accumulate_heads), a share at
  /// each step of the value kernel, in the order the next dot pass reads them. The value
  /// pass reads rows its tile's dot pass brought in, so without it the memory bus idled
  /// through a fifth of the time (Zen 4, one query's GQA group of four: dots 59 % of the
  /// samples, value rows 14 %). On Zen 4 one query's float rows of 128 ran 1.03-1.16x at
  /// one and two threads over 4k to 64k keys (two sets of 6 rounds, 53 of 72 rounds
  /// faster), half and bfloat16 1.02-1.08x; where the value pass is longer (4 and 8
  /// queries) or the rows shorter (64 values) 0.90-1.02x, and those keep the value pass as
  /// it was (kv_row_source::next_keys_in_value_pass; processes alternated,
  /// docs/benchmarks.md). Asked for into L1 instead, as on the Intel Xeon before, it lost
  /// (0.75-0.87x). True on AMD's Zen 4 (family 25, its models); not measured elsewhere.
  std::atomic<bool> decode_value_pass_key_prefetch{false};
  /// Decode's one-query MHA path over head-major K/V (attention/flash.hpp, decode;
  /// backend/scalar/flash.hpp, accumulate_one_query): how many heads it reads at a time,
  /// key by key across them, each head's key and value rows a stream of their own. Two
  /// heads' four streams ran 1.05-1.23x one head's two on Zen 3 (four heads' eight
  /// streams 0.84-0.94x); on Zen 4 one head ran 1.06-1.37x two (medians of 8 rounds at
  /// one and two threads over 4k to 64k keys, processes alternated; 118 of 168 rounds
  /// faster over four sets, docs/benchmarks-history.md); on Zen 5, once one head's query
  /// and output rows were held in registers over a run of keys (simd::dot_axpy_rows), one
  /// head ran 1.0-2.4x two over float, half and bfloat16 rows of 64 and 128 (the 36 rows
  /// of 1 and 2 threads over 4k to 64k keys, 3 rounds, medians 0.99-2.36, 99 of 108
  /// rounds faster; float rows of 128 over two sets of 6 rounds 0.92-1.21, 54 of 72). 1 on
  /// AMD's Zen 4 (family 25, its models) and family 26 (Zen 5), 2 elsewhere (the Intel
  /// Xeon not measured with the held rows); values under 1 read as 1.
  std::atomic<int> decode_one_query_heads{2};
  /// Decode's GQA groups over head-major K/V, and token-major K/V whose rows are a multiple
  /// of 4 KiB apart (the groups then in turn over 32 KiB of key rows: 1.06-1.34x on Zen 4;
  /// kv_row_source::group_rows_keys) (backend/scalar/flash.hpp, accumulate_heads):
  /// whether one query's group of 2 to 4 heads with rows of 64 or 128 values reads each
  /// tile's key rows and then its value rows whole, one row at a time in address order
  /// (simd::dot_group_rows, axpy_group_rows on AVX-512), instead of the block kernels'
  /// few rows side by side. Zen 4's hardware prefetchers keep up with the first order
  /// beside a group's FMAs and not with the second: a test program read 4 FMAs per packet
  /// of rows taken whole at the read roofline and 0.4 of it with 4 rows side by side. One
  /// query's float group of four, head-major, ran 1.11-1.29x (medians of 3 rounds, 4k to
  /// 64k keys, d 64 and 128, 1 and 2 threads; 0.99x at 4k keys on one thread; processes
  /// alternated), and 1.1-1.3x more (float) and 1.3-1.5x (half and bfloat16, which had
  /// kept the block kernels) once the group kernels kept their query and output rows in
  /// registers (docs/benchmarks.md). True on AMD's Zen 4 (family 25, its models); not
  /// measured elsewhere.
  std::atomic<bool> decode_group_rows{false};

  settings() noexcept = default;
  /// The choices for a CPU of this maker, family and model (family_of_this_cpu,
  /// model_of_this_cpu; the model matters only within AMD's family 25, Zen 3 or Zen 4).
  explicit settings(maker m, unsigned family = 0, unsigned model = 0) noexcept
      : decode_key_runs(m == maker::intel || zen4(m, family, model) || zen5(m, family)),
        decode_key_runs_min_values(zen5(m, family) ? 128 : 0),
        decode_stream_prefetch(intel_or_zen5(m, family) ? 2048 : 0),
        decode_key_run_prefetch(zen5(m, family) ? 2048 : 0),
        decode_value_pass_key_prefetch(zen4(m, family, model)),
        decode_one_query_heads(zen4(m, family, model) || zen5(m, family) ? 1 : 2),
        decode_group_rows(zen4(m, family, model)) {}

  /// Whether a CPU of AMD's family 25 is a Zen 4 (its models 0x10-0x1F and 0x60-0xAF;
  /// the rest of the family, 0x00-0x0F and 0x20-0x5F, is Zen 3).
  static constexpr bool zen4(maker m, unsigned family, unsigned model) noexcept {
    return m == maker::amd && family == 25 &&
           ((model >= 0x10 && model <= 0x1F) || (model >= 0x60 && model <= 0xAF));
  }

 private:
  static constexpr bool zen5(maker m, unsigned family) noexcept {
    return m == maker::amd && family == 26;
  }
  // the CPUs both of decode's head-major tunings were measured to pay on
  static constexpr bool intel_or_zen5(maker m, unsigned family) noexcept {
    return m == maker::intel || zen5(m, family);
  }
};

/// The settings in effect: on first use those of this CPU's maker, family and model.
inline settings& tuning() noexcept {
  static settings s(maker_of_this_cpu(), family_of_this_cpu(), model_of_this_cpu());
  return s;
}

}  // namespace cpu
}  // namespace posenc
