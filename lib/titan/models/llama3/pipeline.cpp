#include "titan/models/llama3/pipeline.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "titan/config/job_config.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/parallel/pipeline/schedule_csv.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::models::llama3 {

std::string PipelinePlan::describe() const {
  return spec.describe() + (schedule_csv.empty() ? "" : ", order from " + schedule_csv) + "; layers " +
         pp::describe_split(layers);
}

std::vector<pp::RankActions> PipelinePlan::actions() const {
  return compute_actions.empty() ? pp::compute_actions(spec) : compute_actions;
}

bool PipelinePlan::splits_backward() const {
  if (compute_actions.empty()) return pp::splits_backward(spec.kind);
  for (const pp::RankActions& rank : compute_actions)
    for (const pp::Action& a : rank)
      if (a.type == pp::ActionType::BackwardInput || a.type == pp::ActionType::BackwardWeight) return true;
  return false;
}

PipelinePlan plan_pipeline(int64_t n_layers, pp::ScheduleKind kind, int pp_degree, int microbatches,
                           int64_t layers_per_stage, int64_t first_stage_less_layers, int64_t last_stage_less_layers) {
  PipelinePlan plan;
  plan.spec.kind = kind;
  plan.spec.pp = pp_degree;
  plan.spec.microbatches = microbatches;
  int64_t stages = 0;
  if (layers_per_stage > 0) {
    // torchtitan's pipeline_llm: as many stages as the layers and the
    // weighted ends need at layers_per_stage each (rounded up).
    stages = pp::stages_for_layers_per_stage(n_layers, layers_per_stage, first_stage_less_layers,
                                             last_stage_less_layers);
    TITAN_CHECK(stages % pp_degree == 0, "pipeline_parallel_layers_per_stage ", layers_per_stage, " makes ", stages,
                " stages of the ", n_layers, " layers (the first and last counted ", first_stage_less_layers, " and ",
                last_stage_less_layers, " layers heavier), which do not divide over pipeline_parallel_degree ",
                pp_degree);
    plan.spec.stages_per_rank = static_cast<int>(stages / pp_degree);
  } else {
    // torchtitan's default: one stage per rank, two for multi-stage schedules.
    plan.spec.stages_per_rank = pp::is_multi_stage(kind) ? 2 : 1;
    stages = static_cast<int64_t>(pp_degree) * plan.spec.stages_per_rank;
  }
  plan.spec.validate();
  plan.layers = pp::split_layers(n_layers, stages, first_stage_less_layers, last_stage_less_layers);
  return plan;
}

std::vector<pp::LayerRange> layers_of_model_parts(const config::StringLists& parts, int64_t n_layers) {
  const std::string key = "[parallelism] module_fqns_per_model_part: ";
  TITAN_CHECK(!parts.empty(), key, "no stage given");
  const int64_t last = static_cast<int64_t>(parts.size()) - 1;
  std::map<std::string, int64_t> stage_of;  // module name -> the stage naming it
  std::vector<pp::LayerRange> layers;
  int64_t next = 0;  // the first layer the next stage must hold
  for (int64_t s = 0; s <= last; ++s) {
    const config::StringList& names = parts[static_cast<size_t>(s)];
    TITAN_CHECK(!names.empty(), key, "stage ", s, " names no module");
    std::vector<int64_t> held;
    for (const std::string& name : names) {
      const auto [it, fresh] = stage_of.emplace(name, s);
      TITAN_CHECK(fresh, key, "'", name, "' is named by stage ", it->second, (it->second == s ? " twice" : ""),
                  (it->second == s ? "" : " and stage " + std::to_string(s)));
      if (name == "tok_embeddings") {
        TITAN_CHECK(s == 0, key, "'tok_embeddings' is in stage ", s, "; titan's first stage holds the embeddings");
      } else if (name == "norm" || name == "output") {
        TITAN_CHECK(s == last, key, "'", name, "' is in stage ", s, " of 0..", last,
                    "; titan's last stage holds the norm and the output");
      } else {
        const std::string digits = name.rfind("layers.", 0) == 0 ? name.substr(7) : std::string();
        char* end = nullptr;
        const long long layer = digits.empty() ? -1 : std::strtoll(digits.c_str(), &end, 10);
        TITAN_CHECK(!digits.empty() && *end == '\0' && std::isdigit(static_cast<unsigned char>(digits[0])), key, "'",
                    name, "' is not a module of the model (tok_embeddings, layers.N, norm, output)");
        TITAN_CHECK(layer < n_layers, key, "'", name, "' is not a layer of the model (layers.0 .. layers.",
                    n_layers - 1, ")");
        held.push_back(layer);
      }
    }
    std::sort(held.begin(), held.end());
    for (size_t k = 0; k < held.size(); ++k)
      TITAN_CHECK(held[k] == next + static_cast<int64_t>(k), key, "stage ", s, " holds layers.", held[k],
                  " where layers.", next + static_cast<int64_t>(k),
                  " comes next (each stage's layers consecutive, following the previous stage's)");
    layers.push_back({next, next + static_cast<int64_t>(held.size())});
    next += static_cast<int64_t>(held.size());
  }
  TITAN_CHECK(next == n_layers, key, "no stage holds layers.", next, " (the model has ", n_layers, " layers)");
  for (const char* name : {"tok_embeddings", "norm", "output"})
    TITAN_CHECK(stage_of.count(name), key, "no stage holds '", name, "'");
  return layers;
}

