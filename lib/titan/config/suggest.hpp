#pragma once
/// @file
/// @brief "Did you mean ...?": the closest name by edit distance.

#include <cstddef>
#include <string>
#include <vector>

namespace titan::config {

/// @brief Levenshtein distance (insertions, deletions, substitutions) of a and b.
size_t edit_distance(const std::string& a, const std::string& b);

/// @brief The candidate closest to `name` (the first of equals); "" if none.
std::string closest(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace titan::config
