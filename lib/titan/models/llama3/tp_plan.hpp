#pragma once
/// @file
/// @brief The Llama 3 tensor-parallel plan (torchtitan's apply_tp) and its
/// checks: which module gets which style, with or without sequence
/// parallelism and loss parallelism.

#include <cstdint>
#include <string>

#include "titan/models/llama3/transformer.hpp"
#include "titan/parallel/tensor_parallel/parallelize_module.hpp"

namespace titan::models::llama3 {

/// @brief How tensor parallelism is applied to Llama 3.
struct TpOptions {
  /// Keep the residual stream sharded on the sequence between blocks (SP):
  /// norms run on seq/tp tokens, activations enter attention and the FFN by
  /// all-gather and leave by reduce-scatter. false: activations are
  /// replicated and each block half ends in an all-reduce (Megatron's TP).
  bool sequence_parallel = true;
  /// The LM head's logits stay sharded on the vocabulary into the loss
  /// (tp::vocab_parallel_cross_entropy) instead of being all-gathered.
  bool loss_parallel = false;
  /// Overlap the SP all-gathers and reduce-scatters with their matmuls
  /// (tp::enable_async_tp); needs sequence_parallel.
  bool async_tp = false;
};

/// @brief The plan, as torchtitan's apply_tp lays it out:
///
/// | module                 | SP on                                  | SP off                      |
/// | ---------------------- | -------------------------------------- | --------------------------- |
/// | tok_embeddings         | Rowwise(in Replicate, out Shard(1))    | Rowwise(out Replicate)      |
/// | norm                   | SequenceParallel                       | —                           |
/// | output                 | Colwise(in Shard(1), out Shard(-1) with loss parallel, else Replicate) | Colwise(in Replicate, ...) |
/// | layers.*.attention_norm, ffn_norm | SequenceParallel            | —                           |
/// | layers.*.attention, feed_forward  | PrepareModuleInput(Shard(1) → Replicate) | (Replicate → Replicate) |
/// | attention.wq/wk/wv, feed_forward.w1/w3 | Colwise                | Colwise                     |
/// | attention.wo, feed_forward.w2 | Rowwise(out Shard(1))           | Rowwise(out Replicate)      |
tp::ParallelizePlan llama3_tp_plan(const TpOptions& options);

/// @brief Refuses, with one line naming the number, a model the TP degree
/// cannot split: n_heads, n_kv_heads, dim and the FFN hidden size must
/// divide by `tp` (the vocabulary need not: its shards may be uneven).
void check_tp_divisibility(const ModelArgs& args, int64_t tp);

/// @brief check_tp_divisibility plus, with sequence parallelism, that
/// `seq_len` divides by `tp` (each rank holds seq_len/tp tokens), and that
/// async TP comes with sequence parallelism. The
/// trainer calls it before joining the job, so a bad layout fails on every
/// rank alike and before any collective.
void check_tp_job(const ModelArgs& args, int64_t tp, int64_t seq_len, const TpOptions& options);

/// @brief Applies the plan to `model` over the 1-D TP mesh (after
/// check_tp_divisibility) and returns a one-line description.
std::string apply_tp(Transformer& model, const dist::DeviceMesh& tp_mesh, const TpOptions& options);

}  // namespace titan::models::llama3
