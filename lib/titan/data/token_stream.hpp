#pragma once
/// @file
/// @brief Documents to an endless, shardable, resumable stream of
/// fixed-length token windows: the part of the data pipeline that decides
/// which tokens each data-parallel rank trains on.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/data/documents.hpp"
#include "titan/data/tokenizer.hpp"

namespace titan::data {

/// @brief Everything needed to continue a TokenStream exactly where it
/// was: saved with a checkpoint, one per data-parallel rank.
struct TokenStreamState {
  int64_t epoch = 0;                ///< completed passes over the data
  DocumentPosition position;        ///< where the next document starts
  int64_t doc_index = 0;            ///< documents read in this epoch, all ranks' together
  std::vector<int64_t> buffer;      ///< tokens read but not yet in a window
  int64_t windows = 0;              ///< windows produced since the start (for logs)
  int64_t window_len = 0;           ///< seq_len + 1, checked on restore
  int64_t dp_rank = 0, dp_world = 1;  ///< checked on restore: a rank resumes only its own stream
  int64_t num_files = 0;            ///< checked on restore: the dataset must be the same

  /// @brief As JSON (small: the buffer holds less than one document plus a window).
  nlohmann::json to_json() const;
  /// @brief From to_json()'s output; throws titan::Error on a missing field.
  static TokenStreamState from_json(const nlohmann::json& j);
};

/// @brief Tokenises documents one after another, each as BOS + text + EOS,
/// into one stream, and cuts it into consecutive windows of `window_len`
/// (= seq_len + 1) tokens, as torchtitan's datasets do.
///
/// Sharding: document k of each pass belongs to data-parallel rank
/// k % dp_world, so ranks read disjoint documents and only tokenise their
/// own. When the data ends the stream starts the next epoch (and logs it):
/// it never runs dry. A pass that yields no window for this rank (an empty
/// dataset, or fewer tokens than one window) throws titan::Error.
class TokenStream {
 public:
  /// @brief Streams the dataset at `path` (a file or folder; see
  /// list_dataset_files, which `split_prefix` goes to) for rank `dp_rank`
  /// of `dp_world`.
  TokenStream(std::shared_ptr<const Tokenizer> tokenizer, const std::string& path, int64_t window_len,
              int64_t dp_rank = 0, int64_t dp_world = 1, const std::string& split_prefix = "");

  /// @brief Writes the next window_len tokens to `out`.
  void next_window(int64_t* out);

  /// @brief The position, to continue from later with load_state.
  TokenStreamState state() const;
  /// @brief Continues from a saved position; throws titan::Error when it
  /// was saved for another rank, world, window length or dataset.
  void load_state(const TokenStreamState& s);

  int64_t window_len() const { return window_len_; }
  int64_t epoch() const { return epoch_; }
  const std::string& path() const { return path_; }

 private:
  void fill();  // reads documents until a window is buffered

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::string path_;
  DocumentReader reader_;
  int64_t window_len_, dp_rank_, dp_world_;
  int64_t epoch_ = 0, doc_index_ = 0, windows_ = 0;
  std::vector<int64_t> buffer_;
  size_t head_ = 0;  // buffer_[head_..] are the unread tokens; compacted now and then
  // For the "too small" check: what this pass has seen since its start.
  bool pass_from_start_ = true;
  int64_t pass_windows_ = 0, pass_docs_ = 0, pass_tokens_ = 0;
  std::string text_;
};

}  // namespace titan::data
