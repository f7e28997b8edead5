#pragma once
/// @file
/// @brief Block-causal (document) attention masking — torchtitan 0.3's
/// `attn_mask_type = "block_causal"`: in a window packed from several
/// documents, a token attends only to the earlier tokens of its own
/// document, never across a boundary.
///
/// The mask is carried as one int64 per token, `doc_start[b, i]`: the
/// position in the window where token i's document begins. Query i sees
/// key j iff doc_start[b, i] <= j <= i. The flash kernel reads it directly
/// (and skips tiles no row can see: the varlen saving); math attention and
/// SDPA get the equivalent boolean matrix from block_causal_mask().
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace titan::ops {

/// @brief doc_start for token windows [B, S] whose documents begin with
/// `bos_id` (titan's streams put BOS + text + EOS per document): the last
/// BOS at or before each position, or 0 when the window began inside a
/// document.
at::Tensor document_starts(const at::Tensor& tokens, int64_t bos_id);

/// @brief Each token's position inside its document, i − doc_start[i]:
/// RoPE positions that restart at 0 with every document.
at::Tensor document_positions(const at::Tensor& doc_start);

/// @brief The boolean [B, 1, S, S] mask (true = may attend) equal to
/// causal + same document, for math attention and SDPA.
at::Tensor block_causal_mask(const at::Tensor& doc_start);

/// @brief `doc_start` checked for the kernels: undefined passes through;
/// otherwise it needs `causal`, shape [batch, seq], int64 on the CPU (made
/// contiguous), 0 <= doc_start[i] <= i and never decreasing along a row.
/// Throws a one-line titan::Error naming `who` otherwise.
at::Tensor checked_document_starts(const at::Tensor& doc_start, bool causal, int64_t batch, int64_t seq,
                                   const char* who);

}  // namespace titan::ops
