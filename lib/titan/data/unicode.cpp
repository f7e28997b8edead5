#include "titan/data/unicode.hpp"

#include <algorithm>

namespace titan::data {

namespace {

bool is_white_space(uint32_t cp) {
  // Unicode's White_Space property (PropList.txt), which is what \s means in
  // the Rust regex engine tiktoken uses. It has been stable for years, so it
  // is listed here rather than generated.
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

CharClass char_class(uint32_t cp) {
  if (cp < 0x80) {  // ASCII fast path: most text is mostly ASCII
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    if (cp == '\r' || cp == '\n') return CharClass::Newline;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0C)) return CharClass::Space;
    return CharClass::Other;
  }
  if (is_white_space(cp)) return CharClass::Space;
  using unicode_detail::kClassRanges;
  const auto* end = kClassRanges + unicode_detail::kClassRangeCount;
  const auto* it = std::upper_bound(kClassRanges, end, cp,
                                    [](uint32_t v, const unicode_detail::ClassRange& r) { return v < r.first; });
  if (it == kClassRanges) return CharClass::Other;
  --it;
  if (cp > it->last) return CharClass::Other;
  return it->cls == 1 ? CharClass::Letter : CharClass::Number;
}

CodePoint decode_utf8(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned char b0 = s[pos];
  CodePoint out;
  if (b0 < 0x80) {
    out.cp = b0;
    out.cls = char_class(b0);
    return out;
  }
  int len;
  uint32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) len = 2, cp = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) len = 3, cp = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) len = 4, cp = b0 & 0x07, min = 0x10000;
  else len = 0, cp = 0, min = 0;
  bool ok = len > 0 && pos + len <= n;
  for (int i = 1; ok && i < len; ++i) {
    if ((s[pos + i] & 0xC0) != 0x80) ok = false;
    else cp = (cp << 6) | (s[pos + i] & 0x3F);
  }
  if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
  if (!ok) {
    out.cp = b0;  // an invalid byte stands for itself
    out.cls = CharClass::Other;
    return out;
  }
  out.cp = cp;
  out.len = static_cast<uint8_t>(len);
  out.cls = char_class(cp);
  return out;
}

const char* unicode_table_version() { return unicode_detail::kUnicodeVersion; }

}  // namespace titan::data
