#pragma once
/// \file
/// Shaw et al.'s clipping of relative distances (2018), written once: the table row of
/// relative distance rel = j - pos in a window [-left, right] is
///
///     row(rel) = clip(rel, -left, right) + left        0 .. left + right

#include <algorithm>

#include "../core/types.hpp"

namespace posenc {
namespace math {

/// clip(rel, -left, right) + left.
POSENC_HOST_DEVICE inline Index clip_row(Index rel, Index left, Index right) noexcept {
  return std::min(right, std::max(-left, rel)) + left;
}

}  // namespace math
}  // namespace posenc
