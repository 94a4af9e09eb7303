#pragma once
/// \file
/// Every packet type this compilation defines: one file per architecture, each empty
/// unless the compiler flags enable its instruction set (POSENC_ARCH_*). The vectorised
/// kernels include this, so each of them sees every architecture; a new CPU backend is a
/// tag (core/backend.hpp) and one packet file listed here.

#include <type_traits>

#include "../../core/backend.hpp"
#include "avx2.hpp"
#include "avx512.hpp"
#include "neon.hpp"
#include "packet.hpp"

namespace posenc {
namespace simd {

namespace detail {
template <class Tag, class Candidate>
inline constexpr bool serves_v = std::is_base_of_v<Candidate, Tag>&& has_packet_v<float, Candidate>;
}  // namespace detail

/// The architecture whose packets run a kernel called with tag Tag: Tag itself when this
/// compilation defines its packets, else the nearest base tag that has them (the avx512
/// tag in an AVX2-only build runs the avx2 packets), else void (the portable kernel).
/// Most derived first: a new architecture goes in this list.
template <class Tag>
using packet_arch_t = std::conditional_t<
    has_packet_v<float, Tag>, Tag,
    std::conditional_t<detail::serves_v<Tag, backend::avx512>, backend::avx512,
                       std::conditional_t<detail::serves_v<Tag, backend::avx2>, backend::avx2,
                                          std::conditional_t<detail::serves_v<Tag, backend::neon>,
                                                             backend::neon, void>>>>;

/// True when a call with tag Tag runs packet kernels (packet_arch_t is not void).
template <class Tag>
inline constexpr bool has_packet_arch_v = !std::is_void_v<packet_arch_t<Tag>>;

}  // namespace simd
}  // namespace posenc
