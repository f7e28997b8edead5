#pragma once
/// @file
/// @brief Lab 10: the training FLOPs of one Llama 3 transformer block,
/// worked out by hand; the checker counts them in a profiler trace.

#include <cstdint>

#include "titan/models/llama3/model_args.hpp"

namespace lab10 {

/// @brief Forward + backward FLOPs of the matmuls of one transformer block
/// over `tokens` tokens (batch × sequence length): the seven projections
/// wq, wk, wv, wo, w1, w2, w3, with the gradients of both their inputs and
/// their weights.
double block_matmul_flops(const titan::models::llama3::ModelArgs& args, int64_t tokens);

/// @brief Forward + backward *model* FLOPs of one block's attention over
/// `batch` sequences of `seq_len` tokens: QKᵀ and scores·V, the full
/// seq_len × seq_len square (no causal discount), backward twice the forward.
double block_attention_flops(const titan::models::llama3::ModelArgs& args, int64_t batch, int64_t seq_len);

}  // namespace lab10
