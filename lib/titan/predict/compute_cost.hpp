#pragma once
/// @file
/// @brief How long one rank computes: each op of a block from the FLOPs
/// and bytes it moves, at the rate a cluster's kernels reach
/// (predict/cluster.hpp). GEMMs at matmul_efficiency of the peak of the
/// dtype they run in, flash attention at attention_efficiency on the FLOPs
/// it executes (a causal mask skips half the square; the backward is 2.5
/// forwards, as FlashAttention-2's five matmuls against two), everything
/// else at memory_efficiency of the memory bandwidth, on the bytes each
/// kernel reads and writes (listed in compute_cost.cpp, fused kernels and
/// op by op). The model FLOPs of MFU are not these: MFU counts the whole
/// attention square and no recompute (models/llama3/flops.hpp).

#include <cstdint>

#include "titan/predict/cluster.hpp"

namespace titan::models::llama3 {
struct JobLayout;
}

namespace titan::predict {

/// @brief The blocks and ends one pipeline rank (or the whole model) runs.
struct ModelPart {
  int64_t blocks = 0;
  bool has_embedding = true;  ///< the first stage
  bool has_output = true;     ///< the last stage: final norm, output and loss
};

/// @brief Seconds of compute of one micro-batch through a part, by phase
/// and by kind of kernel.
struct ComputeCost {
  double forward = 0;
  double backward = 0;   ///< gradients of inputs and weights
  double recompute = 0;  ///< activation checkpointing's second forward, run in backward
  double gemm = 0, attention = 0, memory_bound = 0;  ///< the same seconds by kind of kernel
  /// @brief forward + backward + recompute.
  double total() const { return forward + backward + recompute; }
};

/// @brief One micro-batch of `job` through `part` on one rank of `cluster`
/// (its TP shard of the heads and FFN, its CP share of the sequence, its
/// sequence-parallel share of the norms). `checkpointed_blocks`: how many
/// of the part's blocks activation checkpointing wraps.
ComputeCost microbatch_compute(const models::llama3::JobLayout& job, const Cluster& cluster, const ModelPart& part,
                               int64_t checkpointed_blocks);

/// @brief The optimizer step of a rank holding `parameter_elements`
/// parameters (its shards): the fused AdamW and the gradient clipping,
/// 40 bytes per parameter in fp32 (reads of weight, gradient and both
/// moments, their writes, the norm's read and the clip's scale).
double optimizer_seconds(int64_t parameter_elements, const Cluster& cluster);

/// @brief The peak FLOP/s the job's block GEMMs run at: bf16 (FSDP's
/// param dtype or autocast's), float8 for float8 linears, else fp32.
double gemm_peak(const models::llama3::JobLayout& job, const Cluster& cluster);

/// @brief The dtype the blocks compute in, as bytes per element.
double compute_element_size(const models::llama3::JobLayout& job);

}  // namespace titan::predict
