#pragma once
/// @file
/// @brief pipeline_llama: cuts a Llama 3 model into pipeline stages by
/// layer (torchtitan's pipeline_llama): the embeddings go with the first
/// stage, the final norm, output projection and loss with the last, and
/// this rank keeps the stages its schedule places on it.

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "titan/config/value.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/parallel/pipeline/schedule.hpp"
#include "titan/parallel/pipeline/split.hpp"
#include "titan/parallel/pipeline/stage.hpp"
#include "titan/parallel/step_hooks.hpp"

namespace titan::config {
struct JobConfig;
}
namespace titan::dist {
class ProcessGroup;
}

namespace titan::models::llama3 {

/// @brief How the model is cut: the schedule's shape and each stage's layers.
struct PipelinePlan {
  pp::ScheduleSpec spec;              ///< kind, ranks, stages per rank, micro-batches
  std::vector<pp::LayerRange> layers; ///< per global stage
  /// Every rank's compute actions read from [parallelism]
  /// pipeline_parallel_schedule_csv (checked by pp::simulate), run instead
  /// of pp::compute_actions(spec); empty = the schedule's own order.
  std::vector<pp::RankActions> compute_actions;
  std::string schedule_csv;  ///< the file they came from
  /// "Interleaved1F1B, 4 ranks x 2 stages, 8 micro-batches; layers 0-4 | 5-9 | ..."
  std::string describe() const;
  /// The compute actions the runtime will run: compute_actions, or the schedule's own.
  std::vector<pp::RankActions> actions() const;
  /// Whether some backward is split into I and W steps.
  bool splits_backward() const;
};

/// @brief The plan for `n_layers` layers, as torchtitan's pipeline_llm
/// makes it: with `layers_per_stage` > 0 as many stages as
/// pp::stages_for_layers_per_stage gives (a multiple of pp), else pp stages
/// for a single-stage schedule and 2·pp for a multi-stage one; the layers
/// split by pp::split_layers with the ends counted `first_stage_less_layers`
/// and `last_stage_less_layers` layers heavier (torchtitan's config defaults
/// them to 1; 0 and 0 here split the layers alone). Checks the schedule's
/// needs (spec.validate).
PipelinePlan plan_pipeline(int64_t n_layers, pp::ScheduleKind kind, int pp, int microbatches,
                           int64_t layers_per_stage = -1, int64_t first_stage_less_layers = 0,
                           int64_t last_stage_less_layers = 0);

/// @brief The layers of each stage that torchtitan's
/// module_fqns_per_model_part names, one list of module names per stage:
/// "tok_embeddings" (in the first), "layers.N", "norm" and "output" (in the
/// last). Every module once; each stage's layers consecutive and after the
/// previous stage's (their order inside a list is free); a stage may hold
/// no layer (["tok_embeddings"]). Throws one line naming the key and what
/// is wrong.
std::vector<pp::LayerRange> layers_of_model_parts(const config::StringLists& parts, int64_t n_layers);

/// @brief The plan a job asks for ([experimental] pipeline_parallel_degree,
/// _schedule, _microbatch_size, _layers_per_stage, _first_stage_less_layers,
/// _last_stage_less_layers, or module_fqns_per_model_part; the order from
/// pipeline_parallel_schedule_csv when given) with a local batch of
/// `local_batch` sequences (micro-batches = local_batch / microbatch_size,
/// which must divide). Throws one line naming the keys.
PipelinePlan plan_pipeline(const config::JobConfig& cfg, int64_t n_layers, int64_t local_batch);

/// @brief Stage `stage` of `plan` as a Transformer of its own that shares
/// the modules (and so the weights) of the full `model`: the blocks of its
/// layer range under their original names ("layers.7...."),
/// tok_embeddings on the first stage, norm and output on the last. The
/// full model can be dropped afterwards.
Transformer pipeline_part(const Transformer& model, const PipelinePlan& plan, int stage);

/// @brief The parts this pipeline rank runs (plan.spec.stages_of_rank), in stage order.
std::vector<Transformer> pipeline_llama(const Transformer& model, const PipelinePlan& plan, int pp_rank);

/// @brief What every stage of a Llama pipeline exchanges and computes in.
struct StageSetup {
  /// One micro-batch's hidden states between stages: [sequences per
  /// micro-batch, sequence positions this rank holds (seq_len, /cp under
  /// CP, /tp under sequence parallelism), dim].
  std::vector<int64_t> activation_shape;
  at::ScalarType dtype = at::kFloat;        ///< what the stages compute in
  c10::Device device = c10::Device(c10::kCPU);  ///< the compute device
  /// The last stage's loss (required: pp::StageOptions::loss_fn).
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss_fn;
};

/// @brief The PipelineStage of each part this pipeline rank runs (`parts`
/// as pipeline_llama returned them, each already parallelised), in stage
/// order: each runs its part's forward with the micro-batch's document
/// starts and its tokens' sequence length (the tokens' positions, which a
/// later stage's hidden states do not show under sequence parallelism).
/// `before_weight_backward[k]`, when given, is part k's hook before each
/// of its weight backwards (StageOptions::before_weight_backward).
std::vector<std::shared_ptr<pp::PipelineStage>> pipeline_stages(
    const std::vector<Transformer>& parts, const PipelinePlan& plan, int pp_rank, const StageSetup& setup,
    const std::vector<std::function<void(bool last)>>& before_weight_backward = {});

/// @brief The whole model's tensors by name from the ones each pipeline
/// rank holds (`owned`: this rank's stages' full tensors; every name has
/// exactly one owner): one all-reduce over `pp_group` (null: one rank) of
/// every tensor, zeros where not owned, on `device`. Returned as fp32 CPU
/// tensors, in `args`' full model order. Collective over the pp group.
/// (Sized for tests and exports of models that fit on one rank.)
std::vector<std::pair<std::string, at::Tensor>> gather_pipeline_tensors(const std::map<std::string, at::Tensor>& owned,
                                                                        const ModelArgs& args,
                                                                        const dist::ProcessGroup* pp_group,
                                                                        c10::Device device);

/// @brief The full weights of a pipeline-parallel model: each stage's
/// own gather (FSDP's, TP's, or its whole tensors), then the stages of
/// every pp rank put together (gather_pipeline_tensors). Collective over
/// the whole job.
class PipelineStateDict : public parallel::FullStateDict {
 public:
  PipelineStateDict(std::vector<std::shared_ptr<parallel::FullStateDict>> stages, ModelArgs args,
                    std::shared_ptr<dist::ProcessGroup> pp_group, c10::Device device);
  std::map<std::string, at::Tensor> gather() override;

 private:
  std::vector<std::shared_ptr<parallel::FullStateDict>> stages_;
  ModelArgs args_;
  std::shared_ptr<dist::ProcessGroup> pp_group_;
  c10::Device device_;
};

}  // namespace titan::models::llama3
