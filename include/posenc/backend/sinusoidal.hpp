#pragma once
/// \file
/// The sinusoidal-table kernel of every backend, from one include:
/// kernels::sinusoidal_rows(tag, args) for the portable kernel
/// (backend/scalar/sinusoidal.hpp) and the packet kernel (backend/simd/sinusoidal.hpp,
/// every tag with packets in this compilation).

#include "scalar/sinusoidal.hpp"
#include "simd/sinusoidal.hpp"

namespace posenc {
namespace backend {
/// The former home of the kernel's arguments, beside the tags (now posenc::kernels).
template <class T>
using sinusoidal_rows_args [[deprecated("use posenc::kernels::sinusoidal_rows_args")]] =
    kernels::sinusoidal_rows_args<T>;
}  // namespace backend
}  // namespace posenc
