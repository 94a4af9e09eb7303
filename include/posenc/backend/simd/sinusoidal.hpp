#pragma once
/// \file
/// The vectorised sinusoidal-table kernel, written once on packets: sinusoidal_rows() for
/// every tag whose packets this compilation defines (one constrained overload). Same contract as
/// the portable kernel in backend/scalar/sinusoidal.hpp; sin/cos come from angle addition in double
/// (backend/simd/angles.hpp) instead of one libm call per value, then are rounded once to
/// the output type.
///
/// Accuracy (proved in angles.hpp): each double value is within 1e-15 + 2^-53 |p w| of the
/// exact sin/cos(p w); a float table therefore stays within 6.0e-8 + 1.2e-16 |p w| of the
/// exact values (7e-8 at p w = 10^6; the target is 1e-6), and differs from the scalar
/// kernel's table by at most one float ulp, only where the two double values straddle a
/// rounding boundary. Rows at positions 0 .. 63 are bit-identical to the scalar kernel's.
///
/// Handled here: contiguous columns (col_stride 1), float or double, both pairings, padding
/// columns, the zero row, accumulate (out = scale * out + T(PE), the product and the sum
/// each rounded, as in the scalar kernel). Anything else, or a failed scratch allocation,
/// goes to the scalar kernel.

#include <algorithm>
#include <new>
#include <optional>
#include <vector>

#include "../scalar/sinusoidal.hpp"
#include "angles.hpp"
#include "packets.hpp"

namespace posenc {
namespace simd {

namespace detail {

// Writes lanes [0, lanes) of double packets s and c as T values at ys[k * step] and
// yc[k * step]: the generic (tail) path of the row writer.
template <class T, class P>
void store_pairs_scalar(T* ys, T* yc, Index step, P s, P c, int lanes) noexcept {
  double sb[P::size], cb[P::size];
  s.store(sb);
  c.store(cb);
  for (int k = 0; k < lanes; ++k) {
    ys[k * step] = static_cast<T>(sb[k]);
    yc[k * step] = static_cast<T>(cb[k]);
  }
}

// Double packet stored as T: directly for double, rounded once for float.
template <class P>
void store_as(double* y, P v) noexcept {
  v.store(y);
}
template <class P>
void store_as(float* y, P v) noexcept {
  store_cvt(y, v);
}

}  // namespace detail

/// Writes or accumulates sinusoidal rows with packet<double, Arch>; see
/// kernels::sinusoidal_rows().
template <class Arch, class T>
void sinusoidal_rows(const kernels::sinusoidal_rows_args<T>& a) noexcept {
  using PD = packet<double, Arch>;
  using PT = packet<T, Arch>;
  constexpr int W = PD::size;
  const bool interleaved = a.sin_step == 2 && a.cos_offset == 1;
  const bool blocked = a.sin_step == 1 && a.cos_offset == a.pairs;
  if (a.col_stride != 1 || !(interleaved || blocked) || a.rows <= 0) {
    kernels::sinusoidal_rows(backend::scalar{}, a);
    return;
  }
  const Index width = 2 * a.pairs;  // columns that carry sin/cos; the rest is padding
  // scratch: the fine table and, when accumulating, one row of PE
  std::vector<T> pe_row;
  std::optional<angle_addition<Arch>> gen;
  try {
    gen.emplace(a.inv_freq, a.pairs);
    if (a.accumulate) pe_row.assign(static_cast<std::size_t>(width), T(0));
  } catch (const std::bad_alloc&) {
    kernels::sinusoidal_rows(backend::scalar{}, a);
    return;
  }

  // rows: one position each
  for (Index r = 0; r < a.rows; ++r) {
    const Index pos = a.positions ? a.positions[r] : a.first_position + r;
    T* y = a.out + r * a.row_stride;
    T* dst = a.accumulate ? pe_row.data() : y;
    if (a.has_zero_position && pos == a.zero_position) {
      std::fill(dst, dst + width, T(0));
    } else {
      gen->row(pos, [&](Index i, PD s, PD c, int lanes) {
        if (interleaved) {
          if (lanes == W)
            store_interleaved(dst + 2 * i, s, c);
          else
            detail::store_pairs_scalar(dst + 2 * i, dst + 2 * i + 1, 2, s, c, lanes);
        } else {
          if (lanes == W) {
            detail::store_as(dst + i, s);
            detail::store_as(dst + a.pairs + i, c);
          } else {
            detail::store_pairs_scalar(dst + i, dst + a.pairs + i, 1, s, c, lanes);
          }
        }
      });
    }
    if (a.accumulate) {
      // y = scale * y + PE, vectorised over the sin/cos columns
      const PT scale = PT::broadcast(a.scale);
      constexpr int WT = PT::size;
      Index j = 0;
      for (; j + WT <= width; j += WT) (scale * PT::load(y + j) + PT::load(dst + j)).store(y + j);
      if (j < width) {
        const int lanes = static_cast<int>(width - j);
        (scale * PT::load_partial(y + j, lanes) + PT::load_partial(dst + j, lanes))
            .store_partial(y + j, lanes);
      }
      for (Index k = width; k < a.dim; ++k) y[k] = a.scale * y[k];
    } else {
      std::fill(y + width, y + a.dim, T(0));
    }
  }
}

}  // namespace simd

namespace kernels {

/// Writes or accumulates sinusoidal rows on a tag with packets (simd::packet_arch_t): the
/// packet kernel for float and double, the portable kernel otherwise. Never throws.
template <class Tag, class T, std::enable_if_t<simd::has_packet_arch_v<Tag>, int> = 0>
inline void sinusoidal_rows(Tag const&, const sinusoidal_rows_args<T>& a) noexcept {
  using Arch = simd::packet_arch_t<Tag>;
  if constexpr ((std::is_same_v<T, float> ||
                 std::is_same_v<T, double>)&&simd::has_packet_v<double, Arch>) {
    POSENC_KERNEL_TRACE("sinusoidal_rows", Arch::name());
    simd::sinusoidal_rows<Arch>(a);
  } else {
    sinusoidal_rows(backend::scalar{}, a);
  }
}

}  // namespace kernels
}  // namespace posenc
