#pragma once
/// @file
/// @brief Loss parallel: next-token cross-entropy on logits sharded over
/// the vocabulary (the output of a ColwiseParallel LM head), without ever
/// gathering them (Megatron-LM's vocab-parallel cross-entropy; torch's
/// `loss_parallel()` context).
///
/// With z the logits of one position, rank r holding the vocabulary slice
/// V_r, and t the target id:
///
///     loss = log Σ_v exp(z_v − m) + m − z_t,   m = max_v z_v
///
/// Each rank computes its slice's max, sum of exponentials and (if t falls
/// in V_r) the target logit; three all-reduces over TP (max, sum, sum) give
/// the terms. Per rank that is 3 scalars per position instead of the
/// V/tp·(tp−1) logits an all-gather would move. The backward needs no
/// communication: ∂loss/∂z_v = softmax(z)_v − [v = t] on the rank that
/// holds v.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "titan/ops/cross_entropy.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::tp {

/// @brief Cross-entropy of `local_logits` [..., V_local] (this rank's
/// vocabulary slice, starting at global id `vocab_offset`) against
/// `labels` [...] (global ids; -100 is ignored, as torch's default
/// ignore_index), reduced by `reduction`. Computed in fp32; equal in value
/// and gradient to ops::cross_entropy on the gathered logits. Collective
/// over `tp_group`.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& labels,
                                        const dist::ProcessGroup& tp_group, int64_t vocab_offset,
                                        ops::LossReduction reduction = ops::LossReduction::Mean);

}  // namespace titan::tp
