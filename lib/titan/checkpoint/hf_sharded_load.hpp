#pragma once
/// @file
/// @brief Starting a job from a Hugging Face Llama folder with each rank
/// reading only the rows it holds (torchtitan's `[checkpoint]
/// initial_load_path` with `initial_load_in_hf`): no rank reads, or holds,
/// a whole tensor that its layout shards.
///
/// Every box of the rank's model shards is mapped to its HF tensor
/// (hf_name) and read as one contiguous span of rows. q and k projections
/// are stored in HF's rotate-half order per head, so their rows are read
/// for the whole heads the box touches, permuted back to titan's
/// interleaved pairs (half_to_interleaved) and cut to the box: at most one
/// head's rows more on either side.

#include <string>

#include "titan/checkpoint/sharded_state.hpp"
#include "titan/models/llama3/model_args.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::checkpoint {

/// @brief Fills every model shard of `targets` (torchtitan names) from the
/// HF folder `folder`, converting to each shard's dtype. Before anything is
/// written it checks that config.json's head counts and tied embeddings
/// agree with `args` (the permutation depends on them) and that every
/// tensor is in the folder with the target's global shape; any rank's
/// failure is a one-line titan::Error on every rank of `group` (null: one
/// process), naming the file and tensor.
void load_hf_shards(const std::string& folder, ShardedState& targets, const models::llama3::ModelArgs& args,
                    const dist::ProcessGroup* group = nullptr);

}  // namespace titan::checkpoint
