#pragma once
/// @file
/// @brief Lab 02: a teaching FSDP (one unit per fully_shard call, no prefetch,
/// no mixed precision) whose three core steps are yours to write:
/// unshard() (all-gather), reshard() (free) and reduce_scatter_grad().

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "titan/dist/device_mesh.hpp"
#include "titan/ops/param_module.hpp"

namespace lab02 {

/// @brief One sharded parameter: this rank holds rows
/// [rank·padded_rows, rank·padded_rows + shard.size(0)) of the full tensor.
struct ShardedParam {
  titan::ops::ParamModule* owner = nullptr;  ///< module that registered it
  std::string name;                          ///< its name there ("weight")
  std::vector<int64_t> shape;                ///< full shape
  int64_t padded_rows = 0;                   ///< ceil(shape[0] / world): rows every rank sends
  at::Tensor shard;                          ///< the registered parameter (this rank's rows)
};

/// @brief The full parameter, gathered from every rank's shard over `group`.
at::Tensor unshard(const ShardedParam& p, const titan::dist::ProcessGroup& group);

/// @brief Frees the memory of `full` while keeping the tensor object (the
/// autograd graph holds it and will see it refilled before backward).
void reshard(const at::Tensor& full);

/// @brief This rank's rows of the average over ranks of `full_grad`
/// (shaped like p.shard).
at::Tensor reduce_scatter_grad(const ShardedParam& p, const at::Tensor& full_grad,
                               const titan::dist::ProcessGroup& group);

/// @brief Shards `module`'s parameters (those not already sharded by an inner
/// call) over the 1-D `mesh` and wires the steps above into its forward and
/// backward. Given: you do not need to change it.
void fully_shard(torch::nn::Module& module, const titan::dist::DeviceMesh& mesh);

/// @brief Bytes held right now by the full (unsharded) parameters of every
/// unit at or below `module` (given; the checker reads it between forward
/// and backward).
int64_t unsharded_bytes(torch::nn::Module& module);

}  // namespace lab02
