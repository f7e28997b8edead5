#pragma once
/// @file
/// @brief The one error type of titan.cpp and the check macro that throws it.

#include <sstream>
#include <stdexcept>
#include <string>

namespace titan {

/// @brief An error meant for a person: one line that names what was wrong
/// (the file, key, rank, group or operation) and, where it helps, what to do.
///
/// Programs catch it at the top (see run_main) and print it as one line with a
/// non-zero exit, so throw it for every bad input instead of asserting.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace titan

/// Throws titan::Error with the streamed message parts when `cond` is false.
#define TITAN_CHECK(cond, ...)                                   \
  do {                                                           \
    if (!(cond)) throw ::titan::Error(::titan::detail::concat(__VA_ARGS__)); \
  } while (0)
