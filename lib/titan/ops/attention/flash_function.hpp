#pragma once
/// @file
/// @brief The CPU flash attention as a differentiable op (a
/// torch::autograd::Function), so the model can use it in training.

#include <ATen/ATen.h>

#include <optional>

#include "titan/ops/attention/flash_cpu.hpp"

namespace titan::ops {

/// @brief softmax(scale · Q Kᵀ [causal]) V by the CPU flash kernel, with a
/// backward through flash_attention_backward. Shapes and dtypes as
/// flash_attention_forward: q [B, Hq, S, D], k/v [B, Hkv, S, D] (GQA without
/// repeating K/V). Saves q, k, v, the output and the log-sum-exp — O(S · D),
/// never the S × S probabilities. `doc_start`: block-causal (document)
/// masking as flash_attention_forward.
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                           std::optional<double> scale = std::nullopt, const FlashOptions& opts = {},
                           const at::Tensor& doc_start = {});

}  // namespace titan::ops
