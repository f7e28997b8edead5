#pragma once
/// @file
/// @brief The training loss: next-token cross-entropy over every position,
/// as a mean or as a sum, and the count of the targets it counts. An op, so
/// that the pipeline's last stage (parallel/) and the trainer (train/)
/// share it.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace titan::ops {

/// @brief The label that no loss counts: torch's default ignore_index.
/// Document masking hides the targets across a document boundary with it.
constexpr int64_t kIgnoreIndex = -100;

/// @brief How cross_entropy reduces the per-target losses.
enum class LossReduction {
  Mean,  ///< over the counted targets (NaN when none counts): torch's default
  Sum,   ///< added up (0 when none counts): the trainer divides by the global batch's count
};

/// @brief Cross-entropy of `logits` [batch, seq, vocab] against `labels`
/// [batch, seq] (int64) over all batch × seq positions whose label is not
/// kIgnoreIndex, reduced by `reduction`.
///
/// The logits are flattened to [batch·seq, vocab] (torchtitan's
/// `cross_entropy_loss`) and computed in fp32 even when the model runs in
/// bf16, because log-softmax over a 128K vocabulary loses too much in bf16.
/// A sum over no counted target is a zero that still has a graph through
/// `logits`, so its backward runs (and runs the collectives other ranks
/// wait for).
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                         LossReduction reduction = LossReduction::Mean);

/// @brief How many of `labels` a loss counts (those not kIgnoreIndex).
/// Reads the tensor: call it on the host copy of the labels.
int64_t counted_targets(const at::Tensor& labels);

}  // namespace titan::ops
