#pragma once
/// @file
/// @brief Saving a job's model as one Hugging Face Llama folder with every
/// rank writing only the rows it holds (torchtitan's `[checkpoint]
/// last_save_in_hf`): no rank gathers, or holds, a tensor that its layout
/// shards, so a 405B model exports as its ranks hold it.
///
/// The folder's layout depends only on the model args, the dtype and the
/// shard size: every rank computes the same one (which file holds which
/// tensor, at which offset), rank 0 creates the files at their final
/// size, and each rank writes each of its boxes in place, row by row
/// (whole runs of rows at once where the box spans whole rows). q and k
/// projections go to their rows in HF's rotate-half order (a box may cut
/// a head: each row is placed on its own). The ranks then check that
/// together they wrote every element of every tensor once, and rank 0
/// renames the files to their names and writes the index and config.json,
/// the last file, so a folder with a config.json is complete.

#include <c10/core/ScalarType.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/sharded_state.hpp"
#include "titan/models/llama3/model_args.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::checkpoint {

/// @brief One box of a tensor to write, before its data is read.
struct HfBox {
  std::string fqn;                    ///< torchtitan name
  std::vector<int64_t> global_shape;  ///< the whole tensor's
  std::vector<int64_t> offsets;       ///< where the box starts in it, per dim
  std::vector<int64_t> sizes;         ///< the box's extent, per dim
  bool primary = true;                ///< this process writes it (one of equal replicas does)
};

/// @brief The data of box `i` (any device and dtype; its sizes), asked
/// for when the writer reaches it and dropped after: a source that reads
/// from disk holds one box at a time.
using HfBoxReader = std::function<at::Tensor(size_t i)>;

/// @brief save_hf_shards with the data read box by box: the same folder,
/// the same checks (the data's sizes against the box too), one box in
/// memory at a time. Collective over `group`.
void save_hf_boxes(const std::string& folder, const std::vector<HfBox>& boxes, const HfBoxReader& read,
                   const models::llama3::ModelArgs& args, at::ScalarType dtype,
                   const dist::ProcessGroup* group = nullptr, int64_t max_shard_bytes = kHfDefaultShardBytes);

/// @brief Writes the model `shards` of every rank of `group` (null: one
/// process holding every box) as the HF folder `folder`: what
/// write_hf_folder writes for the gathered state, byte for byte, cast to
/// `dtype` (float32, bfloat16 or float16) box by box. `shards` are
/// torchtitan names with their boxes (model_shards); only primary boxes
/// are written. A name outside the model, a wrong global shape, a box
/// outside its tensor, elements no rank wrote (or two wrote) or a failed
/// write is a one-line titan::Error on every rank. Creates `folder`.
/// Collective.
void save_hf_shards(const std::string& folder, const ShardedState& shards, const models::llama3::ModelArgs& args,
                    at::ScalarType dtype, const dist::ProcessGroup* group = nullptr,
                    int64_t max_shard_bytes = kHfDefaultShardBytes);

}  // namespace titan::checkpoint
