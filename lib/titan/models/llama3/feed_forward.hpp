#pragma once
/// @file
/// @brief Llama 3's SwiGLU feed-forward network.

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "titan/models/llama3/model_args.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/ops/linear.hpp"

namespace titan::models::llama3 {

/// @brief w2(silu(w1 x) ⊙ w3 x) (Shazeer 2020, "GLU variants"): w1 and w3
/// [hidden, dim] project up, w2 [dim, hidden] projects down; hidden is
/// ModelArgs::ffn_hidden_dim().
///
/// A HookableModule so that tensor parallelism can prepare its input once
/// for w1 and w3 (PrepareModuleInput).
class FeedForwardImpl : public ops::HookableModule {
 public:
  /// Registers w1, w2, w3 (uninitialised) with `options`; `fused`: the gate
  /// is ops::swiglu (one kernel) instead of at::silu and a product.
  FeedForwardImpl(int64_t dim, int64_t hidden_dim, at::TensorOptions options = {}, bool fused = false);
  /// x [..., dim] → [..., dim].
  at::Tensor forward(const at::Tensor& x);
  /// torchtitan's init: w1 ~ trunc_normal(0, 0.02); w2, w3 ~ trunc_normal(0, init_std).
  void init_weights(double init_std);

  ops::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
  bool fused;  ///< ops::swiglu for silu(w1 x) ⊙ w3 x
};
TORCH_MODULE(FeedForward);

}  // namespace titan::models::llama3
