#pragma once
/// @file
/// @brief The message of the error a piece of code throws, for tests of bad
/// input: one helper for every test file (the tests of a folder are built
/// as one unity source, which cannot hold two).

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <utility>

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

/// @brief Like error_of, for code that must fail: a test failure when `fn`
/// throws nothing (or a titan::Error without a message) or an exception
/// other than titan::Error (whose message is then returned).
template <typename F>
std::string required_error_of(F&& fn) {
  std::string message;
  try {
    message = error_of(std::forward<F>(fn));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a titan::Error: " << e.what();
    return e.what();
  }
  if (message.empty()) ADD_FAILURE() << "no error thrown";
  return message;
}

}  // namespace titan::testing
