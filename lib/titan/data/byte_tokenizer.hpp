#pragma once
/// @file
/// @brief The simplest tokenizer: one id per byte, plus BOS and EOS.

#include "titan/data/tokenizer.hpp"

namespace titan::data {

/// @brief Ids 0..255 are the bytes of the UTF-8 text, 256 is BOS
/// (<|begin_of_text|>) and 257 EOS (<|end_of_text|>): 258 ids in all.
///
/// Needs no file and no training, and fits any model vocabulary of at least
/// 258, which makes it the fallback for demos and tests; sequences are about
/// four times longer than with a trained BPE.
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> encode(std::string_view text, bool bos = false, bool eos = false,
                              bool allow_special = false) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return 258; }
  int64_t bos_id() const override { return 256; }
  int64_t eos_id() const override { return 257; }
  std::string describe() const override { return "byte tokenizer (258 tokens)"; }
};

}  // namespace titan::data
