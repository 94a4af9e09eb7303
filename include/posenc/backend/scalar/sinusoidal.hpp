#pragma once
/// \file
/// The sinusoidal-table kernel's arguments (sinusoidal_rows_args) and its portable
/// implementation: writes (or adds) the rows PE(p) for a run of positions. The packet
/// kernel (backend/simd/sinusoidal.hpp) overloads sinusoidal_rows() for every tag with
/// packets; include backend/sinusoidal.hpp to see them all.
///
/// Pair i has angle a_i(p) = double(p) * inv_freq[i] (always formed in double) and lands
/// at columns (i * sin_step, i * sin_step + cos_offset):
///
///     interleaved (step 2, offset 1):      [s0 c0 s1 c1 ... | pad]     (Vaswani et al.)
///     blocked     (step 1, offset pairs):  [s0 s1 ... | c0 c1 ... | pad] (fairseq, t2t)
///
/// Columns from 2 * pairs to dim - 1 are zero padding (odd dim). The row of
/// `zero_position`, when set, is all zeros (fairseq's padding index).

#include <cmath>

#include "../../core/backend.hpp"
#include "../../core/types.hpp"
#include "../../math/rotation.hpp"

namespace posenc {
namespace kernels {

/// What to write and where; the arguments of sinusoidal_rows(). Built by the validating
/// entry points in encoding/sinusoidal.hpp, so a kernel may assume: 2 * pairs <= dim,
/// the pairing is one of the two above, `out` addresses rows x dim elements, and every
/// position is an integer of magnitude <= 2^53 (exact in double).
template <class T>
struct sinusoidal_rows_args {
  const double* inv_freq = nullptr;  ///< `pairs` angular frequencies (radians per position)
  Index pairs = 0;
  Index dim = 0;
  Index sin_step = 2;    ///< 2 (interleaved) or 1 (blocked)
  Index cos_offset = 1;  ///< 1 (interleaved) or pairs (blocked)
  Index rows = 0;
  Index first_position = 0;          ///< row r has position first_position + r ...
  const Index* positions = nullptr;  ///< ... unless positions is given: row r has positions[r]
  bool has_zero_position = false;
  Index zero_position = 0;  ///< this position's row is all zeros (when has_zero_position)
  T* out = nullptr;
  Index row_stride = 0;     ///< elements between rows
  Index col_stride = 1;     ///< elements between columns
  bool accumulate = false;  ///< false: out = PE; true: out = scale * out + T(PE)
  T scale = T(1);
};

/// Writes or accumulates the sinusoidal rows (portable reference kernel). Never throws.
/// sin and cos are evaluated in double and rounded to T once.
template <class T>
inline void sinusoidal_rows(backend::scalar const&, const sinusoidal_rows_args<T>& a) noexcept {
  POSENC_KERNEL_TRACE("sinusoidal_rows", "scalar");
  // rows: one position each
  for (Index r = 0; r < a.rows; ++r) {
    const Index pos = a.positions ? a.positions[r] : a.first_position + r;
    T* y = a.out + r * a.row_stride;
    const bool zero_row = a.has_zero_position && pos == a.zero_position;
    // pairs: sin at the pair's first column, cos at its second
    for (Index i = 0; i < a.pairs; ++i) {
      const double angle = math::angle(pos, a.inv_freq[i]);
      const T s = zero_row ? T(0) : static_cast<T>(std::sin(angle));
      const T c = zero_row ? T(0) : static_cast<T>(std::cos(angle));
      T& ys = y[(i * a.sin_step) * a.col_stride];
      T& yc = y[(i * a.sin_step + a.cos_offset) * a.col_stride];
      if (a.accumulate) {
        ys = a.scale * ys + s;
        yc = a.scale * yc + c;
      } else {
        ys = s;
        yc = c;
      }
    }
    // padding columns (odd dim): PE is zero there
    for (Index j = 2 * a.pairs; j < a.dim; ++j) {
      T& v = y[j * a.col_stride];
      v = a.accumulate ? a.scale * v : T(0);
    }
  }
}

}  // namespace kernels
}  // namespace posenc
