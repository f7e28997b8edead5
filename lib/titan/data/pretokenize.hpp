#pragma once
/// @file
/// @brief Llama 3's pre-tokenisation: the split of text into pieces that BPE
/// then encodes one by one, written by hand over UTF-8 code points.

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

}  // namespace titan::data
