#pragma once
/// @file
/// @brief Pipeline parallelism (parallel/pipeline, pipeline_llama) plugged
/// into the equivalence harness (reference_run.hpp): the model cut into
/// stages, a schedule over the pipeline group, and the full gradients and
/// parameters assembled from every stage for the comparison.
///
/// PP does not split the batch: every pipeline rank is given the whole
/// batch (the first stage reads its tokens, the last its labels), so a PP
/// run is run_steps(spec, ..., /*rank=*/0, /*world=*/1, technique) on every
/// rank of the pipeline group.

#include <functional>
#include <memory>
#include <vector>

#include "titan/models/llama3/pipeline.hpp"
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/verify/reference_run.hpp"

namespace titan::verify {

/// @brief A model cut for this pipeline rank and the runtime that runs its schedule.
struct PipelineRun {
  models::llama3::PipelinePlan plan;
  std::vector<models::llama3::Transformer> parts;  ///< this rank's stages, in stage order
  std::vector<std::shared_ptr<pp::PipelineStage>> stages;
  std::shared_ptr<pp::PipelineRuntime> runtime;
  std::shared_ptr<dist::ProcessGroup> pp_group;
  /// Every parameter of every part (what the optimizer steps).
  std::vector<at::Tensor> parameters() const;
};

/// @brief What build_pipeline_run needs beyond the RunSpec.
struct PipelineRunOptions {
  pp::ScheduleKind kind = pp::ScheduleKind::OneFOneB;
  int microbatches = 4;         ///< per step (the local batch must divide by it)
  /// Sequences this rank's pipeline gets per step; 0 = spec.global_batch
  /// (data parallelism around the pipeline gives each replica a slice).
  int64_t local_batch = 0;
  int64_t layers_per_stage = -1;  ///< -1: the default split
  /// Layers' worth the first stage's embeddings and the last stage's norm +
  /// output count for (pp::split_layers; torchtitan's config says 1 and 1).
  int64_t first_stage_less_layers = 0, last_stage_less_layers = 0;
  /// Applied to each part after the cut, before the stages are built
  /// (TP, FSDP inside a stage); empty = nothing.
  std::function<void(models::llama3::Transformer& part)> parallelize_part;
  /// Sequence positions one rank holds between stages (seq_len/tp under
  /// sequence parallelism); 0 = spec.seq_len.
  int64_t local_seq_len = 0;
  /// The last stage's loss (loss parallel); empty = cross_entropy.
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss_fn;
  pp::RuntimeOptions runtime;  ///< the runtime's own options (events, memory, a given action list)
};

/// @brief build_model(spec, spec.model_seed) — the reference's weights —,
/// cut by pipeline_llama for this rank of `pp_group`, parallelised, staged
/// and scheduled. Collective over the pipeline group.
PipelineRun build_pipeline_run(const RunSpec& spec, std::shared_ptr<dist::ProcessGroup> pp_group,
                               const PipelineRunOptions& options);

/// @brief The Technique that trains `run` (which must outlive it):
/// forward_backward runs one schedule step on the concatenated micro-batches,
/// full_grads / full_params take each part's tensors through `gather_part`
/// (default: as they are; TP or FSDP inside a stage gather their shards,
/// collectively) and add them up over the pipeline group, where every
/// parameter has exactly one owner.
Technique pipeline_technique(PipelineRun& run, const RunSpec& spec,
                             std::function<NamedTensors(models::llama3::Transformer&, bool grads)> gather_part = {});

}  // namespace titan::verify
