#pragma once
/// @file
/// @brief A training batch under context parallelism: each cp rank keeps
/// its shard of every sequence (torchtitan's context_parallel buffers: the
/// inputs, the labels and, for block-causal masks, the document starts).

#include "titan/data/dataloader.hpp"
#include "titan/parallel/context_parallel/context.hpp"

namespace titan::cp {

/// @brief Replaces `b`'s tokens, targets and document starts by this cp
/// rank's shard of each sequence (shard_sequence along the sequence dim,
/// in `context`'s layout). The document starts keep their values: they
/// are window positions, which the ring's blocks compare keys with.
void keep_sequence_shard(data::Batch& b, const ContextParallel& context);

}  // namespace titan::cp
