#include <cstring>
#include <fstream>
#include <posenc/backend/simd/packets.hpp>
#include <posenc/core/backend.hpp>
#include <posenc/core/cpu.hpp>
#include <string>
#include <type_traits>

#include "support/catch.hpp"

namespace {
// A kernel written only for the scalar tag serves every CPU tag: overload resolution
// picks the nearest base. A specialised overload wins for its own tag and descendants.
const char* which(posenc::backend::scalar const&) { return "scalar"; }
const char* which(posenc::backend::avx2 const&) { return "avx2"; }
}  // namespace

TEST_CASE("backend tags fall back to the nearest base kernel", "[core][backend]") {
  CHECK(std::strcmp(which(posenc::backend::scalar{}), "scalar") == 0);
  CHECK(std::strcmp(which(posenc::backend::avx2{}), "avx2") == 0);
  CHECK(std::strcmp(which(posenc::backend::avx512{}), "avx2") == 0);
  CHECK(std::strcmp(which(posenc::backend::neon{}), "scalar") == 0);
  STATIC_REQUIRE(std::is_base_of_v<posenc::backend::avx2, posenc::backend::avx512>);
  STATIC_REQUIRE(posenc::backend::scalar::supported());
}

TEST_CASE("the default backend follows the compiler flags", "[core][backend]") {
  STATIC_REQUIRE(posenc::default_backend::supported());
#if POSENC_ARCH_AVX512
  STATIC_REQUIRE(std::is_same_v<posenc::default_backend, posenc::backend::avx512>);
#elif POSENC_ARCH_AVX2
  STATIC_REQUIRE(std::is_same_v<posenc::default_backend, posenc::backend::avx2>);
#elif POSENC_ARCH_NEON
  STATIC_REQUIRE(std::is_same_v<posenc::default_backend, posenc::backend::neon>);
#else
  STATIC_REQUIRE(std::is_same_v<posenc::default_backend, posenc::backend::scalar>);
#endif
  INFO("default backend: " << posenc::default_backend::name());
  CHECK(std::strlen(posenc::default_backend::name()) > 0);
}

TEST_CASE("packet kernels run on the nearest tag that has packets", "[core][backend]") {
  namespace be = posenc::backend;
  using posenc::simd::packet_arch_t;
  // scalar has no packets: the portable kernels
  STATIC_REQUIRE(std::is_void_v<packet_arch_t<be::scalar>>);
#if POSENC_ARCH_AVX512
  STATIC_REQUIRE(std::is_same_v<packet_arch_t<be::avx512>, be::avx512>);
  STATIC_REQUIRE(std::is_same_v<packet_arch_t<be::avx2>, be::avx2>);
#elif POSENC_ARCH_AVX2
  // the avx512 tag named in an AVX2-only build runs the avx2 packets
  STATIC_REQUIRE(std::is_same_v<packet_arch_t<be::avx512>, be::avx2>);
  STATIC_REQUIRE(std::is_same_v<packet_arch_t<be::avx2>, be::avx2>);
  STATIC_REQUIRE(std::is_void_v<packet_arch_t<be::neon>>);
#elif POSENC_ARCH_NEON
  STATIC_REQUIRE(std::is_same_v<packet_arch_t<be::neon>, be::neon>);
  STATIC_REQUIRE(std::is_void_v<packet_arch_t<be::avx2>>);
#else
  STATIC_REQUIRE(std::is_void_v<packet_arch_t<be::avx2>>);
  STATIC_REQUIRE(std::is_void_v<packet_arch_t<be::avx512>>);
  STATIC_REQUIRE(std::is_void_v<packet_arch_t<be::neon>>);
#endif
  // a user's tag built on a packet tag runs that tag's packets
  struct my_tag : be::avx2 {};
  STATIC_REQUIRE(std::is_same_v<packet_arch_t<my_tag>, packet_arch_t<be::avx2>>);
}

