#pragma once
/// @file
/// @brief Small string helpers the library needs in several places
/// (C++17's std::string has no ends_with).

#include <cstdint>
#include <string>
#include <vector>

namespace titan {

/// @brief Whether `s` ends with `tail`.
inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// @brief `s` up to its first newline (all of it when there is none): a
/// one-line message from a multi-line one.
inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

/// @brief A shape as messages print it: {4, 2} → "[4, 2]".
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace titan
