#pragma once
/// @file
/// @brief BatchInputs: what a pipeline step feeds its stages — the tokens
/// (first stage), the labels (last stage) and the per-token tensors every
/// stage needs (doc_start for block-causal attention) — and the one
/// function that cuts a step's batch into micro-batches, all of them alike.

#include <ATen/core/Tensor.h>

#include <vector>

namespace titan::pp {

/// @brief A batch, or one micro-batch of it: tensors whose dim 0 is the
/// sequence. Every pipeline rank holds the whole step's batch (the pipeline
/// ranks of a data-parallel replica read the same one), so each stage
/// takes its micro-batch's rows locally and nothing but activations and
/// gradients travels between stages — torchtitan passes the same as extra
/// keyword arguments to every stage's forward.
struct BatchInputs {
  at::Tensor inputs;     ///< [batch, seq] token ids, read by the first stage
  at::Tensor labels;     ///< [batch, seq] targets, read by the last stage
  /// [batch, seq] int64 document starts (ops/attention/document_mask.hpp)
  /// for block-causal attention, read by every stage; undefined with
  /// causal attention.
  at::Tensor doc_start;
};

/// @brief `batch` cut along dim 0 into `m` equal micro-batches, in order
/// (micro-batch i holds rows [i·B/m, (i+1)·B/m)). The defined tensors must
/// share the batch size B, which m must divide; a one-line titan::Error
/// otherwise. Undefined tensors stay undefined in every micro-batch.
std::vector<BatchInputs> split_microbatches(const BatchInputs& batch, int m);

}  // namespace titan::pp
