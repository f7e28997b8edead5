#pragma once
/// @file
/// @brief Byte-level BPE from a Hugging Face `tokenizer.json` (the format of
/// Llama 3's HF repo and of torchtitan's `hf_assets_path`), encoding and
/// decoding as the Python `tokenizers` package does.

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "titan/data/tokenizer.hpp"

namespace titan::data {

/// @brief One added token (tokenizer.json's `added_tokens`, or a special
/// token of tokenizer_config.json), with the `tokenizers` package's flags.
/// titan supports single_word, lstrip and rstrip only when false.
struct HfAddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;  ///< matched in the second pass (after the normalizer, which titan requires to be null)
  bool special = false;    ///< text-like-this is ordinary text unless allow_special
  bool operator==(const HfAddedToken& o) const {
    return content == o.content && single_word == o.single_word && lstrip == o.lstrip && rstrip == o.rstrip &&
           normalized == o.normalized && special == o.special;
  }
};

/// @brief One stage of the pre-tokenizer, in the order they run.
enum class HfPreTokenizeStep {
  SplitLlama3,  ///< Split on Llama 3's pattern (kLlama3Pattern, behaviour Isolated)
  SplitGpt2,    ///< Split on GPT-2's pattern (ByteLevel with use_regex, or a Split with it)
  PrefixSpace,  ///< ByteLevel's add_prefix_space: a space before each piece that lacks one
};

/// @brief What titan reads of a tokenizer.json: the parts that decide ids.
struct HfTokenizerSpec {
  std::vector<std::pair<std::string, int64_t>> vocab;       ///< token (byte-level spelling) and id
  std::vector<std::pair<std::string, std::string>> merges;  ///< in rank order
  bool ignore_merges = false;  ///< a piece that is a token is that token (Llama 3's file sets it)
  /// The model's unk_token: written for a byte the vocabulary has no token
  /// for; unset = such a byte is dropped (the `tokenizers` package's BPE).
  std::optional<std::string> unk_token;
  bool fuse_unk = false;  ///< one unk_token for a run of such bytes
  std::vector<HfPreTokenizeStep> pre_tokenizer;
  std::vector<HfAddedToken> added_tokens;  ///< in file order
};

/// @brief Parses tokenizer.json text. Throws a one-line titan::Error naming
/// `source` for what is not JSON, not a byte-level BPE, or a feature titan
/// lacks (normalizers, other pre-tokenizers, truncation, dropout, ...).
HfTokenizerSpec parse_tokenizer_json(const std::string& text, const std::string& source);

/// @brief What torchtitan's HuggingFaceTokenizer takes from
/// tokenizer_config.json: the tokens it adds with add_special_tokens (in its
/// order: bos, eos, pad, unk, sep, cls, mask, then added_tokens_decoder)
/// and the contents of bos_token and eos_token.
struct HfTokenizerConfig {
  std::vector<HfAddedToken> special_tokens;
  std::optional<std::string> bos, eos;
};

/// @brief Parses tokenizer_config.json text as torchtitan 0.2.2 does
/// (components/tokenizer.py); a one-line titan::Error naming `source`.
HfTokenizerConfig parse_tokenizer_config(const std::string& text, const std::string& source);

/// @brief Hugging Face byte-level BPE.
///
/// encode: added tokens are cut out of the text first (leftmost, longest;
/// non-normalized ones first), then each stretch between them is
/// pre-tokenised (Llama 3's or GPT-2's pattern), its bytes are merged by
/// the ranks of `merges` (the lowest-ranked adjacent pair first, leftmost on
/// ties), as the `tokenizers` package's BPE model does. With allow_special
/// false, special added tokens are ordinary text (the package's
/// encode_special_tokens = True). The post-processor is not applied: BOS
/// and EOS are added when asked. tests/data checks ids and decoded text
/// against the package.
class HfTokenizer : public Tokenizer {
 public:
  /// @brief Builds the model and its added tokens as tokenizers'
  /// Tokenizer.from_file does; `source` names it in messages.
  HfTokenizer(HfTokenizerSpec spec, std::string source);
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  /// @brief Reads `json_path` (tokenizer.json) and, when `config_path` is
  /// not empty and exists, tokenizer_config.json: its special tokens are
  /// added (ids after the vocabulary for new ones) and BOS/EOS come from
  /// its bos_token/eos_token, as torchtitan does. Without it there is no
  /// BOS or EOS (bos_id() = eos_id() = -1), again as in torchtitan.
  static std::shared_ptr<HfTokenizer> load(const std::string& json_path, const std::string& config_path);

