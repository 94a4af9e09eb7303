#pragma once
/// \file
/// The RoPE rotation of every backend, from one include: kernels::rope_rotate(tag, token)
/// for the portable kernel (backend/scalar/rotary.hpp, every tag) and the packet kernel
/// (backend/simd/rotary.hpp, every tag with packets in this compilation). Code that
/// rotates includes this header, never a single backend's, so the same call picks the
/// same kernel in every translation unit.

#include "scalar/rotary.hpp"
#include "simd/rotary.hpp"

namespace posenc {
namespace backend {
/// The former homes of the kernel's vocabulary, beside the tags (now posenc::kernels and
/// core/types.hpp).
template <class T, class C = T>
using rope_token [[deprecated("use posenc::kernels::rope_token")]] = kernels::rope_token<T, C>;
template <class T>
using rope_real_t [[deprecated("use posenc::real_t")]] = real_t<T>;
}  // namespace backend
}  // namespace posenc
