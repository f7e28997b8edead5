#pragma once
/// @file
/// @brief Attention that also returns its log-sum-exp, on any device, and
/// the merge of two partial results through their log-sum-exps: the pieces
/// ring attention (context parallelism) is built from.
///
/// Softmax attention over keys K = K₁ ∪ K₂ splits exactly: with
/// L_a = log Σ_{j∈K_a} exp(s_j) and O_a the softmax output over K_a alone,
/// L = log(e^{L₁} + e^{L₂}) and O = e^{L₁−L} O₁ + e^{L₂−L} O₂. The
/// backward of one part needs only the final O and L: P_ij = exp(s_ij − L)
/// is the block's share of the global softmax (flash attention's backward
/// with the global statistics).

#include <ATen/ATen.h>

#include <optional>

#include "titan/ops/attention/flash_cpu.hpp"

namespace titan::ops {

/// @brief softmax(scale · Q Kᵀ [causal]) V and its log-sum-exp, without
/// autograd: the CPU flash kernel on the CPU, the CUDA one for bf16/fp16
/// CUDA tensors (CUDA builds), else the explicit-softmax math path
/// (math_attention_forward_lse). Shapes as
/// flash_attention_forward: q [B, Hq, S, D], k/v [B, Hkv, S_kv, D]; out in
/// q's dtype, lse fp32 [B, Hq, S]. `key_begin` ([B, S] int64, optional):
/// each query row sees only keys j >= key_begin[i] of this block
/// (document_key_begin(), document_mask.hpp: block-causal masking of a ring
/// block); a row that sees no key gets out 0 and lse −inf.
FlashForward attention_forward_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                   std::optional<double> scale = std::nullopt, const at::Tensor& key_begin = {});

/// @brief Gradients of q, k, v for one block of keys given dout and the
/// *final* out and lse of the rows (which may cover more keys than this
/// block): flash_attention_backward on the CPU, math_attention_backward_lse
/// elsewhere. dk/dv are summed over the query heads sharing a kv head.
/// `key_begin` as attention_forward_lse.
FlashGrads attention_backward_lse(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal,
                                  std::optional<double> scale = std::nullopt, const at::Tensor& key_begin = {});

/// @brief The forward with the whole S × S_kv score matrix in fp32 (any
/// device; the products in fp32 too). `causal` needs S == S_kv;
/// `key_begin` masks through key_range_mask().
FlashForward math_attention_forward_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                        std::optional<double> scale = std::nullopt, const at::Tensor& key_begin = {});

/// @brief The backward of math_attention_forward_lse from the global out
/// and lse, written out: P = exp(S − L), dV = Pᵀ dO, dS = P ∘ (dO Vᵀ −
/// rowsum(dO ∘ O)), dQ = scale · dS K, dK = scale · dSᵀ Q.
FlashGrads math_attention_backward_lse(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                       bool causal, std::optional<double> scale = std::nullopt,
                                       const at::Tensor& key_begin = {});

/// @brief Folds a partial result (out_b, lse_b) into a running one in
/// place: acc_out (fp32, [B, H, S, D]) and acc_lse (fp32, [B, H, S])
/// become the attention over the union of both key sets. out_b may be any
/// float dtype; a row that saw no key in either part (lse −inf) stays 0.
void merge_attention_partial(at::Tensor& acc_out, at::Tensor& acc_lse, const at::Tensor& out_b,
                             const at::Tensor& lse_b);

}  // namespace titan::ops
