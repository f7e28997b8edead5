#pragma once
/// @file
/// @brief One training step split into its separable parts: gradient
/// accumulation over micro-batches (forward, loss, backward), then
/// clipping and the optimizer update. Parallelism wraps these parts later
/// (DDP reduces gradients between them, pipeline schedules replace the
/// micro-batch loop) without changing their contracts.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "titan/data/dataloader.hpp"
#include "titan/models/llama3/transformer.hpp"

namespace titan::dist {
class ProcessGroup;
}
namespace titan::pp {
class PipelineSchedule;
}

namespace titan::train {

/// @brief Where micro-batches come from: the data loader's next(), or a
/// fixed list in tests.
using BatchSource = std::function<data::Batch()>;

/// @brief The loss of a micro-batch: logits (or this rank's slice of them)
/// and labels to a scalar mean.
using LossFn = std::function<at::Tensor(const at::Tensor& logits, const at::Tensor& labels)>;

/// @brief What accumulate_gradients measured.
struct AccumulationResult {
  /// Mean loss over the whole step's batch (all micro-batches), a detached
  /// fp32 scalar on the training device — left there so that no
  /// host-device sync happens until the caller reads it.
  at::Tensor loss;
  /// Tokens (labels) this rank trained on.
  int64_t tokens = 0;
  /// Seconds spent inside `next_batch` (data loading and the copy to the device).
  double data_seconds = 0;
};

/// @brief Runs `accumulation_steps` micro-batches through `model`: each one
/// forward, cross-entropy, and backward of loss / accumulation_steps, so
/// that the gradients add up to those of the mean loss over all
/// micro-batches — the same gradients as one big batch of the same samples
/// (up to fp32 rounding). Gradients are accumulated into the existing
/// .grad (zero them first). Batches are moved to `device`.
///
/// `set_gradient_sync`, when given, is called before each backward with
/// true for the last micro-batch only: data parallelism uses it to skip
/// the gradient all-reduce on the others (DDP's no_sync), since only the
/// accumulated sum needs averaging.
///
/// `loss_fn`, when given, replaces cross_entropy (loss parallel computes it
/// on vocabulary-sharded logits).
AccumulationResult accumulate_gradients(models::llama3::Transformer& model, const BatchSource& next_batch,
                                        int64_t accumulation_steps, const c10::Device& device,
                                        const std::function<void(bool)>& set_gradient_sync = {},
                                        const LossFn& loss_fn = {});

/// @brief accumulate_gradients under pipeline parallelism: each of
/// `accumulation_steps` batches goes through one step of `schedule` (which
/// cuts it into the schedule's micro-batches and runs their forwards and
/// backwards across the stages), with each micro-batch's loss scaled by
/// 1 / (micro-batches · accumulation_steps), so the gradients are again
/// those of the mean loss over everything this rank read. The loss is the
/// last stage's, known on every pipeline rank.
AccumulationResult accumulate_pipeline_gradients(pp::PipelineSchedule& schedule, const BatchSource& next_batch,
                                                 int64_t accumulation_steps, const c10::Device& device);

/// @brief Clips the gradients of `params` to global norm `max_norm` (no
/// clipping when max_norm <= 0; the norm is still computed for the log) and
/// returns the norm before clipping (NaN/inf as is, gradients untouched) as
/// a float64 0-dim tensor on the gradients' device: computing and applying
/// it syncs nothing with the host, which reads it with the step's loss.
/// With `shard_groups`, each rank holds shards of the gradients over those
/// groups (FSDP, TP) and the norm is that of the whole gradient; then
/// `norm_params` (when not empty) are the ones this rank counts in it, so
/// that a parameter replicated over a group counts once, while all of
/// `params` are scaled.
at::Tensor clip_gradients(const std::vector<at::Tensor>& params, double max_norm,
                          const std::vector<const dist::ProcessGroup*>& shard_groups = {},
                          const std::vector<at::Tensor>& norm_params = {});

}  // namespace titan::train
