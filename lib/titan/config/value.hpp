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
enum class FieldType { Bool, Int, Float, String, StringList };

/// @brief A list of strings: a TOML array of strings, `a,b,c` on the command line.
using StringList = std::vector<std::string>;

/// @brief A value of any option type.
using Value = std::variant<bool, int64_t, double, std::string, StringList>;

}  // namespace titan::config
