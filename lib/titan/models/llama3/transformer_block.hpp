#pragma once
/// @file
/// @brief One Llama 3 block: pre-norm attention and pre-norm SwiGLU, each with
/// a residual connection.

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "titan/models/llama3/attention.hpp"
#include "titan/models/llama3/feed_forward.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/ops/rms_norm.hpp"

namespace titan::models::llama3 {

/// @brief h = x + attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h)).
///
/// The unit that FSDP shards and activation checkpointing recomputes, so it is
/// a module of its own with torchtitan's submodule names. It is a
/// HookableModule so that fully_shard can run code around its forward.
class TransformerBlockImpl : public ops::HookableModule {
 public:
  /// Builds block `layer_id` (0-based; it sets the depth-scaled init std).
  TransformerBlockImpl(int64_t layer_id, const ModelArgs& args, at::TensorOptions options = {});
  /// x [batch, seq, dim]; cos/sin [seq, head_dim/2].
  /// `doc_start`: block-causal (document) masking for attention, or
  /// undefined; `sdpa_bias`: its shared SDPA bias (Attention::forward).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& doc_start = {}, const at::Tensor& sdpa_bias = {});
  /// Norms to ones; attention and feed-forward as torchtitan, with
  /// weight_init_std for wo, w2, w3.
  void init_weights();

  int64_t layer_id;        ///< position in the stack
  double weight_init_std;  ///< 0.02/√(2(layer_id+1)) with depth_init, else 0.02/√(2·n_layers)
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};
  ops::RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
};
TORCH_MODULE(TransformerBlock);

}  // namespace titan::models::llama3
