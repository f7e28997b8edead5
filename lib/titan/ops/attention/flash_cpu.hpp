#pragma once
/// @file
/// @brief Flash attention on the CPU: a tiled, online-softmax forward that
/// never holds more of the score matrix than one tile, and a backward that
/// recomputes each tile's probabilities from the saved log-sum-exp.
///
/// The algorithm is FlashAttention (Dao, Fu, Ermon, Rudra, Ré 2022,
/// arXiv:2205.14135) with FlashAttention-2's arrangement (Dao 2023,
/// arXiv:2307.08691): the forward loops over key/value tiles for one query
/// tile, keeping a running row maximum m and normaliser l and rescaling the
/// output accumulator when m grows; it saves L = m + log l per query row. The
/// backward computes D_i = rowsum(dO_i ∘ O_i) once, then per tile
/// P = exp(S − L), dV += Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), dK += dSᵀ Q,
/// dQ += dS K (each with the softmax scale where S had it). Memory beyond the
/// inputs and outputs is O(S · D) — linear in the sequence length. See
/// docs/attention.md for the tiling, the threading and measured speed.
///
/// The forward, for one query tile Q_i (chapter 06's ladder writes it out
/// in tensor operations, chapters/06_flash_attention/ladder.cpp):
///
///     m = −∞, l = 0, acc = 0                        (per query row)
///     for each key/value tile K_j, V_j (causal: up to the diagonal):
///         S   = scale · Q_i K_jᵀ                    (masked entries −∞)
///         m'  = max(m, rowmax(S))
///         P   = exp(S − m')
///         l   = exp(m − m') · l + rowsum(P)
///         acc = exp(m − m') · acc + P V_j
///         m   = m'
///     O_i = acc / l,   L_i = m + log l              (L is all backward keeps)

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "titan/ops/attention/tile_gemm.hpp"

namespace titan::ops {

/// @brief Tile sizes and the tile-product engine of the CPU flash kernel.
struct FlashOptions {
  int64_t q_tile = 64;     ///< query rows per tile (the unit of forward parallelism)
  int64_t kv_tile = 256;   ///< key/value rows per tile (the unit of backward parallelism)
  TileGemm gemm = TileGemm::blas;  ///< how tile products are multiplied
};

/// @brief What the forward returns: the output and what the backward needs.
struct FlashForward {
  at::Tensor out;  ///< [B, Hq, S, D] in q's dtype (a transposed view of a [B, S, Hq, D] buffer)
  at::Tensor lse;  ///< [B, Hq, S] fp32: log Σ_j exp(scale · q_i·k_j) per query row (masked terms excluded)
};

/// @brief Gradients of the three inputs.
struct FlashGrads {
  at::Tensor dq;  ///< like q
  at::Tensor dk;  ///< like k: summed over the query heads that share each kv head
  at::Tensor dv;  ///< like v: likewise
};

/// @brief Forward of softmax(scale · Q Kᵀ [+ causal mask]) V.
///
/// q [B, Hq, S, D]; k, v [B, Hkv, S_kv, D] with Hq % Hkv == 0 (query head h
/// reads kv head h / (Hq / Hkv); K and V are never repeated); fp32 or bf16
/// (all three alike; bf16 accumulates in fp32), on the CPU, any strides with
/// a contiguous last dimension. `causal` masks key j > query i and needs
/// S == S_kv (tiles wholly above the diagonal are skipped). `scale` defaults
/// to 1/√D.
///
/// `doc_start` (optional, [B, S] int64) turns causal into block-causal
/// (document) masking — torchtitan's attn_mask_type "block_causal": each
/// position holds where its document begins (document_starts() in
/// document_mask.hpp), and query i sees key j iff doc_start[i] <= j <= i.
/// Starts must not decrease along a sequence (documents are contiguous);
/// tiles no row of a query tile may see are skipped, in both passes.
FlashForward flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                     std::optional<double> scale = std::nullopt, const FlashOptions& opts = {},
                                     const at::Tensor& doc_start = {});

/// @brief Backward of flash_attention_forward: from dout (like out) and the
/// forward's inputs, out and lse, the gradients of q, k and v. P is
/// recomputed tile by tile from lse; dk/dv tiles are owned by one task each
/// (no races), dq is accumulated per thread and added under a lock per kv
/// head group.
FlashGrads flash_attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal,
                                    std::optional<double> scale = std::nullopt, const FlashOptions& opts = {},
                                    const at::Tensor& doc_start = {});

/// @brief The forward of one block of keys out of a longer sequence (ring
/// attention's blocks under block-causal masking): as
/// flash_attention_forward, with `key_begin` ([B, S] int64, optional) the
/// first key each query row may see in k's own positions
/// (document_key_begin() in document_mask.hpp): row i sees key j iff
/// key_begin[i] <= j, and j <= i when `causal`. Bounds never decrease
/// along a row; key_begin[i] = S_kv (a row that sees none of the block)
/// gives that row out 0 and lse −inf, which merge_attention_partial weighs 0.
/// CUDA tensors go to the CUDA kernel (flash_cuda.hpp, bf16/fp16), which
/// reads the same bounds.
FlashForward flash_block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                 std::optional<double> scale, const at::Tensor& key_begin,
                                 const FlashOptions& opts = {});

/// @brief The backward of flash_block_forward, from the rows' final out
/// and lse (as flash_attention_backward); masked keys get no gradient.
FlashGrads flash_block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& out, const at::Tensor& lse, bool causal,
                                std::optional<double> scale, const at::Tensor& key_begin,
                                const FlashOptions& opts = {});

}  // namespace titan::ops
