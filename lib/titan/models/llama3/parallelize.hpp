#pragma once
/// @file
/// @brief parallelize_llama: applies the parallelisms a job's degrees ask
/// for to a built Llama 3 model, and tells the train step what changed
/// (which tensors the optimizer steps, how gradients are synchronised).

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/models/llama3/parallelize_options.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/parallel/step_hooks.hpp"

namespace titan::dist {
class DeviceMesh;
class ProcessGroup;
}  // namespace titan::dist
namespace titan::parallel {
struct ParallelDims;
}
namespace titan::pp {
class PipelineRuntime;
}

namespace titan::models::llama3 {

/// @brief What parallelize_llama did, in the terms the train step needs.
struct ParallelizedModel {
  /// The tensors the optimizer steps: the model's parameters, or this rank's
  /// shards of them under FSDP.
  std::vector<at::Tensor> params;
  /// Groups over which the gradients of `params` are sharded (FSDP's
  /// dp_shard, TP's tp), for the global gradient norm; empty when they are whole.
  std::vector<const dist::ProcessGroup*> grad_shard_groups;
  /// The entries of `params` this rank counts in the global gradient norm:
  /// under TP a replicated parameter (a norm weight) counts on TP rank 0
  /// only, or the all-reduce over tp would count it tp times. Empty = all.
  std::vector<at::Tensor> grad_norm_params;
  /// The training loss on the model's output: the sum of its counted
  /// targets' cross-entropies (ops::LossReduction::Sum), which the trainer
  /// divides by the count of the whole global batch's. Under loss parallel
  /// the vocabulary-parallel cross-entropy (the logits are then this rank's
  /// vocabulary slice). Under PP each last stage holds it instead.
  std::function<at::Tensor(const at::Tensor& logits, const at::Tensor& labels)> loss_fn;
  /// What each applied technique does at the train step's phases, in the
  /// order they were applied (parallel/step_hooks.hpp): DDP's no_sync and
  /// bucket wait, FSDP's once-per-step reduce-scatter under PP, float8's
  /// precomputed scales, PP's stages' hooks. Empty on one rank.
  parallel::StepHookList step_hooks;
  /// Gathers the full, unsharded weights under torchtitan's names: the
  /// whole tensors, or FSDP's gather, wrapped by TP's, wrapped by PP's
  /// (collective when the weights are split: every rank calls it).
  std::shared_ptr<parallel::FullStateDict> state_dict;
  /// e.g. "FSDP per block + root over dp_shard (4 ranks)"; "" on one rank.
  std::string description;
  /// With pipeline parallelism: this rank's stages (the model cut by
  /// pipeline_llama, each parallelised as above) and the schedule that
  /// runs them; the train step calls pipeline->step instead of its
  /// micro-batch loop. Null without PP.
  std::shared_ptr<pp::PipelineRuntime> pipeline;
  std::vector<Transformer> pipeline_parts;  ///< this rank's stages, in stage order (empty without PP)
};

/// @brief Applies the parallelisms as torchtitan's parallelize_llama does,
/// in its order: tensor parallelism first when tp > 1 (the Llama plan of
/// tp_plan.hpp over mesh["tp"]; [training] enable_loss_parallel,
/// enable_sequence_parallel), then data parallelism on the TP-local
/// weights: FSDP (fully_shard per transformer block, then the root) when
/// dp_shard > 1, over the 2-D (dp_replicate, dp_shard) mesh as HSDP when
/// dp_replicate > 1 too; DDP (replicate) when only dp_replicate > 1; nothing
/// on one rank. `mesh` is the job's mesh from ParallelDims::build_mesh
/// (null on one rank). `options` come from parallelize_options(cfg, dims,
/// args, local_batch), which checked them. Collective: every rank calls it
/// with the same model.
///
/// With pipeline parallelism (pp > 1) the model is first cut by
/// pipeline_llama into the stages of options.pipeline that this rank's pp
/// coordinate runs; each stage is then
/// parallelised as above (FSDP's "default" reshard policy keeps the
/// parameters unsharded between forward and backward, as torchtitan does
/// under PP: several micro-batches are in flight), and `model` is replaced
/// by the first of them, so that the layers this rank does not run are
/// freed. The gradient norm then also sums over the pp group.
ParallelizedModel parallelize_llama(Transformer& model, const parallel::ParallelDims& dims, dist::DeviceMesh* mesh,
                                    const ParallelizeOptions& options);

}  // namespace titan::models::llama3
