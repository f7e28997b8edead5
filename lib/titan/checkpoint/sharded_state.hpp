#pragma once
/// @file
/// @brief What a rank contributes to a checkpoint: for every tensor it
/// holds, the box of the global tensor that its local piece covers — the
/// common currency between parallel layouts (FSDP rows, TP rows or columns,
/// both nested, pipeline stages, replicas) and the checkpoint files.
///
/// A sharded parameter is one box per rank: FSDP's Shard(0) of the
/// TP-local weight inside TP's Shard(d) of the global one, so nesting only
/// adds offsets. Replicas (DDP and HSDP replicas, TP's replicated norm
/// weights) hold equal boxes; exactly one of them is `primary` and saves it.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}
namespace titan::dist {
class DeviceMesh;
}

namespace titan::checkpoint {

/// @brief One rank's piece of one checkpointed tensor.
struct TensorShard {
  std::string fqn;                    ///< "layers.0.attention.wq.weight", "optimizer.state.<fqn>.exp_avg"
  at::Tensor local;                   ///< the live tensor: saved from, loaded into
  std::vector<int64_t> global_shape;  ///< the whole tensor's shape
  std::vector<int64_t> offsets;       ///< where `local` starts in it, per dim
  /// This rank saves the box: false on all but one of the ranks that hold
  /// an equal box (replicas). Every rank loads its own box either way.
  bool primary = true;

  /// Elements of the local box (0 for an FSDP rank without rows).
  int64_t numel() const { return local.defined() ? local.numel() : 0; }
};

using ShardedState = std::vector<TensorShard>;

/// @brief The parameters of `parts` (a model, or a pipeline rank's stages,
/// whose names are the full model's) as shards of the global tensors,
/// reading the layout from fully_shard (FSDP / HSDP) and parallelize_module
/// (TP). `job_mesh` is the job's mesh (its dim names decide which ranks are
/// replicas: dp_replicate and cp always, tp for parameters TP left whole,
/// dp_shard for those FSDP left whole); null on one process.
ShardedState model_shards(const std::vector<torch::nn::Module*>& parts, const dist::DeviceMesh* job_mesh);

/// @brief The optimizer's moments of every `model` shard, as shards of the
/// same boxes, named "optimizer.state.<fqn>.exp_avg" and "...exp_avg_sq"
/// (created as zeros when the optimizer has not stepped yet, so that a
/// load has somewhere to write).
ShardedState optimizer_shards(torch::optim::Optimizer& optimizer, const ShardedState& model);

/// @brief "optimizer.state.<fqn>.exp_avg" for `fqn` and `moment`.
std::string optimizer_state_name(const std::string& fqn, const std::string& moment);

}  // namespace titan::checkpoint