namespace {

// The cut and the schedule's shape, before any order from a file.
PipelinePlan plan_stages(const config::JobConfig& cfg, int64_t n_layers, int64_t local_batch) {
  const auto& e = cfg.experimental;
  TITAN_CHECK(local_batch % e.pipeline_parallel_microbatch_size == 0, "[experimental] pipeline_parallel_microbatch_size ",
              e.pipeline_parallel_microbatch_size, " does not divide the local batch of ", local_batch, " sequences");
  const int m = static_cast<int>(local_batch / e.pipeline_parallel_microbatch_size);
  if (!e.module_fqns_per_model_part.empty()) {
    // The stages as named: as many as there are lists, spread over the pp
    // ranks as the schedule places them (loop or V).
    TITAN_CHECK(e.pipeline_parallel_layers_per_stage <= 0, "[parallelism] module_fqns_per_model_part and "
                "pipeline_parallel_layers_per_stage = ", e.pipeline_parallel_layers_per_stage,
                " both say how to cut the model: set one of them");
    std::vector<pp::LayerRange> layers = layers_of_model_parts(e.module_fqns_per_model_part, n_layers);
    const int64_t stages = static_cast<int64_t>(layers.size());
    TITAN_CHECK(stages % e.pipeline_parallel_degree == 0, "[parallelism] module_fqns_per_model_part names ", stages,
                " stages, which do not divide over pipeline_parallel_degree ", e.pipeline_parallel_degree);
    PipelinePlan plan;
    plan.spec.kind = pp::parse_schedule_kind(e.pipeline_parallel_schedule);
    plan.spec.pp = static_cast<int>(e.pipeline_parallel_degree);
    plan.spec.microbatches = m;
    plan.spec.stages_per_rank = static_cast<int>(stages / e.pipeline_parallel_degree);
    plan.spec.validate();
    plan.layers = std::move(layers);
    return plan;
  }
  return plan_pipeline(n_layers, pp::parse_schedule_kind(e.pipeline_parallel_schedule),
                       static_cast<int>(e.pipeline_parallel_degree), m, e.pipeline_parallel_layers_per_stage,
                       e.pipeline_parallel_first_stage_less_layers, e.pipeline_parallel_last_stage_less_layers);
}

}  // namespace

PipelinePlan plan_pipeline(const config::JobConfig& cfg, int64_t n_layers, int64_t local_batch) {
  PipelinePlan plan = plan_stages(cfg, n_layers, local_batch);
  const std::string& csv = cfg.experimental.pipeline_parallel_schedule_csv;
  if (csv.empty()) return plan;
  // torchtitan's pipeline_parallel_schedule_csv: the order of every rank's
  // compute actions from a file, on the stages the schedule's name placed.
  // Checked here, on every rank alike, before the job starts: a file that
  // misses an action or deadlocks is one line, not a hang.
  const std::string key = "[parallelism] pipeline_parallel_schedule_csv: ";
  try {
    plan.compute_actions = pp::read_schedule_csv(csv, plan.spec);
    pp::simulate(plan.spec, plan.compute_actions);
  } catch (const Error& e) {
    throw Error(key + e.what());
  }
  plan.schedule_csv = csv;
  return plan;
}

Transformer pipeline_part(const Transformer& model, const PipelinePlan& plan, int stage) {
  TITAN_CHECK(stage >= 0 && stage < static_cast<int>(plan.layers.size()), "pipeline_part: no stage ", stage, " in ",
              plan.layers.size(), " stages");
  TITAN_CHECK(!model->args().tie_word_embeddings,
              "pipeline parallelism with tied embeddings (flavors 1B and 3B) is not supported: the first stage's "
              "embedding and the last stage's output would share one weight across ranks");
  TITAN_CHECK(model->tok_embeddings && model->output &&
                  static_cast<int64_t>(model->layers->size()) == model->args().n_layers,
              "pipeline_part: cut the full model, not a part of it");
  // A shell on the meta device (no memory) with the right set of modules,
  // whose modules are then swapped for the full model's own.
  Transformer part(model->args(), at::TensorOptions().device(at::kMeta));
  const pp::LayerRange r = plan.layers[static_cast<size_t>(stage)];
  part->keep_layers(r.begin, r.end);
  torch::nn::ModuleDict full_layers = model->layers;  // a handle: the same dict
  for (const auto& item : part->layers->items()) part->layers->update({{item.first, full_layers[item.first]}});
  if (stage == 0) part->tok_embeddings = part->replace_module("tok_embeddings", model->tok_embeddings);
  else part->drop_tok_embeddings();
  if (stage + 1 == static_cast<int>(plan.layers.size())) {
    part->norm = part->replace_module("norm", model->norm);
    part->output = part->replace_module("output", model->output);
  } else {
    part->drop_head();
  }
  part->train(model->is_training());
  return part;
}