  /// @brief tokenizers' add_tokens/add_special_tokens: a token already in
  /// the vocabulary or among the added ones keeps its id (its flags are
  /// replaced); a new one gets the next id after the vocabulary.
  void add_tokens(const std::vector<HfAddedToken>& tokens);
  /// @brief BOS/EOS by content (nullopt: none). Throws when not a token.
  void set_bos_eos(const std::optional<std::string>& bos, const std::optional<std::string>& eos);

  std::vector<int64_t> encode(std::string_view text, bool bos = false, bool eos = false,
                              bool allow_special = false) const override;
  /// @brief The bytes the ids stand for: the `tokenizers` ByteLevel
  /// decoder's output before it makes the bytes valid UTF-8 (so equal to
  /// the package's decode(ids, skip_special_tokens=False) where that is
  /// valid UTF-8).
  std::string decode(const std::vector<int64_t>& ids) const override;
  /// @brief Highest id + 1 (ids may have gaps; the package counts tokens).
  int64_t vocab_size() const override { return static_cast<int64_t>(id_bytes_.size()); }
  int64_t bos_id() const override { return bos_; }
  int64_t eos_id() const override { return eos_; }
  std::string describe() const override;

  /// @brief Id of a token by its spelling in tokenizer.json (added tokens
  /// first), or -1: the package's token_to_id.
  int64_t token_to_id(std::string_view token) const;
  /// @brief Number of added tokens.
  size_t num_added_tokens() const { return added_.size(); }

 private:
  struct Added {
    HfAddedToken token;
    int64_t id;
    bool special;  ///< ever added as special (the package's set of special contents only grows)
  };
  struct Match {
    size_t begin, end;
    int64_t id;
  };
  void encode_text(std::string_view text, std::vector<int64_t>& out, bool allow_special) const;
  void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;
  void pre_tokenize(size_t step, std::string_view text, std::vector<int64_t>& out) const;
  void split_added(std::string_view text, bool normalized_pass, bool allow_special, std::vector<Match>& out) const;
  void rebuild_added_index();
  void set_bytes(int64_t id, const std::string& token);

  std::string source_;
  std::vector<HfPreTokenizeStep> steps_;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int64_t> vocab_;       ///< spelling -> id (the model's)
  size_t model_vocab_count_ = 0;                         ///< entries in the model's vocab (the package's get_vocab_size)
  std::vector<std::string> model_bytes_;                      ///< bytes of the model's byte-level tokens (never changes)
  std::unordered_map<std::string_view, int64_t> byte_index_;  ///< views into model_bytes_ -> id
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges_;  ///< (left id, right id) -> (rank, merged id)
  std::array<uint32_t, 256> byte_id_{};  ///< id of each single byte; UINT32_MAX where the vocabulary has none
  bool byte_holes_ = false;               ///< some byte has no token
  int64_t unk_id_ = -1;                   ///< the unk_token's id, or -1: bytes without a token are dropped
  bool fuse_unk_ = false;
  std::vector<std::string> id_bytes_;                                    ///< what decode writes for each id
  std::vector<char> id_known_;
  std::vector<Added> added_;                          ///< in the order they were added
  std::unordered_map<std::string, size_t> added_by_content_;  ///< content -> index in added_
  /// Added-token candidates by first byte, longest first, per pass (0 = not normalized, 1 = normalized).
  std::array<std::array<std::vector<size_t>, 256>, 2> added_by_first_byte_;
  std::array<bool, 2> any_added_{};
  int64_t bos_ = -1, eos_ = -1;
};

}  // namespace titan::data
