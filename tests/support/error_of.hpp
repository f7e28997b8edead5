#pragma once
/// @file
/// @brief The message of the error a piece of code throws, for tests of bad
/// input: one helper for every test file (a test executable built as one
/// unity source cannot hold two).

#include <string>

#include "titan/util/error.hpp"

namespace titan::testing {

/// @brief The one-line message of the titan::Error that `fn` throws, or ""
/// when it throws none. Any other exception propagates and fails the test:
/// bad input is reported as a titan::Error, never as a stray std::exception.
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace titan::testing
