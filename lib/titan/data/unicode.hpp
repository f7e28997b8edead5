#pragma once
/// @file
/// @brief UTF-8 decoding and the Unicode character classes that Llama 3's
/// pre-tokenisation pattern uses (`\p{L}`, `\p{N}`, `\s`), without ICU or a regex
/// engine: a generated table (unicode_table.cpp) answers L and N.

#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data {

/// @brief What the pre-tokenizer needs to know about one code point.
enum class CharClass : uint8_t {
  Other,   ///< punctuation, symbols, marks, controls, invalid bytes
  Letter,  ///< general category L* (`\p{L}`)
  Number,  ///< general category N* (`\p{N}`)
  Space,   ///< Unicode White_Space other than CR and LF (`\s`)
  Newline  ///< CR or LF: `\s` too, but the pattern also names them alone
};

/// @brief One decoded code point: its value, its byte length in the input,
/// and its class. An invalid UTF-8 byte decodes as itself, length 1,
/// class Other (Python never produces such text, so tiktoken has no say).
struct CodePoint {
  uint32_t cp = 0;
  uint8_t len = 1;
  CharClass cls = CharClass::Other;
};

/// @brief Decodes the code point that starts at byte `pos` of `text`
/// (pos < text.size()). Overlong forms, surrogates and values past U+10FFFF
/// count as invalid bytes.
CodePoint decode_utf8(std::string_view text, size_t pos);

/// @brief Appends the UTF-8 encoding of code point `cp` (<= U+10FFFF) to `out`.
void append_utf8(uint32_t cp, std::string& out);

/// @brief Class of a code point: Letter/Number from the generated table,
/// Space/Newline from Unicode's fixed White_Space list.
CharClass char_class(uint32_t cp);

/// @brief The Unicode version the L/N table was generated from.
const char* unicode_table_version();

namespace unicode_detail {
/// @brief A maximal range [first, last] of one class (1 = L, 2 = N).
struct ClassRange {
  uint32_t first, last;
  uint8_t cls;
};
extern const ClassRange kClassRanges[];
extern const int kClassRangeCount;
extern const char* const kUnicodeVersion;
}  // namespace unicode_detail

}  // namespace titan::data
