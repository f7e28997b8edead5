#pragma once
/// @file
/// @brief Sharded initialisation: every rank initialises only the pieces of
/// the parameters it holds, and the global weights come out bit for bit
/// the single-process init of the same seed, whatever the layout.
///
/// The trainer builds the model on the meta device, applies every
/// parallelism to it (TP cuts meta tensors, FSDP allocates only this rank's
/// rows, a pipeline rank keeps only its stages, DDP and unsharded layouts
/// allocate what they replicate), then calls init_sharded_weights(). It
/// walks torchtitan's init order (models/llama3/init_plan.hpp), keeping the
/// offset of each parameter's first draw in torch's CPU stream for the seed,
/// and fills each local piece — a box of the global tensor, as checkpoints
/// see it (checkpoint::model_shards) — with ops::init_box_(). No rank ever
/// allocates a whole parameter it does not hold; the CPU makes the values
/// in pieces of a few MiB (also for CUDA parameters, so a CUDA job starts
/// from the CPU's bits: CUDA init equals CPU init).
///
/// Cost: the stream is walked up to the last element a rank holds, about a
/// nanosecond per skipped draw (8B: ~8 s; 405B: ~7 min per rank), plus
/// the rank's own elements (uniform + erfinv on the CPU). A seed checkpoint
/// ([checkpoint] create_seed_checkpoint, or a step-0 checkpoint of an
/// init-only run) skips it at resume.

#include <cstdint>
#include <vector>

#include "titan/models/llama3/model_args.hpp"

namespace torch::nn {
class Module;
}
namespace titan::dist {
class DeviceMesh;
}

namespace titan::train {

/// @brief What one rank initialised.
struct ShardedInitReport {
  int64_t local_bytes = 0;       ///< bytes of the parameter pieces this rank holds
  int64_t model_bytes = 0;       ///< bytes of the whole model's parameters (in their dtype)
  int64_t largest_piece_bytes = 0;  ///< the largest single piece this rank holds
  int64_t pieces = 0;            ///< parameter pieces initialised
  double seconds = 0;            ///< wall time of the initialisation
};

/// @brief Initialises every parameter `parts` hold (a model, or a pipeline
/// rank's stages, all materialised: no meta tensor left) with torchtitan's
/// Llama 3 init for `args`, as the single-process init_weights() after
/// torch.manual_seed(`seed`) would give the whole model. `job_mesh`: the
/// job's mesh (null on one process). Local: no collective.
ShardedInitReport init_sharded_weights(const std::vector<torch::nn::Module*>& parts, const dist::DeviceMesh* job_mesh,
                                       const models::llama3::ModelArgs& args, uint64_t seed);

}  // namespace titan::train
