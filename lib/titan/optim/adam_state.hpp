#pragma once
/// @file
/// @brief The per-parameter state of Adam / AdamW (both moments and the
/// step count), read and written by parameter: what a checkpoint saves and
/// restores. LibTorch keys the state by TensorImpl and creates it lazily at
/// the first step; these functions hide both.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace torch::optim {
class Optimizer;
}

namespace titan::optim {

/// @brief One parameter's Adam state (the tensors are the optimizer's own,
/// not copies: writing into them changes the optimizer).
struct AdamMoments {
  at::Tensor exp_avg;     ///< first moment, shaped like the parameter
  at::Tensor exp_avg_sq;  ///< second moment
  int64_t step = 0;       ///< updates applied so far
};

/// @brief The state of `param` in `optimizer` (torch::optim::Adam, AdamW or
/// FusedAdamW), created as zeros with step 0 when the optimizer has not
/// stepped it yet. Throws titan::Error for another optimizer or a tensor
/// that is not one of its parameters.
AdamMoments adam_state(torch::optim::Optimizer& optimizer, const at::Tensor& param);

/// @brief Sets the step count of `param`'s state (creating the state).
void set_adam_step(torch::optim::Optimizer& optimizer, const at::Tensor& param, int64_t step);

/// @brief Bytes `optimizer` keeps per parameter: the Adam / AdamW moments
/// titan trains with (max_exp_avg_sq too under amsgrad), summed over the
/// parameters it has stepped; other optimizers' state counts 0.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace titan::optim
