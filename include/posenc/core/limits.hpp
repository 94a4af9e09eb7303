#pragma once
/// \file
/// The largest sizes the library allocates from an argument. Every size that decides an
/// allocation (a table's rows times its width, a cache's positions, a list of heads) is
/// checked against these before anything is allocated, and a larger one is a posenc::error
/// naming the parameter: an absurd argument (a corrupt config, a typo) fails at once with a
/// message rather than std::bad_alloc, minutes of paging, or an overflowed size.
///
/// They bound what a request may ask for, not what a machine can hold: an allocation
/// within them that the machine cannot satisfy is still std::bad_alloc (docs/errors.md).

#include <string>

#include "error.hpp"
#include "types.hpp"

namespace posenc {
namespace limits {

/// Values in one table, cache or bias the library allocates: 2^31 (8 GiB of float).
inline constexpr Index max_elements = Index(1) << 31;
/// A model width, head dim or rotary dim: 2^20 (the largest models use a few thousand).
inline constexpr Index max_dim = Index(1) << 20;
/// Heads of a slope list, bias or policy: 2^16.
inline constexpr Index max_heads = Index(1) << 16;

}  // namespace limits

namespace detail {

/// `param` = `value` (> 0) rows of `per_row` values each: throws posenc::error unless
/// value * per_row <= limits::max_elements (checked without forming the product).
inline void check_elements(const char* where, const char* param, Index value, Index per_row) {
  const Index rows = per_row > 0 ? limits::max_elements / per_row : limits::max_elements;
  require(value <= rows, where, param, value,
          "must be <= " + std::to_string(rows) + " here (" + std::to_string(per_row) +
              " values each; posenc::limits::max_elements = 2^31 values per table)");
}

/// A width (model dim, head dim): throws posenc::error unless <= limits::max_dim.
inline void check_dim_limit(const char* where, const char* param, Index value) {
  require(value <= limits::max_dim, where, param, value,
          "must be <= 2^20 (posenc::limits::max_dim)");
}

/// A head count: throws posenc::error unless <= limits::max_heads.
inline void check_heads_limit(const char* where, const char* param, Index value) {
  require(value <= limits::max_heads, where, param, value,
          "must be <= 65536 (posenc::limits::max_heads)");
}

}  // namespace detail
}  // namespace posenc
