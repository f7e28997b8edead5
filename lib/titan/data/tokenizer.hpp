#pragma once
/// @file
/// @brief The Tokenizer interface, and the functions the trainer calls to
/// get one (load_tokenizer, make_default_tokenizer) and to check it against
/// the model (check_vocab_fits).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

/// @brief Text to token ids and back.
///
/// Ids are int64 so that they go into an at::kLong tensor without a copy
/// of a different width.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// @brief Encodes UTF-8 `text`, with BOS first and/or EOS last when asked.
  /// By default text that looks like a special token ("<|eot_id|>") is
  /// encoded as ordinary text, as Meta's Llama 3 tokenizer does; with
  /// `allow_special` it becomes the special token's id.
  virtual std::vector<int64_t> encode(std::string_view text, bool bos = false, bool eos = false,
                                      bool allow_special = false) const = 0;

  /// @brief The bytes that `ids` stand for (special tokens as their text).
  /// Not necessarily valid UTF-8 when the ids cut a character; throws
  /// titan::Error on an id outside the vocabulary.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;

  /// @brief Number of ids, special tokens included: the smallest model
  /// vocab_size that can embed every id.
  virtual int64_t vocab_size() const = 0;
  /// @brief Id of the begin-of-text token every document starts with, or
  /// -1 when there is none (a tokenizer.json without tokenizer_config.json,
  /// as in torchtitan); encode then adds none.
  virtual int64_t bos_id() const = 0;
  /// @brief Id of the end-of-text token every document ends with, or -1
  /// when there is none.
  virtual int64_t eos_id() const = 0;
  /// @brief Padding id, or -1 when there is none (Llama 3 has none).
  virtual int64_t pad_id() const { return -1; }

  /// @brief What it is and where it came from, for logs and error messages
  /// (e.g. "tiktoken BPE /path/tokenizer.model (128256 tokens)").
  virtual std::string describe() const = 0;
};

/// @brief Loads the tokenizer a config names in [model] tokenizer_path (or
/// hf_assets_path, see choose_tokenizer_path).
///
/// - "" or "builtin": the built-in tokenizer (make_default_tokenizer).
/// - "builtin:byte": the byte-level tokenizer (258 ids).
/// - a folder (torchtitan's hf_assets_path): its tokenizer.json (with its
///   tokenizer_config.json), else its original/tokenizer.model.
/// - a file named *.json or holding JSON: a Hugging Face tokenizer.json
///   (HfTokenizer), with the tokenizer_config.json beside it if any.
/// - any other file: a tiktoken-format rank file (Llama 3's tokenizer.model
///   format) with Llama 3's 256 special tokens appended.
///
/// A missing or corrupt file throws a one-line titan::Error naming the file
/// (and line), and says how to get a Llama 3 tokenizer.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path);

/// @brief The path load_tokenizer gets from a config, and a note for the
/// log ("" when there is nothing to say).
struct TokenizerChoice {
  std::string path;
  std::string note;
};

/// @brief torchtitan's default hf_assets_path: a folder of its repository.
inline constexpr const char* kTorchtitanTestAssets = "./tests/assets/tokenizer";

/// @brief torchtitan 0.2's rule: a non-empty [model] tokenizer_path wins
/// over hf_assets_path (torchtitan copies tokenizer_path into
/// hf_assets_path, with a deprecation warning); else hf_assets_path; else
/// "" (the built-in tokenizer). The note says which won when both are set.
/// Two exceptions, so that torchtitan's own configs run here as written:
/// - its default kTorchtitanTestAssets, when no such folder exists, means
///   the built-in tokenizer (with a note);
/// - a path inside torchtitan's repository (its llama3 configs name
///   "./torchtitan/datasets/tokenizer/original/tokenizer.model") that is not
///   here means the built-in tokenizer too, but only for a model sized for
///   it (`model_vocab_size` == kBuiltinVocabSize, the debugmodel flavor):
///   a real flavor still needs the real tokenizer, and load_tokenizer says
///   how to get it. `model_vocab_size` 0 (unknown) never falls back.
TokenizerChoice choose_tokenizer_path(const std::string& tokenizer_path, const std::string& hf_assets_path,
                                      int64_t model_vocab_size = 0);

/// @brief The built-in tokenizer: byte-level BPE with 2048 ids (1792 ranks
/// + Llama 3's 256 special tokens) trained on the built-in fortunes corpus
/// with Llama 3's pre-tokenisation. Trained on first use (about a second)
/// and cached under the titan cache folder (see docs/data.md); training is
/// deterministic, so every machine with the same corpus gets the same file.
std::shared_ptr<const Tokenizer> make_default_tokenizer();

/// @brief Throws titan::Error when the tokenizer has more ids than the
/// model's embedding has rows, naming both sizes and what to change.
void check_vocab_fits(const Tokenizer& tokenizer, int64_t model_vocab_size);

}  // namespace titan::data
