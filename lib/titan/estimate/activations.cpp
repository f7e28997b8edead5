// Per-token activation bytes, tensor by tensor, as titan's Llama 3 forward
// keeps them (the table in activations.hpp says which tensor is which).
#include "titan/estimate/activations.hpp"


namespace titan::estimate {
namespace {

constexpr double kFp32 = 4.0;

}  // namespace

BlockActivations block_activations(const models::llama3::ModelArgs& args, const ActivationLayout& layout) {
  const double a = static_cast<double>(layout.activation_bytes);
  const double t = static_cast<double>(layout.tp);
  const double d = static_cast<double>(args.dim);
  const double q_dim = static_cast<double>(args.n_heads * args.head_dim());
  const double kv_dim = static_cast<double>(args.kv_heads() * args.head_dim());
  const double f = static_cast<double>(models::llama3::ffn_hidden_dim(args.dim, args.multiple_of, args.ffn_dim_multiplier));
  const double heads = static_cast<double>(args.n_heads);
  // SDPA gets K/V repeated to every query head (attention.cpp), and the
  // repeated copies are what it saves; flash and math read them as they are.
  const bool repeats = layout.attention == ops::AttentionBackend::sdpa && args.kv_heads() != args.n_heads;
  const double kv_saved = repeats ? q_dim : kv_dim;

  // Residual-stream tensors live on seq/t tokens under SP, whole otherwise.
  const double stream = layout.sequence_parallel ? d / t : d;
  // One norm: x·rstd and rstd on the stream's tokens; its output is saved
  // by the column-wise linears — all-gathered to D under SP, itself otherwise.
  const double norm_rstd = layout.sequence_parallel ? kFp32 / t : kFp32;
  const double norm = (layout.fused_norm ? 0.0 : a * stream) + norm_rstd + a * d;
  const double residuals = 2 * a * stream;  // h and the block's output
  const double attention = a * (q_dim + 2 * kv_saved + q_dim) / t + kFp32 * heads / t;  // q, k, v, out; lse
  // w1's and w3's outputs, silu's (not kept by the fused SwiGLU) and the product.
  const double ffn = (layout.fused_kernels ? 3 : 4) * a * f / t;

  BlockActivations b;
  b.saved = 2 * norm + residuals + attention + ffn;
  b.kept_full = a * stream;
  // Per-op SAC keeps every matmul's output (CachedLinear): q, k, v, wo's
  // and w2's (whole D under TP: the row-wise partial sums before their
  // reduction), w1's and w3's.
  b.kept_op = b.kept_full + a * (q_dim + 2 * kv_dim) / t + 2 * a * d + 2 * a * f / t;
  b.grad_transient = a * (stream + f / t);
  b.weight_step_gradients = a * ((q_dim + 2 * kv_dim) / t + d + 2 * f / t + d + 2 * stream);
  return b;
}

HeadActivations head_activations(const models::llama3::ModelArgs& args, const ActivationLayout& layout) {
  const double a = static_cast<double>(layout.activation_bytes);
  const double t = static_cast<double>(layout.tp);
  const double d = static_cast<double>(args.dim);
  const double v = static_cast<double>(args.vocab_size);
  const double stream = layout.sequence_parallel ? d / t : d;
  // The output projection is column-wise: its logits are V/t per rank, and
  // all-gathered to V unless loss parallelism keeps them sharded.
  const double vocab = layout.loss_parallel ? v / t : v;

  HeadActivations h;
  h.stage_input = a * stream;
  h.weight_step_gradients = a * (v / t + stream);  // the output projection's own V/t, the final norm's
  const double final_norm =
      (layout.fused_norm ? 0.0 : a * stream) + (layout.sequence_parallel ? kFp32 / t : kFp32) + a * d;
  // Loss parallelism has its own loss (op by op, whatever fused_kernels says).
  const bool chunked = layout.fused_kernels && !layout.loss_parallel;
  if (chunked) {
    // The chunked loss keeps the logits (and, with the CUDA kernels, one
    // fp32 log-sum-exp per token). Backward makes the logits' gradient (their
    // dtype) and, on the ATen path, per chunk the recomputed fp32
    // log_softmax, the nll gradient and log_softmax's backward: 3 fp32
    // [tokens, V] while the batch fits one chunk (256 MiB of fp32; beyond it
    // this overestimates).
    h.saved = final_norm + a * vocab + (layout.loss_kernel ? kFp32 : 0.0);
    h.transient = a * vocab + (layout.loss_kernel ? 0.0 : 3 * kFp32 * vocab);
    return h;
  }
  const double logits = a * vocab + (layout.activation_bytes != 4 ? kFp32 * vocab : 0.0);  // + the loss's fp32 copy
  h.saved = final_norm + logits + kFp32 * vocab;  // log_softmax's output
  h.transient = kFp32 * vocab;                    // its gradient, the first thing backward makes
  return h;
}

}  // namespace titan::estimate
