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
/// RoPE positions that restart at 0 with every document. `positions`
/// ([S] int64) are the window positions of doc_start's columns when they
/// are not 0..S−1: a context-parallel rank's shard (cp::shard_positions),
/// whose doc_start is the window's, sharded.
at::Tensor document_positions(const at::Tensor& doc_start, const at::Tensor& positions = {});

/// @brief The boolean [B, 1, S, S] mask (true = may attend) equal to
/// causal + same document, for math attention and SDPA.
at::Tensor block_causal_mask(const at::Tensor& doc_start);

/// @brief The same mask as an additive bias in `dtype` (0 where a query
/// may attend, −inf elsewhere), [B, 1, S, S]. SDPA turns a boolean mask
/// into such a bias on every call and saves it for its backward; a model
/// that builds this once per forward and hands it to every layer keeps one
/// copy instead of one per layer.
at::Tensor block_causal_bias(const at::Tensor& doc_start, at::ScalarType dtype);

/// @brief Block-causal masking of one block of keys out of a longer
/// window (a ring-attention block): for each query row, the first key of
/// the block it may see, in the block's own key coordinates — the number
/// of the block's keys before the row's document start. `doc_start`
/// [B, Sq] holds the rows' document starts as window positions;
/// `key_positions` [Sk] int64, ascending, the window positions of the
/// block's keys. Row i sees block key j iff key_begin[i] <= j (and the key
/// is not after the query: the causal part, which the block's caller
/// knows). Values lie in [0, Sk]; Sk means the row sees none of the block.
at::Tensor document_key_begin(const at::Tensor& doc_start, const at::Tensor& key_positions);

/// @brief The boolean [B, 1, Sq, Sk] mask (true = may attend) of rows that
/// see keys key_begin[b, i] <= j < Sk, and only j <= i when `causal`:
/// block_causal_mask(doc_start) is key_range_mask(doc_start, S, true).
at::Tensor key_range_mask(const at::Tensor& key_begin, int64_t keys, bool causal);

/// @brief `doc_start` checked for the kernels: undefined passes through;
/// otherwise it needs `causal`, shape [batch, seq], int64 on the CPU (made
/// contiguous), 0 <= doc_start[i] <= i and never decreasing along a row.
/// Throws a one-line titan::Error naming `who` otherwise.
///
/// Checked once per tensor: the same (unchanged) tensor checked again under
/// the same rule returns the first check's CPU copy, so a micro-batch's
/// doc_start costs one device-to-host copy, not one per layer's forward and
/// backward (row_bound_checks_run counts the real checks).
at::Tensor checked_document_starts(const at::Tensor& doc_start, bool causal, int64_t batch, int64_t seq,
                                   const char* who);

/// @brief Per-row key bounds (document_key_begin) checked for the kernels:
/// undefined passes through; otherwise [batch, sq] int64 on the CPU (made
/// contiguous), never decreasing along a row, 0 <= key_begin[i] <= keys,
/// and key_begin[i] <= i when `causal` (every row sees its own key).
/// Throws a one-line titan::Error naming `who` otherwise.
at::Tensor checked_key_begin(const at::Tensor& key_begin, bool causal, int64_t batch, int64_t sq, int64_t keys,
                             const char* who);

/// @brief How many row-bound checks (checked_document_starts,
/// checked_key_begin) actually ran, cache hits not counted: for tests.
int64_t row_bound_checks_run();

}  // namespace titan::ops
