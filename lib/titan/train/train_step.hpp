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
#include <optional>
#include <vector>

#include "titan/data/dataloader.hpp"
#include "titan/models/llama3/transformer.hpp"

namespace titan::dist {
class ProcessGroup;
}
namespace titan::pp {
class PipelineRuntime;
}

namespace titan::train {

/// @brief The loss of a micro-batch: logits (or this rank's slice of them)
/// and labels to the scalar sum of its counted targets' losses
/// (ops::cross_entropy with LossReduction::Sum, or loss parallel's).
using LossFn = std::function<at::Tensor(const at::Tensor& logits, const at::Tensor& labels)>;

/// @brief How a step normalises its loss, known before its first backward.
///
/// The loss of a step is torchtitan's: the sum of the per-target losses
/// over the whole global batch — every micro-batch of gradient
/// accumulation and of the pipeline, every data-parallel rank, every
/// context-parallel shard — divided by the number of targets in it that
/// count (not -100). Every target weighs the same whatever the layout,
/// also when document masking hides more targets in some micro-batches
/// than in others (a mean of per-micro-batch means would not).
struct LossNormalizer {
  /// Counted targets in the global batch (a float64 0-dim tensor on the
  /// training device: summing it over the ranks syncs nothing with the host).
  at::Tensor global_targets;
  /// What each rank multiplies its summed loss by before backward:
  /// averaging_ranks / global_targets (fp32, 0-dim, on the device), where
  /// averaging_ranks is the number of ranks whose gradients data
  /// parallelism averages — the average of the ranks' gradients is then
  /// the gradient of the global mean.
  at::Tensor loss_scale;
};

/// @brief The step's LossNormalizer: `local_targets` (this rank's counted
/// targets, ops::counted_targets of what it trains on: its cp shard under
/// context parallelism) summed over `loss_group` — the data-parallel and
/// context-parallel ranks, whose gradients are averaged; null: one
/// process. One all-reduce of a scalar.
LossNormalizer normalize_over_global_batch(int64_t local_targets, const dist::ProcessGroup* loss_group,
                                           const c10::Device& device);

/// @brief What accumulate_gradients measured.
struct AccumulationResult {
  /// This rank's loss summed over its targets (all its micro-batches;
  /// unscaled), a detached fp32 scalar on the training device — left there
  /// so that no host-device sync happens until the caller reads it.
  at::Tensor loss_sum;
  /// Tokens (labels) this rank trained on.
  int64_t tokens = 0;
  /// Seconds spent copying the batches to the device.
  double data_seconds = 0;
};

/// @brief Each batch cut along the batch into micro-batches of
/// `microbatch_size` sequences, in order (a batch's rows [0, size), [size,
/// 2·size), ...), as a pipeline's schedule cuts it; inputs, labels and
/// doc_start (when defined) alike. `microbatch_size` must divide every
/// batch's size: a one-line titan::Error otherwise.
std::vector<data::Batch> cut_into_microbatches(std::vector<data::Batch> batches, int64_t microbatch_size);

/// @brief Runs the step's `micro_batches` through `model`: each one
/// forward, `loss_fn` (the sum over its targets; default: ops::cross_entropy
/// summed) and backward of that sum times `loss_scale`
/// (LossNormalizer::loss_scale), so that the gradients add up to those of
/// the step's global mean loss — the same gradients as one big batch of the
/// same samples (up to fp32 rounding), however unevenly the micro-batches'
/// targets count. Gradients are accumulated into the existing .grad (zero
/// them first). Batches are moved to `device`.
///
/// `set_gradient_sync`, when given, is called before each backward with
/// true for the last micro-batch only: data parallelism uses it to skip
/// the gradient all-reduce on the others (DDP's no_sync), since only the
/// accumulated sum needs averaging.
///
/// `autocast`, when set, runs each forward and loss under autocast to that
/// dtype (autocast.hpp: mixed precision without FSDP); backward runs
/// outside it, as torch.autocast's documentation asks.
AccumulationResult accumulate_gradients(models::llama3::Transformer& model,
                                        const std::vector<data::Batch>& micro_batches, const at::Tensor& loss_scale,
                                        const c10::Device& device,
                                        const std::function<void(bool)>& set_gradient_sync = {},
                                        const LossFn& loss_fn = {},
                                        std::optional<at::ScalarType> autocast = std::nullopt);

/// @brief accumulate_gradients under pipeline parallelism: each of
/// `batches` goes through one step of `runtime` (which cuts it into the
/// schedule's micro-batches and runs their forwards and backwards across
/// the stages, whose losses sum over their targets), with each
/// micro-batch's loss scaled by `loss_scale` (LossNormalizer::loss_scale,
/// read to the host: the runtime takes a number). The loss sum is the last
/// stage's, known on every pipeline rank.
AccumulationResult accumulate_pipeline_gradients(pp::PipelineRuntime& runtime,
                                                 const std::vector<data::Batch>& batches, double loss_scale,
                                                 const c10::Device& device);

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
