#pragma once
/// @file
/// @brief The training loss: next-token cross-entropy over every position.

#include <ATen/core/Tensor.h>

namespace titan::train {

/// @brief Mean cross-entropy of `logits` [batch, seq, vocab] against
/// `labels` [batch, seq] (int64), over all batch × seq positions.
///
/// The logits are flattened to [batch·seq, vocab] (torchtitan's
/// `cross_entropy_loss`) and computed in fp32 even when the model runs in
/// bf16, because log-softmax over a 128K vocabulary loses too much in bf16.
/// A label of -100 would be ignored (torch's default ignore_index); the
/// data pipeline produces none, so every position counts equally and the
/// mean over micro-batches equals the mean over the whole batch.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels);

}  // namespace titan::train
