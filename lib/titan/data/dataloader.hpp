#pragma once
/// @file
/// @brief Batches of (inputs, labels) for the trainer, drawn from a
/// TokenStream: the one data object a training loop holds.

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/data/token_stream.hpp"
#include "titan/data/tokenizer.hpp"

namespace titan::data {

/// @brief What to load and how much per step.
struct DataLoaderOptions {
  std::string dataset;     ///< path or name, as resolve_dataset_path takes it ("" = built-in corpus)
  int64_t batch_size = 1;  ///< sequences per batch on this rank (local batch size)
  int64_t seq_len = 0;     ///< tokens per sequence
  int64_t dp_rank = 0;     ///< this rank's index among data-parallel ranks
  int64_t dp_world = 1;    ///< number of data-parallel ranks (replicate x shard degree)
  std::string dataset_path;  ///< where a named dataset's files are (resolve_dataset_path); "" = none
  /// Document masking ([model] attn_mask_type = "block_causal"): each batch
  /// carries doc_start, and a target that is the next document's BOS (a
  /// document's last token predicting across the boundary) is ignored.
  bool document_masking = false;
};

/// @brief One training batch: CPU int64 tensors of shape [batch_size, seq_len];
/// labels are the inputs shifted left by one token (next-token targets).
struct Batch {
  at::Tensor inputs;
  at::Tensor labels;  ///< -100 (ignored by the loss) where document masking hides a target
  /// With document masking: [batch_size, seq_len] int64, where each token's
  /// document begins in the window (ops/attention/document_mask.hpp); else undefined.
  at::Tensor doc_start;
};

/// @brief An endless loader of batches for one data-parallel rank.
///
/// Each batch takes the next batch_size windows of seq_len + 1 tokens from
/// this rank's TokenStream; window w gives inputs w[:-1] and labels w[1:].
/// Its position (state_dict) restores exactly: the batches after a restore
/// are the ones that would have come next.
class DataLoader {
 public:
  /// @brief Opens the dataset (resolve_dataset_path) for this rank. Throws
  /// titan::Error on bad options or a missing dataset.
  DataLoader(std::shared_ptr<const Tokenizer> tokenizer, const DataLoaderOptions& options);

  /// @brief The next batch.
  Batch next();

  /// @brief The position after the last batch, as JSON for a checkpoint.
  nlohmann::json state_dict() const;
  /// @brief Continues from state_dict()'s output (same rank, world,
  /// seq_len and dataset), or throws titan::Error naming what differs.
  void load_state_dict(const nlohmann::json& state);

  /// @brief Completed passes over this rank's part of the data.
  int64_t epoch() const { return stream_.epoch(); }
  const DataLoaderOptions& options() const { return options_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  /// @brief The resolved dataset path.
  const std::string& dataset_path() const { return stream_.path(); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  DataLoaderOptions options_;
  TokenStream stream_;
};

}  // namespace titan::data
