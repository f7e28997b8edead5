#pragma once
/// @file
/// @brief The built-in tokenizer: a BPE trained on the built-in corpus,
/// built once per machine and cached, so that the demo needs no download.

#include <memory>
#include <string>

#include "titan/data/tiktoken_tokenizer.hpp"

namespace titan::data {

/// @brief Ids of the built-in tokenizer, special tokens included: the
/// debug model's vocab_size.
inline constexpr int64_t kBuiltinVocabSize = 2048;

/// @brief Number of Llama 3 special tokens every tiktoken tokenizer here gets.
inline constexpr int kNumSpecialTokens = 256;

/// @brief Folder for files titan computes once per machine:
/// $TITAN_CACHE_DIR, else $XDG_CACHE_HOME/titan, else ~/.cache/titan.
std::string titan_cache_dir();

/// @brief Trains a tiktoken BPE with `vocab_size` ids (kNumSpecialTokens of
/// them special) on the documents of `dataset` (see resolve_dataset_path).
/// What `titan tokenizer train` and make_default_tokenizer run.
std::shared_ptr<TiktokenTokenizer> train_tokenizer(const std::string& dataset, int64_t vocab_size,
                                                   bool verbose = false);

/// @brief Path of the cached built-in rank file: named after a hash of the
/// corpus, so a different corpus gets its own file.
std::string builtin_tokenizer_path();

}  // namespace titan::data
