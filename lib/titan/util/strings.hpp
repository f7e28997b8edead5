#pragma once
/// @file
/// @brief Small string tests the library needs in several places
/// (C++17's std::string has no ends_with).

#include <string>

namespace titan {

/// @brief Whether `s` ends with `tail`.
inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace titan
