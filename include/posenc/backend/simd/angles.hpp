#pragma once
/// \file
/// Vectorised sines and cosines of p * w_i at integer positions p, by angle addition.
///
/// Split each position p = P + f into a coarse block start P = B * floor(p / B) and a fine
/// offset f in [0, B), B = angle_addition::block (64). Then, exactly,
///
///     sin(p w) = sin(P w) cos(f w) + cos(P w) sin(f w)
///     cos(p w) = cos(P w) cos(f w) - sin(P w) sin(f w)
///
/// The fine values sin/cos(f w_i) are a double table (fine_angles: B x n, std::sin/std::cos
/// of the double angle f * w_i, each row filled the first time it is needed, or all up front
/// for a table shared between threads); the coarse values sin/cos(P w_i) are recomputed in double
/// (std::sin/std::cos of double(P) * w_i, the same angle the scalar kernels form) once per
/// block of B consecutive positions; each output is then one multiply and one fused
/// multiply-add in double, vectorised over i. Consecutive positions (tables, prefill, the
/// rows of a KV cache) therefore pay n libm calls per B rows instead of n per row.
///
/// Error bound (u = 2^-53, |.| <= 1 for every table entry). Each double entry carries a
/// relative error <= u from libm (glibc's sin/cos are correctly rounded to < 1 ulp) plus the
/// rounding of its angle, <= u * |angle| absolute; the product and the fused add add <= 2u.
/// By Cauchy-Schwarz |sin(Pw)cos(fw)| + |cos(Pw)sin(fw)| <= 1, so the double result is
/// within about 5u + u * (|P w| + |f w|) of sin(p w) for the exact angle p*w: below 1e-15
/// + 1.2e-16 * |p w| (1.2e-10 at p w = 1e6), against |fl(p w) - p w| <= u |p w| for the
/// scalar kernel's own angle. Rounded once to float32 (u_f = 2^-24 relative), the result is
/// within 6e-8 + 1.2e-10 of the exact value for |p w| <= 1e6: far inside the 1e-6 target,
/// and equal to the scalar kernel's float result except where the two double values straddle
/// a float rounding boundary (then they differ by one float ulp). For p < B the coarse
/// angle is 0 and the result equals std::sin(f w) / std::cos(f w) bit for bit.
///
/// Not a running recurrence: every row starts again from exact coarse and fine values, so
/// the error does not grow with the number of rows.

#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "../../core/types.hpp"
#include "../../math/rotation.hpp"
#include "packets.hpp"

namespace posenc {
namespace simd {

/// The fine half of angle addition: sin/cos(f w_i) for f in [0, B), i < n, in double
/// (std::sin/std::cos of the double angle f * w_i). Keeps its own copy of the frequencies.
///
/// Rows are filled on demand (ensure, not thread-safe) or all at once (fill); a filled table
/// is read-only, so one shared_ptr<const fine_angles> can serve generators on many threads.
class fine_angles {
 public:
  /// Positions per coarse block (B): 64 keeps the table small (64 * n * 16 bytes).
  static constexpr Index block = 64;

  /// Copies the n frequencies (radians per position) and allocates, but does not fill, the
  /// B x n table. Throws std::bad_alloc.
  fine_angles(const double* w, Index n)
      : w_(w, w + n),
        // left uninitialised: a row is filled the first time a position needs it, so a
        // call for a few rows neither computes nor touches all B of them
        sin_(new double[static_cast<std::size_t>(block * n)]),
        cos_(new double[static_cast<std::size_t>(block * n)]) {}
  fine_angles(const fine_angles&) = delete;
  fine_angles& operator=(const fine_angles&) = delete;

  Index size() const noexcept { return static_cast<Index>(w_.size()); }
  const double* frequencies() const noexcept { return w_.data(); }

  /// Fills row f (0 <= f < B) unless it is already filled.
  void ensure(Index f) noexcept {
    if (filled_[f]) return;
    const Index n = size();
    for (Index i = 0; i < n; ++i) {
      const double a = math::angle(f, w_[static_cast<std::size_t>(i)]);
      sin_[static_cast<std::size_t>(f * n + i)] = std::sin(a);
      cos_[static_cast<std::size_t>(f * n + i)] = std::cos(a);
    }
    filled_[f] = true;
  }
  /// Fills every row.
  void fill() noexcept {
    for (Index f = 0; f < block; ++f) ensure(f);
  }

