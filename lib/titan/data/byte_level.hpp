#pragma once
/// @file
/// @brief GPT-2's byte-level alphabet: the 256 printable characters that
/// Hugging Face byte-level BPE vocabularies write bytes as (a space is "Ġ",
/// a newline "Ċ"), and the way back to bytes.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace titan::data {

/// @brief The character that stands for byte `b`: the byte itself for the
/// printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF, else U+0100 plus
/// the byte's place among the other 68 (GPT-2's bytes_to_unicode).
uint32_t byte_level_char(uint8_t b);

/// @brief The byte-level spelling of `bytes`, as UTF-8 ("a b" -> "aĠb").
std::string byte_level_text(std::string_view bytes);

/// @brief The bytes a byte-level spelling stands for; nullopt when `text`
/// holds a character outside the 256 (not a byte-level token).
std::optional<std::string> byte_level_bytes(std::string_view text);

}  // namespace titan::data
