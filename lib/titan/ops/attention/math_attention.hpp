#pragma once
/// @file
/// @brief Attention as the textbook formula, softmax(scale · Q Kᵀ + mask) V
/// with the whole S × S matrix in memory: the independent reference the
/// flash kernel and SDPA are checked against, and the `math` backend.

#include <ATen/ATen.h>

#include <optional>

namespace titan::ops {

/// @brief q [B, Hq, S, D], k/v [B, Hkv, S_kv, D] (Hq % Hkv == 0: each kv head
/// is repeated for its Hq/Hkv query heads — this reference may spend the
/// memory). The softmax is taken in fp32 and cast back to q's dtype; the
/// products run in q's dtype. Differentiable through ordinary autograd.
/// `scale` defaults to 1/√D; `causal` masks key j > query i; `doc_start`
/// ([B, S] int64, document_mask.hpp) also masks keys before the query's
/// document start (block-causal).
at::Tensor math_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                          std::optional<double> scale = std::nullopt, const at::Tensor& doc_start = {});

}  // namespace titan::ops
