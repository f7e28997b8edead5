#pragma once
/// @file
/// @brief strprintf: printf-style formatting into a std::string, for every
/// layer (logs, tables, error messages).

#include <string>

namespace titan {

/// @brief printf-style formatting into a std::string ("%.2f" of 1.234 → "1.23").
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace titan