  /// Row f: n values each (valid once filled).
  const double* sin_row(Index f) const noexcept { return sin_.get() + f * size(); }
  const double* cos_row(Index f) const noexcept { return cos_.get() + f * size(); }

 private:
  std::vector<double> w_;
  std::unique_ptr<double[]> sin_, cos_;
  bool filled_[block] = {};
};

/// sin(p w_i), cos(p w_i), i < n, for integer positions p, vectorised with packet<double,
/// Arch>; see the file comment for the method and its error bound.
///
/// Usage: build once per frequency vector, then call row(p, sink) for each position. Cost
/// in libm sin/cos pairs per frequency: L consecutive rows about min(L, 64) + L/64 instead
/// of L; a single row 2 (1 with a filled shared fine table). For each position, sink(i, S,
/// C, lanes) receives the packets of sin/cos(p w_j) for j in [i, i + lanes) (lanes < packet
/// size only in the last chunk; the unused lanes hold 0). row() never allocates or throws.
/// Positions may be negative. One generator per thread (it caches the coarse row).
template <class Arch>
class angle_addition {
 public:
  using packet_type = packet<double, Arch>;
  static constexpr Index block = fine_angles::block;

  /// With its own fine table, filled as positions need it. `w` holds n angular
  /// frequencies (copied). Throws std::bad_alloc.
  angle_addition(const double* w, Index n)
      : owned_(std::make_unique<fine_angles>(w, n)),
        fine_(owned_.get()),
        coarse_sin_(static_cast<std::size_t>(n)),
        coarse_cos_(static_cast<std::size_t>(n)) {}

  /// With a shared fine table on which fill() has run. Throws std::bad_alloc.
  explicit angle_addition(std::shared_ptr<const fine_angles> filled)
      : shared_(std::move(filled)),
        fine_(shared_.get()),
        coarse_sin_(static_cast<std::size_t>(fine_->size())),
        coarse_cos_(static_cast<std::size_t>(fine_->size())) {}

  Index size() const noexcept { return fine_->size(); }

  /// Calls sink(i, S, C, lanes) for each packet of frequencies at position p.
  template <class Sink>
  void row(Index p, Sink&& sink) noexcept {
    // floor division, so that negative positions split the same way
    Index q = p / block;
    if (p % block < 0) --q;
    const Index base = q * block;
    if (base != coarse_base_) set_coarse(base);
    const Index f = p - base;
    if (owned_) owned_->ensure(f);
    const Index n = size();
    const double* fs = fine_->sin_row(f);
    const double* fc = fine_->cos_row(f);
    const double* cs = coarse_sin_.data();
    const double* cc = coarse_cos_.data();
    constexpr int W = packet_type::size;
    Index i = 0;
    for (; i + W <= n; i += W)
      combine(packet_type::load(cs + i), packet_type::load(cc + i), packet_type::load(fs + i),
              packet_type::load(fc + i), i, W, sink);
    if (i < n) {
      const int lanes = static_cast<int>(n - i);
      combine(packet_type::load_partial(cs + i, lanes), packet_type::load_partial(cc + i, lanes),
              packet_type::load_partial(fs + i, lanes), packet_type::load_partial(fc + i, lanes), i,
              lanes, sink);
    }
  }

 private:
  template <class Sink>
  static void combine(packet_type sc, packet_type cc, packet_type sf, packet_type cf, Index i,
                      int lanes, Sink& sink) noexcept {
    packet_type s, c;
    math::angle_sum(sc, cc, sf, cf, s, c);  // sin/cos(P w + f w)
    sink(i, s, c, lanes);
  }

  void set_coarse(Index base) noexcept {
    const double* w = fine_->frequencies();
    for (Index i = 0; i < size(); ++i) {
      const double a = math::angle(base, w[i]);
      coarse_sin_[static_cast<std::size_t>(i)] = std::sin(a);
      coarse_cos_[static_cast<std::size_t>(i)] = std::cos(a);
    }
    coarse_base_ = base;
  }

  std::unique_ptr<fine_angles> owned_;         // filled row by row, or
  std::shared_ptr<const fine_angles> shared_;  // filled up front and shared
  const fine_angles* fine_;
  std::vector<double> coarse_sin_, coarse_cos_;
  Index coarse_base_ = std::numeric_limits<Index>::min();
};

}  // namespace simd
}  // namespace posenc
