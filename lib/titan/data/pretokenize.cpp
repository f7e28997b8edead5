#include "titan/data/pretokenize.hpp"

#include "titan/data/unicode.hpp"

namespace titan::data {
namespace {

// Each match_* returns the end byte of its alternative's match at `pos`, or
// 0 when the alternative does not match there (no alternative can match an
// empty string, so 0 is never a real end: every end is > pos).

bool is_s(uint32_t c) { return c == 's' || c == 'S' || c == 0x17F; }  // (?i) also folds U+017F ſ to s

// (?i:'s|'t|'re|'ve|'m|'ll|'d)
size_t match_contraction(std::string_view t, size_t pos) {
  if (t[pos] != '\'' || pos + 1 >= t.size()) return 0;
  const CodePoint a = decode_utf8(t, pos + 1);
  const uint32_t c = a.cp;
  const size_t after = pos + 1 + a.len;
  if (is_s(c) || c == 't' || c == 'T' || c == 'm' || c == 'M' || c == 'd' || c == 'D') return after;
  auto next_is = [&](char lo) {
    return after < t.size() && (t[after] == lo || t[after] == lo - 'a' + 'A');
  };
  if ((c == 'r' || c == 'R' || c == 'v' || c == 'V') && next_is('e')) return after + 1;
  if ((c == 'l' || c == 'L') && next_is('l')) return after + 1;
  return 0;
}

// End of the run of code points of class `cls` starting at `pos`.
size_t run_of(std::string_view t, size_t pos, CharClass cls) {
  while (pos < t.size()) {
    CodePoint c = decode_utf8(t, pos);
    if (c.cls != cls) break;
    pos += c.len;
  }
  return pos;
}

bool is_space(CharClass c) { return c == CharClass::Space || c == CharClass::Newline; }

// Where the pattern's whitespace alternatives end when only they are left
// (the code point at `pos` is \s): Llama 3's `\s*[\r\n]+|\s+(?!\S)|\s+`
// or, without the newline alternative, GPT-2's `\s+(?!\S)|\s+`.
size_t whitespace_end(std::string_view t, size_t pos, bool newline_alternative) {
  const size_t n = t.size();
  size_t j = pos, last_nl_end = 0, last_start = pos;  // j = end of the whitespace run
  while (j < n) {
    CodePoint c = decode_utf8(t, j);
    if (!is_space(c.cls)) break;
    last_start = j;
    j += c.len;
    if (c.cls == CharClass::Newline) last_nl_end = j;
  }
  if (newline_alternative && last_nl_end) return last_nl_end;  // \s*[\r\n]+ : up to the run's last CR/LF
  if (j == n) return j;                                         // \s+(?!\S) at the end of text
  if (last_start > pos) return last_start;                      // \s+(?!\S): leave the last space for the next piece
  return j;                                                     // \s+
}

// GPT-2's case-sensitive 's|'t|'re|'ve|'m|'ll|'d (ASCII only, so bytes do).
size_t match_gpt2_contraction(std::string_view t, size_t pos) {
  if (t[pos] != '\'' || pos + 1 >= t.size()) return 0;
  const char a = t[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
  const char b = pos + 2 < t.size() ? t[pos + 2] : 0;
  if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  return 0;
}

}  // namespace

void pretokenize_llama3(std::string_view t, const std::function<void(std::string_view)>& piece) {
  const size_t n = t.size();
  size_t pos = 0;
  while (pos < n) {
    const CodePoint c0 = decode_utf8(t, pos);
    const size_t p1 = pos + c0.len;
    const CodePoint c1 = p1 < n ? decode_utf8(t, p1) : CodePoint{0, 0, CharClass::Other};
    const bool has_c1 = p1 < n;
    size_t end = match_contraction(t, pos);

    // [^\r\n\p{L}\p{N}]?\p{L}+ : with the optional char, or (backtracking)
    // without it, which needs c0 itself to be a letter.
    if (!end) {
      if (c0.cls == CharClass::Letter) end = run_of(t, p1, CharClass::Letter);
      else if (c0.cls != CharClass::Newline && c0.cls != CharClass::Number && has_c1 && c1.cls == CharClass::Letter)
        end = run_of(t, p1 + c1.len, CharClass::Letter);
    }
    // \p{N}{1,3}
    if (!end && c0.cls == CharClass::Number) {
      end = p1;
      for (int k = 1; k < 3 && end < n; ++k) {
        CodePoint c = decode_utf8(t, end);
        if (c.cls != CharClass::Number) break;
        end += c.len;
      }
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    if (!end) {
      const bool punct_first = c0.cls == CharClass::Other;
      const bool space_then_punct = c0.cp == ' ' && has_c1 && c1.cls == CharClass::Other;
      if (punct_first || space_then_punct) {
        end = run_of(t, punct_first ? pos : p1, CharClass::Other);
        end = run_of(t, end, CharClass::Newline);
      }
    }
    if (!end) end = whitespace_end(t, pos, /*newline_alternative=*/true);
    piece(t.substr(pos, end - pos));
    pos = end;
  }
}

void pretokenize_gpt2(std::string_view t, const std::function<void(std::string_view)>& piece) {
  const size_t n = t.size();
  size_t pos = 0;
  while (pos < n) {
    const CodePoint c0 = decode_utf8(t, pos);
    const size_t p1 = pos + c0.len;
    const CharClass c1 = p1 < n ? decode_utf8(t, p1).cls : CharClass::Space;  // Space: "no next char" here
    size_t end = match_gpt2_contraction(t, pos);
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": a run of one class,
    // after one optional space; whitespace is the only class left over.
    if (!end) {
      if (c0.cls != CharClass::Space && c0.cls != CharClass::Newline) end = run_of(t, p1, c0.cls);
      else if (c0.cp == ' ' && c1 != CharClass::Space && c1 != CharClass::Newline) end = run_of(t, p1, c1);
      else end = whitespace_end(t, pos, /*newline_alternative=*/false);
    }
    piece(t.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace titan::data
