#pragma once
/// @file
/// @brief Byte-level BPE in tiktoken's format and algorithm, with Llama 3's
/// pre-tokenisation and special tokens: reads Meta's Llama 3
/// `tokenizer.model` and the rank files `titan tokenizer train` writes.

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "titan/data/tokenizer.hpp"

namespace titan::data {

/// @brief Llama 3's special tokens in id order, as Meta's llama3
/// tokenizer.py (Llama 3.1 and later) lays them out: <|begin_of_text|>,
/// <|end_of_text|>, <|reserved_special_token_0|>, <|reserved_special_token_1|>,
/// <|finetune_right_pad_id|>, <|step_id|>, <|start_header_id|>,
/// <|end_header_id|>, <|eom_id|>, <|eot_id|>, <|python_tag|>, then
/// <|reserved_special_token_2|>... up to `count` tokens in all. Ids are
/// number_of_ranks + index, so with Llama 3's 128000 ranks
/// <|begin_of_text|> is 128000 and <|eot_id|> 128009 (the same ids as in
/// the original Llama 3 layout).
std::vector<std::string> llama3_special_tokens(int count = 256);

/// @brief tiktoken-compatible byte-level BPE.
///
/// Encoding splits text with Llama 3's pattern (pretokenize_llama3), then
/// encodes each piece as tiktoken does: a piece that is itself a token is
/// that token; otherwise its bytes are merged pairwise, always merging the
/// adjacent pair whose concatenation has the lowest rank (leftmost on ties).
/// tests/data checks ids against Python's tiktoken.
class TiktokenTokenizer : public Tokenizer {
 public:
  /// @brief From token bytes by rank (ranks[r] is the token of rank r; it
  /// must hold every single byte) and special tokens, whose ids follow the
  /// ranks. `source` names where they came from, for messages.
  TiktokenTokenizer(std::vector<std::string> ranks, std::vector<std::string> specials, std::string source);
  // The lookup tables hold views into this object's strings: no copies.
  TiktokenTokenizer(const TiktokenTokenizer&) = delete;
  TiktokenTokenizer& operator=(const TiktokenTokenizer&) = delete;

  /// @brief Reads a tiktoken rank file (one `base64(token) rank` per line;
  /// ranks 0..n-1, each once, all 256 single bytes present) and appends
  /// Llama 3's special tokens. Throws titan::Error naming the file and line.
  static std::shared_ptr<TiktokenTokenizer> load(const std::string& path, int num_special_tokens = 256);

  std::vector<int64_t> encode(std::string_view text, bool bos = false, bool eos = false,
                              bool allow_special = false) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(ranks_.size() + specials_.size()); }
  int64_t bos_id() const override { return bos_; }
  int64_t eos_id() const override { return eos_; }
  std::string describe() const override;

  /// @brief Number of BPE ranks (= id of the first special token).
  int64_t num_base_tokens() const { return static_cast<int64_t>(ranks_.size()); }
  /// @brief Id of a special token by its text; throws when there is none.
  int64_t special_id(std::string_view text) const;
  /// @brief The bytes of a token (special tokens: their text).
  const std::string& token_bytes(int64_t id) const;
  /// @brief Writes the ranks (not the special tokens, as in Llama 3's file)
  /// in tiktoken's format.
  void save(const std::string& path) const;

  /// @brief Appends the ids of one pre-tokenised piece (no specials).
  void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;

 private:
  void encode_ordinary(std::string_view text, std::vector<int64_t>& out) const;
  uint32_t rank_of(std::string_view bytes) const;

  std::vector<std::string> ranks_;
  std::unordered_map<std::string_view, uint32_t> rank_index_;  ///< views into ranks_
  std::vector<std::string> specials_;
  std::unordered_map<std::string_view, int64_t> special_index_;  ///< views into specials_
  std::array<bool, 256> special_first_byte_{};  ///< bytes a special token starts with
  std::array<uint32_t, 256> byte_rank_{};        ///< rank of each single byte
  std::string source_;
  int64_t bos_ = -1, eos_ = -1;
};

/// @brief Writes token bytes by rank as a tiktoken rank file.
void write_tiktoken_file(const std::string& path, const std::vector<std::string>& ranks);

}  // namespace titan::data
