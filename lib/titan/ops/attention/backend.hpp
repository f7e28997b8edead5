#pragma once
/// @file
/// @brief The attention backends the model can run — `[model] attn_type`
/// (torchtitan's name for its attention choice): ATen's SDPA dispatch, this
/// project's CPU flash kernel, or the explicit-softmax reference.

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

namespace titan::ops {

/// @brief Which implementation computes softmax(QKᵀ)V.
enum class AttentionBackend {
  sdpa,   ///< at::scaled_dot_product_attention (ATen picks flash / efficient / math kernels)
  flash,  ///< flash_attention (flash_cpu.hpp on the CPU, flash_cuda.hpp on CUDA GPUs; fp32 cast to bf16 there)
  math,   ///< math_attention: the whole score matrix, the reference
};

/// The accepted names, in the order above: "sdpa", "flash", "math".
const std::vector<std::string>& attention_backend_names();
/// Parses a name; throws a one-line titan::Error listing the valid ones.
AttentionBackend parse_attention_backend(const std::string& name);
/// The name of a backend.
std::string to_string(AttentionBackend b);

/// @brief Attention of q [B, Hq, S, D] over k/v [B, Hkv, S, D] (Hq % Hkv == 0)
/// with the chosen backend. For sdpa, K/V are repeated per query head first
/// (what the model always did; SDPA's own GQA path is not taken on every
/// device), flash and math take them as they are. `doc_start` ([B, S]
/// int64, document_mask.hpp): block-causal masking — the flash kernel reads
/// it, math and SDPA get block_causal_mask()'s boolean matrix.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionBackend backend,
                     bool causal, std::optional<double> scale = std::nullopt, const at::Tensor& doc_start = {});

}  // namespace titan::ops
