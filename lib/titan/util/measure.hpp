#pragma once
/// @file
/// @brief Small helpers that the library, benches and chapter programs
/// share: the median of timings, seconds since a time point, a steady clock
/// in milliseconds, and comma-separated option lists.

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

namespace titan {

/// @brief The median (upper middle for an even count) of `v`; 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// @brief Seconds on the steady clock since `t0`.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// @brief Milliseconds on the steady clock (differences only).
inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// @brief "a,b,,c" → {"a", "b", "c"} (empty items dropped).
inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace titan
