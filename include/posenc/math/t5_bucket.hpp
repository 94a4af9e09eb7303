#pragma once
/// \file
/// The T5 relative-position bucket (Raffel et al. 2020), written once. For relative =
/// key - query, num_buckets B and max_distance D:
///
///     bidirectional:  B' = floor(B/2); offset = B' if relative > 0 else 0; n = |relative|
///     unidirectional: B' = B;          offset = 0;                        n = max(-relative, 0)
///     E = floor(B'/2)                                  (exact buckets: one per distance)
///     n <  E:  bucket = offset + n
///     n >= E:  bucket = offset + min(E + floor(ln(n/E) / ln(D/E) · (B' - E)), B' - 1)
///
/// The logarithm is evaluated only for n >= E >= 1, in double. The caller has checked the
/// configuration (B' >= 2, D > E) and that |relative| is representable.

#include <algorithm>
#include <cmath>

#include "../core/types.hpp"

namespace posenc {
namespace math {

/// The first half of the bucket function: the side's first bucket (`base`, the offset
/// above), its bucket count B' (`buckets`) and the distance n.
POSENC_HOST_DEVICE inline void t5_bucket_side(Index relative, Index num_buckets, bool bidirectional,
                                              Index& base, Index& buckets, Index& n) noexcept {
  base = 0;
  buckets = num_buckets;
  if (bidirectional) {
    buckets /= 2;
    if (relative > 0) base = buckets;
    n = relative < 0 ? -relative : relative;
  } else {
    n = relative < 0 ? -relative : 0;
  }
}

/// The logarithmic part: the bucket of distance n >= E = buckets/2 within its side, in
/// [E, buckets - 1].
POSENC_HOST_DEVICE inline Index t5_log_bucket(Index n, Index buckets, Index max_distance) noexcept {
  const Index exact = buckets / 2;
  const double x = std::log(static_cast<double>(n) / static_cast<double>(exact)) /
                   std::log(static_cast<double>(max_distance) / static_cast<double>(exact)) *
                   static_cast<double>(buckets - exact);
  // x >= 0; capped before the conversion so that huge distances cannot overflow it
  const double capped = std::min(std::floor(x), static_cast<double>(buckets - 1 - exact));
  return exact + static_cast<Index>(capped);
}

/// The bucket of `relative` = key position - query position.
POSENC_HOST_DEVICE inline Index t5_bucket(Index relative, Index num_buckets, Index max_distance,
                                          bool bidirectional) noexcept {
  Index base, buckets, n;
  t5_bucket_side(relative, num_buckets, bidirectional, base, buckets, n);
  if (n < buckets / 2) return base + n;
  return base + t5_log_bucket(n, buckets, max_distance);
}

}  // namespace math
}  // namespace posenc