std::vector<Transformer> pipeline_llama(const Transformer& model, const PipelinePlan& plan, int pp_rank) {
  std::vector<Transformer> parts;
  for (int s : plan.spec.stages_of_rank(pp_rank)) parts.push_back(pipeline_part(model, plan, s));
  return parts;
}

std::vector<std::shared_ptr<pp::PipelineStage>> pipeline_stages(
    const std::vector<Transformer>& parts, const PipelinePlan& plan, int pp_rank, const StageSetup& setup,
    const std::vector<std::function<void(bool last)>>& before_weight_backward) {
  const std::vector<int> ids = plan.spec.stages_of_rank(pp_rank);
  TITAN_INTERNAL_ASSERT(ids.size() == parts.size(), "pipeline_stages: ", parts.size(), " parts for the ", ids.size(),
                        " stages of pipeline rank ", pp_rank);
  TITAN_INTERNAL_ASSERT(before_weight_backward.empty() || before_weight_backward.size() == parts.size(),
                        "pipeline_stages: ", before_weight_backward.size(), " hooks for ", parts.size(), " parts");
  std::vector<std::shared_ptr<pp::PipelineStage>> stages;
  for (size_t k = 0; k < parts.size(); ++k) {
    Transformer part = parts[k];
    pp::StageOptions so;
    so.stage_index = ids[k];
    so.num_stages = plan.spec.num_stages();
    so.forward = [part](const at::Tensor& x, const pp::BatchInputs& mb) mutable {
      return part->forward(x, mb.doc_start, mb.inputs.size(1));
    };
    so.loss_fn = setup.loss_fn;
    so.input_shape = so.output_shape = setup.activation_shape;
    so.dtype = setup.dtype;
    so.device = setup.device;
    if (!before_weight_backward.empty()) so.before_weight_backward = before_weight_backward[k];
    stages.push_back(std::make_shared<pp::PipelineStage>(so));
  }
  return stages;
}

std::vector<std::pair<std::string, at::Tensor>> gather_pipeline_tensors(const std::map<std::string, at::Tensor>& owned,
                                                                        const ModelArgs& args,
                                                                        const dist::ProcessGroup* pp_group,
                                                                        c10::Device device) {
  Transformer shapes(args, at::TensorOptions().device(at::kMeta));
  std::vector<std::pair<std::string, std::vector<int64_t>>> names;
  std::vector<at::Tensor> flat;
  for (const auto& item : shapes->named_parameters()) {
    names.emplace_back(item.key(), item.value().sizes().vec());
    auto it = owned.find(item.key());
    // Double: x + 0 + ... is exact, so the owner's values come back bit for bit.
    flat.push_back(it != owned.end() ? it->second.detach().to(at::kCPU, at::kDouble).reshape(-1)
                                     : at::zeros({item.value().numel()}, at::TensorOptions().dtype(at::kDouble)));
  }
  at::Tensor all = at::cat(flat).to(device);
  if (pp_group) pp_group->all_reduce(all);
  all = all.cpu();
  std::vector<std::pair<std::string, at::Tensor>> out;
  int64_t offset = 0;
  for (const auto& [name, shape] : names) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out.emplace_back(name, all.narrow(0, offset, n).view(shape).to(at::kFloat).clone());
    offset += n;
  }
  return out;
}

PipelineStateDict::PipelineStateDict(std::vector<std::shared_ptr<parallel::FullStateDict>> stages, ModelArgs args,
                                     std::shared_ptr<dist::ProcessGroup> pp_group, c10::Device device)
    : stages_(std::move(stages)), args_(std::move(args)), pp_group_(std::move(pp_group)), device_(device) {}

std::map<std::string, at::Tensor> PipelineStateDict::gather() {
  std::map<std::string, at::Tensor> owned;
  for (const auto& stage : stages_)
    for (auto& [name, t] : stage->gather()) owned[name] = t;
  std::map<std::string, at::Tensor> out;
  for (auto& [name, t] : gather_pipeline_tensors(owned, args_, pp_group_.get(), device_)) out[name] = t;
  return out;
}

}  // namespace titan::models::llama3