TEST_CASE("the CPU's maker is read from CPUID and sets the tuning", "[core][backend]") {
  const posenc::cpu::maker m = posenc::cpu::maker_of_this_cpu();
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
  // the kernel's own reading of the same vendor string (absent under an emulator's
  // foreign /proc: then nothing to compare)
  std::ifstream info("/proc/cpuinfo");
  std::string line, vendor, family_line, model_line;
  while ((vendor.empty() || family_line.empty() || model_line.empty()) &&
         std::getline(info, line)) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
    if (line.rfind("cpu family", 0) == 0) family_line = line.substr(line.find(':') + 2);
    // "model\t\t: 17", not "model name"
    if (line.rfind("model", 0) == 0 && line.rfind("model name", 0) != 0)
      model_line = line.substr(line.find(':') + 2);
  }
  INFO("vendor_id: " << vendor << ", cpu family: " << family_line << ", model: " << model_line);
  if (vendor == "GenuineIntel") CHECK(m == posenc::cpu::maker::intel);
  if (vendor == "AuthenticAMD") CHECK(m == posenc::cpu::maker::amd);
  // the kernel's family is the same sum of CPUID's base and extended fields
  if (!vendor.empty() && !family_line.empty())
    CHECK(posenc::cpu::family_of_this_cpu() == static_cast<unsigned>(std::stoul(family_line)));
  // and its model the base model with the extended one above it (families 6 and 15 and up)
  if (!vendor.empty() && !model_line.empty())
    CHECK(posenc::cpu::model_of_this_cpu() == static_cast<unsigned>(std::stoul(model_line)));
#elif !defined(__x86_64__) && !defined(__i386__) && !defined(_M_X64) && !defined(_M_IX86)
  CHECK(m == posenc::cpu::maker::unknown);  // no CPUID off x86
  CHECK(posenc::cpu::family_of_this_cpu() == 0);
  CHECK(posenc::cpu::model_of_this_cpu() == 0);
