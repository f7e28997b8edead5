#include "titan/ops/cross_entropy.hpp"
#include "titan/verify/pipeline_technique.hpp"

#include <ATen/ATen.h>

#include <map>

#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/util/error.hpp"

namespace titan::verify {

std::vector<at::Tensor> PipelineRun::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& part : parts)
    for (const at::Tensor& p : part->parameters()) out.push_back(p);
  return out;
}

PipelineRun build_pipeline_run(const RunSpec& spec, std::shared_ptr<dist::ProcessGroup> pp_group,
                               const PipelineRunOptions& o) {
  PipelineRun run;
  run.pp_group = pp_group;
  const int pp_degree = pp_group ? pp_group->size() : 1;
  const int pp_rank = pp_group ? pp_group->rank() : 0;
  const int64_t batch = o.local_batch > 0 ? o.local_batch : spec.global_batch;
  TITAN_CHECK(batch % o.microbatches == 0, "pipeline run: a batch of ", batch, " does not split into ",
              o.microbatches, " micro-batches");
  run.plan = models::llama3::plan_pipeline(spec.model.n_layers, o.kind, pp_degree, o.microbatches, o.layers_per_stage,
                                           o.first_stage_less_layers, o.last_stage_less_layers);
  models::llama3::Transformer full = build_model(spec, spec.model_seed);
  run.parts = models::llama3::pipeline_llama(full, run.plan, pp_rank);
  const int64_t seq = o.local_seq_len > 0 ? o.local_seq_len : spec.seq_len;
  for (models::llama3::Transformer& part : run.parts)
    if (o.parallelize_part) o.parallelize_part(part);
  models::llama3::StageSetup setup;
  setup.activation_shape = {batch / o.microbatches, seq, spec.model.dim};
  setup.dtype = spec.dtype;
  setup.device = spec.device;
  // Without one given, each micro-batch's mean loss (the runtime's default
  // scale 1/m then makes the step's the batch's mean).
  setup.loss_fn = o.loss_fn ? o.loss_fn
                            : [](const at::Tensor& logits, const at::Tensor& labels) {
                                return ops::cross_entropy(logits, labels);
                              };
  run.stages = models::llama3::pipeline_stages(run.parts, run.plan, pp_rank, setup);
  run.runtime = std::make_shared<pp::PipelineRuntime>(run.plan.spec, run.stages, pp_group, o.runtime);
  return run;
}

namespace {

NamedTensors assemble(const RunSpec& spec, const std::map<std::string, at::Tensor>& owned,
                      const std::shared_ptr<dist::ProcessGroup>& group) {
  NamedTensors out;
  for (auto& [name, t] : models::llama3::gather_pipeline_tensors(owned, spec.model, group.get(), dist::world().device()))
    out.emplace_back(name, t.to(spec.dtype));
  return out;
}

}  // namespace

Technique pipeline_technique(PipelineRun& run, const RunSpec& spec,
                             std::function<NamedTensors(models::llama3::Transformer&, bool grads)> gather_part) {
  if (!gather_part)
    gather_part = [](models::llama3::Transformer& part, bool grads) {
      return grads ? snapshot_grads(*part) : snapshot_params(*part);
    };
  auto full = [&run, spec, gather_part](bool grads) {
    std::map<std::string, at::Tensor> owned;
    for (auto& part : run.parts)
      for (auto& [name, t] : gather_part(part, grads)) owned[name] = t;
    return assemble(spec, owned, run.pp_group);
  };
  Technique t;
  t.forward_backward = [&run](const std::vector<MicroBatch>& micro) {
    std::vector<at::Tensor> in, lab;
    for (const MicroBatch& mb : micro) in.push_back(mb.inputs), lab.push_back(mb.labels);
    return run.runtime->step(at::cat(in), at::cat(lab)).loss;
  };
  t.full_grads = [full] { return full(true); };
  t.full_params = [full] { return full(false); };
  return t;
}

}  // namespace titan::verify
