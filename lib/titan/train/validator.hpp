#pragma once
/// @file
/// @brief Validation, torchtitan's [validation]: after step 1 and every
/// `freq` steps, the model's loss on a held-out split, computed without
/// gradients and without touching the optimizer or the training data's
/// position.
///
/// The loss is the summed cross-entropy of every counted target (labels
/// other than -100) of every data-parallel rank's batches over their
/// number, so it does not depend on the layout: FSDP 4, CP 2 x TP 2 or a
/// pipeline give one process's value up to rounding. It is the training
/// loss's definition too (train_step.hpp's LossNormalizer), torchtitan's
/// since its global-batch loss normalisation (torchtitan PR #2206;
/// torchtitan 0.2 took the mean of each rank's per-batch means, the same
/// number when every batch counts equally many targets).
/// Every validation starts at the beginning of the split, so successive
/// ones are measured on the same batches and can be compared.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/data/dataloader.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::train {

/// @brief One batch's part of the validation loss: the summed loss of its
/// counted targets and their number (0-dim float64 tensors on the compute device).
struct LossSum {
  at::Tensor sum;
  at::Tensor count;
};

/// @brief What one validation measured, job-wide.
struct ValidationResult {
  double loss = 0;       ///< sum over count, all ranks
  int64_t targets = 0;   ///< counted targets, all ranks
  int64_t batches = 0;   ///< batches per data-parallel rank
  double seconds = 0;
};

/// @brief The held-out split's loaders and the loop over their batches.
class Validator {
 public:
  /// Reads [validation]'s split for the data-parallel ranks `dp_ranks` of
  /// `dp_world` (this rank's; every rank's for a one-process reference of
  /// several), local_batch_size windows of seq_len + 1 tokens a batch.
  /// With steps = -1 a validation is one pass over the split: the fewest
  /// whole batches any rank's part holds, agreed over `world` (null on one
  /// process) so that every rank runs as many forwards. A split without one
  /// whole batch for some rank is a one-line titan::Error.
  Validator(const config::ValidationSection& cfg, std::shared_ptr<const data::Tokenizer> tokenizer,
            const std::vector<int64_t>& dp_ranks, int64_t dp_world, bool document_masking,
            const dist::ProcessGroup* world, c10::Device device);

  /// @brief Whether a validation runs after `step`: step 1 and every freq-th
  /// (torchtitan's rule).
  bool due(int64_t step) const { return step == 1 || step % cfg_.freq == 0; }

  /// @brief Batches each data-parallel rank runs per validation.
  int64_t batches() const { return batches_; }

  /// @brief Runs one validation: every batch of every loader through
  /// `loss_of` (under no-grad), the sums all-reduced over `loss_group`
  /// (the data-parallel and context-parallel ranks; null: none).
  ValidationResult run(const std::function<LossSum(data::Batch)>& loss_of, const dist::ProcessGroup* loss_group);

 private:
  config::ValidationSection cfg_;
  c10::Device device_;
  std::vector<std::unique_ptr<data::DataLoader>> loaders_;
  std::vector<nlohmann::json> starts_;  // each loader's position at the start of the split
  int64_t batches_ = 0;
};

}  // namespace titan::train