#endif
  // Intel's settings take decode's key runs; the settings in effect are this CPU's until a
  // program sets them
  CHECK(posenc::cpu::settings(posenc::cpu::maker::intel).decode_key_runs);
  CHECK_FALSE(posenc::cpu::settings(posenc::cpu::maker::amd).decode_key_runs);
  CHECK_FALSE(posenc::cpu::settings(posenc::cpu::maker::unknown).decode_key_runs);
  // and AMD's family 26 (Zen 5) for rows of 128 values or more, and Zen 4 (family 25, its
  // models) for every row, not Zen 3 (family 25, the other models)
  using posenc::cpu::settings;
  CHECK(settings(posenc::cpu::maker::amd, 26).decode_key_runs);
  CHECK(settings(posenc::cpu::maker::amd, 26).decode_key_runs_min_values == 128);
  CHECK_FALSE(settings(posenc::cpu::maker::amd, 25).decode_key_runs);  // model 0: Zen 3
  for (unsigned zen4 : {0x10u, 0x11u, 0x1Fu, 0x61u, 0x74u, 0x78u, 0xA0u, 0xAFu}) {
    INFO("Zen 4 model " << zen4);
    CHECK(settings::zen4(posenc::cpu::maker::amd, 25, zen4));
    CHECK(settings(posenc::cpu::maker::amd, 25, zen4).decode_key_runs);
    CHECK(settings(posenc::cpu::maker::amd, 25, zen4).decode_key_runs_min_values == 0);
    // its other tunings stay off: both measured slower there
    CHECK(settings(posenc::cpu::maker::amd, 25, zen4).decode_stream_prefetch == 0);
    CHECK(settings(posenc::cpu::maker::amd, 25, zen4).decode_key_run_prefetch == 0);
    // and its value passes ask for the next tile's key rows
    CHECK(settings(posenc::cpu::maker::amd, 25, zen4).decode_value_pass_key_prefetch);
    // and one query's MHA reads one head at a time
    CHECK(settings(posenc::cpu::maker::amd, 25, zen4).decode_one_query_heads == 1);
    CHECK_FALSE(settings::zen4(posenc::cpu::maker::intel, 25, zen4));
    CHECK_FALSE(settings::zen4(posenc::cpu::maker::amd, 26, zen4));
  }
  for (unsigned zen3 : {0x00u, 0x01u, 0x08u, 0x0Fu, 0x21u, 0x44u, 0x50u, 0x5Fu, 0xB0u}) {
    INFO("not a Zen 4: model " << zen3);
    CHECK_FALSE(settings::zen4(posenc::cpu::maker::amd, 25, zen3));
    CHECK_FALSE(settings(posenc::cpu::maker::amd, 25, zen3).decode_key_runs);
    CHECK_FALSE(settings(posenc::cpu::maker::amd, 25, zen3).decode_value_pass_key_prefetch);
    CHECK(settings(posenc::cpu::maker::amd, 25, zen3).decode_one_query_heads == 2);
  }
  CHECK(settings(posenc::cpu::maker::intel, 6).decode_key_runs_min_values == 0);
  const unsigned family = posenc::cpu::family_of_this_cpu();
  const unsigned model = posenc::cpu::model_of_this_cpu();
  CHECK(posenc::cpu::tuning().decode_key_runs ==
        (m == posenc::cpu::maker::intel || settings::zen4(m, family, model) ||
         (m == posenc::cpu::maker::amd && family == 26)));
  CHECK(posenc::cpu::tuning().decode_key_runs_min_values ==
        settings(m, family, model).decode_key_runs_min_values);
  // decode's head-major stream prefetch: Intel's CPUs and AMD's family 26 (Zen 5), not
  // other AMD families nor unknown makers; the settings in effect are this CPU's maker's
  // and family's
  CHECK(posenc::cpu::settings(posenc::cpu::maker::amd, 26).decode_stream_prefetch == 2048);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::amd, 25).decode_stream_prefetch == 0);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::amd).decode_stream_prefetch == 0);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::intel, 6).decode_stream_prefetch == 2048);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::intel).decode_stream_prefetch == 2048);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::unknown, 26).decode_stream_prefetch == 0);
  CHECK(posenc::cpu::tuning().decode_stream_prefetch ==
        posenc::cpu::settings(m, family).decode_stream_prefetch);
  // the GQA key runs' key rows asked for ahead: AMD's family 26 (Zen 5) only
  CHECK(posenc::cpu::settings(posenc::cpu::maker::amd, 26).decode_key_run_prefetch == 2048);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::amd, 25).decode_key_run_prefetch == 0);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::intel, 6).decode_key_run_prefetch == 0);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::unknown, 26).decode_key_run_prefetch == 0);
  CHECK(posenc::cpu::tuning().decode_key_run_prefetch ==
        posenc::cpu::settings(m, family).decode_key_run_prefetch);
  // the next tile's key rows during the GQA value passes: Zen 4 only (not measured elsewhere)
  CHECK_FALSE(posenc::cpu::settings(posenc::cpu::maker::amd, 26).decode_value_pass_key_prefetch);
  CHECK_FALSE(
      posenc::cpu::settings(posenc::cpu::maker::intel, 6, 207).decode_value_pass_key_prefetch);
  CHECK_FALSE(
      posenc::cpu::settings(posenc::cpu::maker::unknown, 25, 0x11).decode_value_pass_key_prefetch);
  CHECK(posenc::cpu::tuning().decode_value_pass_key_prefetch == settings::zen4(m, family, model));
  // one query's MHA over head-major K/V: two heads at a time, one on Zen 4 and Zen 5
  CHECK(posenc::cpu::settings().decode_one_query_heads == 2);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::amd, 26).decode_one_query_heads == 1);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::amd, 26, 0x44).decode_one_query_heads == 1);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::intel, 6, 207).decode_one_query_heads == 2);
  CHECK(posenc::cpu::settings(posenc::cpu::maker::unknown, 25, 0x11).decode_one_query_heads == 2);
  CHECK(
      posenc::cpu::tuning().decode_one_query_heads ==
      (settings::zen4(m, family, model) || (m == posenc::cpu::maker::amd && family == 26) ? 1 : 2));
}
