#pragma once
/// @file
/// @brief The value types a config option can hold.
///
/// Its own header because JobConfig stores the values of torchtitan-only
/// keys (torchtitan.hpp) as Values, and schema.hpp needs JobConfig.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace titan::config {

/// @brief The type of an option's value.
enum class FieldType { Bool, Int, Float, String, StringList, StringLists };

/// @brief A list of strings: a TOML array of strings, `a,b,c` on the command line.
using StringList = std::vector<std::string>;

/// @brief A list of lists of strings: a TOML array of string arrays;
/// `a,b;c` on the command line (or the Python literal `[['a', 'b'], ['c']]`).
using StringLists = std::vector<StringList>;

/// @brief A value of any option type.
using Value = std::variant<bool, int64_t, double, std::string, StringList, StringLists>;

}  // namespace titan::config
