#pragma once
/// @file
/// @brief Llama 3 grouped-query self-attention with RoPE.

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "titan/models/llama3/model_args.hpp"
#include "titan/ops/attention/backend.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/ops/linear.hpp"

namespace titan::cp {
struct ContextParallel;
}

namespace titan::models::llama3 {

/// @brief Causal multi-head attention where n_kv_heads ≤ n_heads key/value
/// heads are shared by groups of query heads (GQA: 8B has 32 query heads and
/// 8 kv heads, which cuts the KV projections and cache by 4).
///
/// Submodules wq [H·Q, dim], wk/wv [KV·Q, dim], wo [dim, H·Q] — torchtitan's
/// names. Attention itself is causal and computed by the backend
/// args.attn_type names (ops/attention/backend.hpp): at::scaled_dot_product_attention
/// ("sdpa", which picks flash / memory-efficient / math kernels), titan's CPU
/// flash kernel ("flash", GQA without repeating K/V) or the explicit
/// softmax ("math").
///
/// It is a HookableModule so that tensor parallelism can prepare its input
/// (PrepareModuleInput: the sequence-sharded activations all-gathered once
/// for wq, wk and wv). Under TP each rank holds n_heads/tp query heads and
/// n_kv_heads/tp kv heads; forward reads the local head count from the
/// projections' widths.
class AttentionImpl : public ops::HookableModule {
 public:
  /// Registers wq, wk, wv, wo (uninitialised) with `options`.
  AttentionImpl(const ModelArgs& args, at::TensorOptions options = {});
  /// x [batch, seq, dim]; cos/sin [>= seq, head_dim/2]: the rows of x's
  /// positions (a longer table is cut to its first seq rows).
  /// `doc_start` ([batch, seq] int64, or undefined): block-causal masking.
  /// `sdpa_bias`: with the sdpa backend, ops::block_causal_bias of doc_start
  /// made once by the caller for all layers (built here when undefined).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& doc_start = {}, const at::Tensor& sdpa_bias = {});
  /// torchtitan's init: wq, wk, wv ~ trunc_normal(0, 0.02, [-2, 2]);
  /// wo ~ trunc_normal(0, init_std, [-2, 2]) (init_std is depth-scaled by the block).
  void init_weights(double init_std);

  int64_t n_heads;     ///< query heads
  int64_t n_kv_heads;  ///< key/value heads
  int64_t head_dim;    ///< per-head width
  ops::AttentionBackend backend;  ///< from args.attn_type
  bool fused_rope;                ///< ops::fused_rope instead of apply_rope (args.fused_kernels)
  /// Context parallelism: when set, x holds this rank's sequence shard and
  /// attention is ring attention over the cp group (its blocks by the CPU
  /// flash kernel, or the math path on other devices, whatever `backend`).
  std::shared_ptr<const cp::ContextParallel> context_parallel;
  ops::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};

 private:
  at::Tensor attend(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& doc_start,
                    const at::Tensor& sdpa_bias);
};
TORCH_MODULE(Attention);

/// @brief Repeats each of the KV heads of x [batch, seq, kv_heads, head_dim]
/// n_rep times along the head dimension, so that query head h reads kv head
/// h / n_rep (torchtitan's repeat_kv; an expand + reshape, one copy).
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep);

}  // namespace titan::models::llama3
