#pragma once
/// @file
/// @brief The pre-tokenisation patterns of Llama 3 and GPT-2: the split of
/// text into pieces that BPE then encodes one by one, written by hand over
/// UTF-8 code points.

#include <functional>
#include <string_view>

namespace titan::data {

/// @brief The pattern this file implements, as tiktoken and Meta's Llama 3
/// tokenizer.py write it.
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// @brief Calls `piece` with each successive match of kLlama3Pattern in
/// `text`, exactly as a regex engine's find-all (leftmost-first alternation,
/// greedy quantifiers with backtracking) would. The pieces tile the text.
///
/// Why by hand: std::regex has neither `\p{L}` nor Unicode classes, and a
/// hand-written scanner is linear and allocation-free.
void pretokenize_llama3(std::string_view text, const std::function<void(std::string_view)>& piece);

/// @brief GPT-2's pattern, what the `tokenizers` package's ByteLevel
/// pre-tokenizer splits with (use_regex: true): case-sensitive
/// contractions, digit runs of any length, an optional space before a
/// word, number or punctuation run.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// @brief As pretokenize_llama3, for kGpt2Pattern.
void pretokenize_gpt2(std::string_view text, const std::function<void(std::string_view)>& piece);

}  // namespace titan::data
