#pragma once
/// @file
/// @brief The training loss in chunks of rows: cross-entropy that never
/// materialises the fp32 log-softmax of the whole [tokens, vocab] logits,
/// forward or backward (torchtitan's "chunked loss" idea; at 8192 tokens and
/// Llama 3's 128,256-token vocabulary that tensor alone is 4 GiB).

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "titan/ops/cross_entropy.hpp"

namespace titan::ops {

/// @brief cross_entropy() (same arguments, same value to rounding: fp32
/// math, kIgnoreIndex skipped, Mean or Sum) computed `chunk_rows` rows of the
/// flattened [batch·seq, vocab] logits at a time.
///
/// Each chunk runs ATen's log_softmax and its backward (backward recomputes
/// the chunk's log_softmax from the logits), so the gradient is bitwise the
/// one-piece cross_entropy's and the extra memory is a few fp32 chunks
/// (chunk_rows × vocab) instead of two fp32 copies of the whole logits.
/// `chunk_rows` <= 0 picks rows so that a chunk is at most 256 MiB of fp32.
/// On CUDA GPUs with float32 or bfloat16 logits titan's kernels
/// (fused_cuda_kernels.cuh) do it without chunks: forward reads each row
/// once for its log-sum-exp (kept, one fp32 per row), backward writes the
/// gradient in one pass.
at::Tensor chunked_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                 LossReduction reduction = LossReduction::Mean, int64_t chunk_rows = 0);

}  // namespace titan::ops
