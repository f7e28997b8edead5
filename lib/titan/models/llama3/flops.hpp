#pragma once
/// @file
/// @brief Parameter counts and training FLOPs per token of a Llama 3 model,
/// analytic (no model needed), counted the way torchtitan counts them.

#include <cstdint>

#include "titan/models/llama3/model_args.hpp"

namespace titan::models::llama3 {

/// @brief Every parameter of the model: embedding V·D, per block wq D·H·Q +
/// wk, wv D·KV·Q each + wo H·Q·D + w1, w2, w3 D·F each + two norms D, final
/// norm D, output V·D (none when tied: the embedding is that weight).
/// Equals the sum of numel over named_parameters().
int64_t count_parameters(const ModelArgs& args);

/// The embedding table's parameters, V·D (a lookup, not a matmul).
int64_t count_embedding_parameters(const ModelArgs& args);

/// @brief Training (forward + backward) FLOPs per token as torchtitan's
/// get_nparams_and_flops counts them:
///
///   6 · (N − N_embedding) + 12 · L · H · Q · T    (untied)
///   6 · N + 12 · L · H · Q · T                    (tied, torchtitan 0.3)
///
/// 6·N: each weight does one multiply-add (2 FLOPs) per token in the forward
/// and two in the backward (grad of input and of weight). The embedding is
/// left out because a lookup does no arithmetic; the output projection stays
/// in (it is a real matmul). Tied, the one V·D table is the output's weight
/// and stays in, so the count is the same as the untied model's.
/// 12·L·H·Q·T: per layer, QKᵀ and scores·V each cost 2·T·(H·Q) FLOPs per
/// token forward, ×3 for forward + backward; the causal
/// mask is not discounted (torchtitan and PaLM count the full T×T square),
/// and norms, RoPE, softmax and SwiGLU's elementwise work are not counted.
double flops_per_token(const ModelArgs& args, int64_t seq_len);

}  // namespace titan::models::llama3
