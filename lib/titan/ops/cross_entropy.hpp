#pragma once
/// @file
/// @brief The training loss: next-token cross-entropy over every position,
/// and the weight a context-parallel shard's mean loss gets. An op, so that
/// the pipeline's last stage (parallel/) and the trainer (train/) share it.

#include <ATen/core/Tensor.h>

namespace titan::ops {

/// @brief Mean cross-entropy of `logits` [batch, seq, vocab] against
/// `labels` [batch, seq] (int64), over all batch × seq positions.
///
/// The logits are flattened to [batch·seq, vocab] (torchtitan's
/// `cross_entropy_loss`) and computed in fp32 even when the model runs in
/// bf16, because log-softmax over a 128K vocabulary loses too much in bf16.
/// A label of -100 is ignored (torch's default ignore_index): document
/// masking hides the targets across a document boundary that way, and the
/// mean is over the other positions.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels);

/// @brief The factor a context-parallel rank multiplies its shard's mean
/// loss by so that the mean over the `shards` ranks is the window's mean:
/// shards · n_shard / n_window, n counting the targets that are not -100.
/// 1 exactly when every target counts (each shard holds 1/shards of them);
/// otherwise, with document masking, shards hold different numbers of
/// hidden targets and a plain mean of their means would weigh them wrongly.
double shard_loss_weight(const at::Tensor& window_labels, const at::Tensor& shard_labels, int64_t shards);

/// @brief `loss` (the mean loss of `logits`) times `weight`
/// (shard_loss_weight's). Weight 0 — a shard whose targets are all hidden,
/// whose mean is NaN — gives a zero that keeps a graph through `logits`, so
/// its backward still runs the collectives the other ranks wait for.
at::Tensor weigh_shard_loss(const at::Tensor& loss, const at::Tensor& logits, double weight);

}  // namespace titan::ops
