#pragma once
/// @file
/// @brief AdamW through ATen's fused kernel (`_fused_adamw_`, what
/// torch.optim.AdamW(fused=True) and torchtitan's default
/// `implementation = "fused"` run): one pass over each parameter instead of
/// the ~10 elementwise kernels (and temporaries) of the for-loop version.

#include <torch/optim/adamw.h>

#include <vector>

namespace titan::optim {

/// @brief torch::optim::AdamW with step() done by at::_fused_adamw_.
///
/// Same options, same per-parameter state (AdamWParamState: exp_avg,
/// exp_avg_sq, step), so state_dict(), LR scheduling through
/// param_groups() and checkpoints work unchanged; the update is the same
/// arithmetic (decoupled weight decay, bias correction) up to fp32 rounding
/// order. No amsgrad. Works on CPU and CUDA tensors.
class FusedAdamW : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options);
  /// One update of every parameter with a gradient; `closure` as in torch::optim.
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace titan::optim
