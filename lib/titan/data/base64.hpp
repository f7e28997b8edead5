#pragma once
/// @file
/// @brief Standard base64 (RFC 4648, with padding), the token encoding of
/// tiktoken rank files.

#include <optional>
#include <string>
#include <string_view>

namespace titan::data {

/// @brief Encodes bytes as padded standard base64, as Python's
/// base64.b64encode does.
std::string base64_encode(std::string_view bytes);

/// @brief Decodes padded standard base64; nullopt for anything else
/// (wrong length, foreign characters, misplaced padding).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace titan::data
