#pragma once
/// @file
/// @brief Ring attention (Liu, Zaharia, Abbeel 2023, arXiv:2310.01889):
/// attention over a sequence sharded between the ranks of a cp group, each
/// rank keeping its queries while the keys and values come to it, the
/// partial results merged through their log-sum-exps.
///
/// Two ways to bring K/V, torchtitan's `context_parallel_rotate_method`:
/// - "allgather": one all-gather of every rank's K/V, then all blocks
///   locally; backward gathers them again and reduce-scatters dK/dV.
/// - "alltoall": the ring. At step t rank r holds the K/V of rank r−t and
///   has already posted the transfer of them to r+1 (and the receive from
///   r−1) before computing its blocks, so the transfer runs under the
///   compute. Backward passes K/V round the same way, and the dK/dV of the
///   block a rank holds travel with it, each rank adding its share: after
///   cp hops they are home.
///
/// With the sequence cut into equal chunks (sharding.hpp), every block of
/// (query chunk, key chunk) is wholly visible, causal on its diagonal or
/// wholly masked and skipped, so the plain attention kernel with causal
/// true or false computes each one (attention_forward_lse: a flash kernel —
/// the CPU one, or on CUDA the GPU one for bf16/fp16 — else the math path).
/// Backward needs no saved
/// probabilities: each block's gradients come from the final out and lse.
///
/// Block-causal (document) masking — attn_mask_type "block_causal" — adds
/// each query row's document start, in window positions: key j is visible
/// to query i iff doc_start[i] <= j <= i. A block whose rows all start
/// their documents after its last key is skipped, one every row sees whole
/// is computed plainly, and the others carry per-row bounds in the block's
/// own key positions (ops::document_key_begin), which the flash kernel
/// reads directly (skipping whole tiles) and the math path turns into a
/// boolean mask (ops::key_range_mask).

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "titan/ops/attention/flash_cpu.hpp"
#include "titan/parallel/context_parallel/sharding.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::cp {

/// @brief How K/V reach every rank (torchtitan's names).
enum class RotateMethod {
  allgather,  ///< gather all K/V once
  alltoall,   ///< pass them round the ring, one neighbour transfer per step
};

/// The accepted names: "allgather", "alltoall".
RotateMethod parse_rotate_method(const std::string& name);
std::string to_string(RotateMethod m);

/// @brief What ring attention needs to know besides the tensors.
struct RingAttentionOptions {
  SequenceLayout layout;                       ///< how the sequence is cut (layout.cp = the group's size)
  RotateMethod rotate = RotateMethod::allgather;
  bool causal = true;
  std::optional<double> scale;                 ///< default 1/√head_dim
};

/// @brief softmax(scale · Q Kᵀ [causal]) V over the whole sharded sequence,
/// differentiable. q [B, Hq, S_local, D], k/v [B, Hkv, S_local, D]: this
/// rank's pieces in the layout's order (shard_sequence of the full
/// tensors along dim 2). Returns this rank's rows of the output, like q.
/// Collective over `group`: every member calls it, in the same order.
/// `doc_start` (optional, int64 [B, S_local], needs opts.causal): the
/// document start of each of this rank's query rows as a position in the
/// whole window — ops::document_starts of the full sequence, sharded like
/// the tokens (shard_sequence along dim 1) — for block-causal masking.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const dist::ProcessGroup& group, const RingAttentionOptions& opts,
                          const at::Tensor& doc_start = {});

/// @brief The forward without autograd: this rank's output rows and their
/// log-sum-exp over all keys of the sequence (fp32 [B, Hq, S_local]).
ops::FlashForward ring_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const dist::ProcessGroup& group, const RingAttentionOptions& opts,
                                         const at::Tensor& doc_start = {});

/// @brief The backward without autograd: dq, and the dk/dv of this rank's
/// own K/V summed over every rank's queries.
ops::FlashGrads ring_attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                        const dist::ProcessGroup& group, const RingAttentionOptions& opts,
                                        const at::Tensor& doc_start = {});

}  // namespace titan::cp
