#include "titan/data/byte_level.hpp"

#include <array>

#include "titan/data/unicode.hpp"

namespace titan::data {
namespace {

bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 0x144> to_byte{};  // every mapped character is below U+0144; -1 = not one
  Tables() {
    to_byte.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return tables().to_char[b]; }

std::string byte_level_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_level_char(static_cast<uint8_t>(c)), out);
  return out;
}

std::optional<std::string> byte_level_bytes(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const CodePoint c = decode_utf8(text, pos);
    // An invalid UTF-8 byte decodes as itself with length 1: never a
    // byte-level character, whatever its value.
    const bool valid = c.len > 1 || static_cast<uint8_t>(text[pos]) < 0x80;
    if (!valid || c.cp >= t.to_byte.size() || t.to_byte[c.cp] < 0) return std::nullopt;
    out += static_cast<char>(t.to_byte[c.cp]);
    pos += c.len;
  }
  return out;
}

}  // namespace titan::data
