#pragma once
/// @file
/// @brief Training a byte-level BPE vocabulary in tiktoken's format: the
/// engine behind `titan tokenizer train` and the built-in tokenizer.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace titan::data {

/// @brief How often each pre-tokenised piece occurs in a corpus. BPE never
/// merges across pieces, so this is all the training needs to see.
using PieceCounts = std::unordered_map<std::string, int64_t>;

/// @brief Adds the Llama 3 pieces of one document to `counts`.
void count_pieces(std::string_view document, PieceCounts& counts);

/// @brief What train_bpe did.
struct BpeTrainResult {
  std::vector<std::string> ranks;  ///< token bytes by rank: 256 bytes, then merges
  int64_t merges = 0;              ///< pair merges done (some reuse a token that exists)
  bool exhausted = false;          ///< stopped early: every piece was one token
};

/// @brief Trains ranks up to `num_ranks` tokens (256 single bytes first).
///
/// Classic BPE: repeatedly merge the most frequent adjacent pair of tokens
/// inside pieces (ties: the pair with the smaller ids, so the result is
/// deterministic), weighted by piece counts. Pair counts are updated
/// incrementally: a merge only revisits the pieces that contain the pair.
/// A merge whose bytes already are a token reuses it (a rank file cannot
/// hold one byte string twice). `progress(ranks_so_far)` is called now and
/// then when given.
BpeTrainResult train_bpe(const PieceCounts& counts, int64_t num_ranks,
                         const std::function<void(int64_t)>& progress = {});

}  // namespace titan::data
