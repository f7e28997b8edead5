#pragma once
/// @file
/// @brief What a Llama 3 training step keeps for backward, per token, by
/// the tensors titan's forward actually saves: the activation half of
/// `titan estimate`.
///
/// The counts follow the code, tensor by tensor (ATen's autograd formulas
/// decide what is saved; titan's modules decide which tensors exist):
///
/// | where | kept until backward (per token) |
/// | --- | --- |
/// | attention_norm, ffn_norm (at::rms_norm) | the normalised input x·rstd (D) and the output (D), rstd (1, fp32); the fused RMSNorm (CPU) keeps its input (the residual's, counted there) and rstd only |
/// | wq, wk, wv | their input is the norm's output (counted above); their outputs q (H·Q), k, v (KV·Q each; H·Q each when SDPA gets K/V repeated for GQA) |
/// | RoPE | nothing: it multiplies by constant tables |
/// | attention | its output (H·Q) and log-sum-exp (H, fp32); wo's input is that output |
/// | residuals | h = x + attention (D, ffn_norm's input) and the block's output (D, the next block's input) |
/// | SwiGLU | w1's output (F, SiLU's input), SiLU's output and w3's output (F each, the product's inputs), the product (F, w2's input); fused: no SiLU output |
/// | head | the final norm (2·D + 1), the logits (V), their fp32 copy for the loss when the logits are bf16, log_softmax's output (V, fp32); the chunked loss (fused_kernels): the logits and one fp32 log-sum-exp |
///
/// with D = dim, H = n_heads, Q = head_dim, KV = n_kv_heads, F = the FFN
/// hidden size, V = the vocabulary. Under tensor parallelism (degree t)
/// everything between the column- and row-wise linears is divided by t;
/// with sequence parallelism the norms and residuals are too, but each
/// norm's all-gathered output (D) is what the column-wise linears save.
/// Activation checkpointing keeps only a wrapped block's output (full,
/// selective N) or that plus its seven matmul outputs (op); backward then
/// rebuilds one block's saved set at a time. Measured against the counting
/// allocator on the CPU: docs/estimate.md.
#include <cstdint>
#include <string>
#include <vector>

#include "titan/models/llama3/model_args.hpp"
#include "titan/ops/attention/backend.hpp"

namespace titan::estimate {

/// @brief The layout facts that change what a block saves.
struct ActivationLayout {
  int64_t tp = 1;                  ///< tensor-parallel degree
  bool sequence_parallel = false;  ///< SP (with tp > 1)
  bool loss_parallel = false;      ///< logits stay vocabulary-sharded into the loss
  ops::AttentionBackend attention = ops::AttentionBackend::sdpa;  ///< sdpa repeats K/V for GQA
  int64_t activation_bytes = 4;    ///< bytes per element of activations (the compute dtype)
  /// [model] fused_kernels: SwiGLU keeps a and b but not silu(a), and the
  /// chunked loss keeps one fp32 log-sum-exp per token instead of the fp32
  /// log-softmax (every device)
  bool fused_kernels = false;
  /// the fused RMSNorm (fused_kernels on the CPU): it keeps its input, which
  /// the residual stream holds anyway, and rstd — not x·rstd
  bool fused_norm = false;
  /// the loss runs titan's CUDA kernels (fused_kernels on a GPU): backward
  /// makes only the logits' gradient, not the chunked path's fp32 chunks
  bool loss_kernel = false;
};

/// @brief Bytes per token (of the full sequence a rank's batch holds) one
/// transformer block keeps for backward, by activation-checkpoint treatment.
struct BlockActivations {
  double saved = 0;         ///< no AC: everything autograd saves
  double kept_full = 0;     ///< checkpointed (full / selective N): the block's output only
  double kept_op = 0;       ///< per-op SAC: the output plus the 7 matmul outputs
  double grad_transient = 0;  ///< gradients alive inside its backward: the incoming one (D) and one F-sized
  /// a zero-bubble schedule's split backward: the output gradients its
  /// weight-bearing nodes received in I, kept for W (each linear's output,
  /// wo's and w2's whole D, the two norms' on the stream's tokens)
  double weight_step_gradients = 0;
};

/// @brief Bytes per token of the model's ends.
struct HeadActivations {
  double stage_input = 0;  ///< the first block's input: the embeddings' output or the received activations
  double saved = 0;        ///< final norm, logits, their fp32 copy, log_softmax's output
  double transient = 0;    ///< the logits' gradient at the start of backward (fp32)
  /// the last stage's share of BlockActivations::weight_step_gradients:
  /// the output projection's gradient (V/t) and the final norm's
  double weight_step_gradients = 0;
};

/// @brief What one block keeps (see the table in the file comment).
BlockActivations block_activations(const models::llama3::ModelArgs& args, const ActivationLayout& layout);

/// @brief What the embeddings' output and the loss end keep.
HeadActivations head_activations(const models::llama3::ModelArgs& args, const ActivationLayout& layout);

}  // namespace titan::estimate
