#pragma once
/// \file
/// The one exception type posenc throws, and the helpers that build its messages.
///
/// Validating entry points throw posenc::error; hot loops never throw (they run only
/// after their arguments were checked).

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace posenc {

/// Thrown for invalid configuration, shapes, positions and files.
/// The message names the function, the parameter and its value, e.g.
/// `posenc::sinusoidal: dim = 7: must be even for the vaswani preset`.
class error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {

template <class Value>
std::string describe(std::string_view where, std::string_view param, const Value& value,
                     std::string_view requirement) {
  std::ostringstream os;
  os.precision(17);
  os << "posenc::" << where << ": " << param << " = " << value << ": " << requirement;
  return os.str();
}

/// Throws posenc::error "posenc::<where>: <param> = <value>: <requirement>".
template <class Value>
[[noreturn]] void fail(std::string_view where, std::string_view param, const Value& value,
                       std::string_view requirement) {
  throw error(describe(where, param, value, requirement));
}

/// Throws unless `ok`; see fail().
template <class Value>
void require(bool ok, std::string_view where, std::string_view param, const Value& value,
             std::string_view requirement) {
  if (!ok) fail(where, param, value, requirement);
}

}  // namespace detail
}  // namespace posenc
