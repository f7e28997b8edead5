// Which data parallelism wraps the model, from the job's degrees — the
// C++ counterpart of torchtitan's parallelize_llama (data-parallel part).
#include "titan/models/llama3/parallelize.hpp"

#include "titan/dist/device_mesh.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/context_parallel/context.hpp"
#include "titan/parallel/data_parallel.hpp"
#include "titan/parallel/float8/float8_linear.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/parallel/fsdp/step_hooks.hpp"
#include "titan/parallel/float8/step_hooks.hpp"
#include "titan/parallel/pipeline/step_hooks.hpp"
#include "titan/parallel/tensor_parallel/parallelize_module.hpp"
#include "titan/parallel/tensor_parallel/tp_state_dict.hpp"

#include "titan/dist/world.hpp"
#include "titan/models/llama3/pipeline.hpp"
#include "titan/models/materialize.hpp"
#include "titan/ops/chunked_cross_entropy.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/parallel/tensor_parallel/loss_parallel.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::models::llama3 {
namespace {

// FSDP per transformer block, then the root, as torchtitan's apply_fsdp:
// each block is one all-gather / reduce-scatter unit, the root unit takes
// the embeddings, final norm and output projection.
void apply_fsdp(Transformer& model, const dist::DeviceMesh& mesh, const FsdpJobOptions& o, bool pipelined,
                ParallelizedModel& r) {
  fsdp::FullyShardOptions opts;
  opts.mp_policy.param_dtype = o.param_dtype;
  opts.mp_policy.reduce_dtype = o.reduce_dtype;
  if (o.cpu_offload) opts.offload_policy = fsdp::CPUOffloadPolicy{};
  const auto blocks = model->blocks();
  for (size_t i = 0; i < blocks.size(); ++i) {
    // Under PP `model` is one stage: its last block is not the model's,
    // and "default" reshards none there anyway.
    opts.reshard_after_forward = o.block_reshards_after_forward(/*last_block=*/i + 1 == blocks.size(), pipelined);
    fsdp::fully_shard(*blocks[i], mesh, opts);
  }
  opts.reshard_after_forward = o.root_reshards_after_forward(pipelined);
  fsdp::fully_shard(*model, mesh, opts);
  r.state_dict = std::make_shared<fsdp::FsdpStateDict>(model.ptr());
  // Under PP the stage calls the hooks before each micro-batch's weight
  // backward, true for its last: FSDP sums the micro-batches' gradients
  // unsharded and reduce-scatters once per step, as torch's pipelining
  // drives FSDP2 — unless reduce_scatter_per_microbatch asks otherwise.
  // Plain gradient accumulation keeps one reduce-scatter per micro-batch
  // (torchtitan's train step does not turn sync off either): there the
  // unsharded sum would cost a full copy of the model's gradients.
  r.step_hooks.add(std::make_shared<fsdp::FsdpStepHooks>(
      model.ptr(), /*reduce_once_per_step=*/pipelined && !o.reduce_scatter_per_microbatch));
  r.description = "FSDP per block + root, " + config_dtype_name(o.param_dtype) + " params, " +
                  config_dtype_name(o.reduce_dtype) + " reduce" + (o.cpu_offload ? ", CPU offload" : "") +
                  (pipelined && o.reduce_scatter_per_microbatch ? ", reduce-scatter per micro-batch" : "");
}

// DDP over dp_replicate: one all-reduce per 25 MiB bucket, launched from
// backward. Gradient accumulation holds a no_sync guard for every
// micro-batch but the last, so only the accumulated sum travels
// (parallel::DdpStepHooks).
// `broadcast`: rank 0's weights to the others at the start; not needed when
// every rank's values come from the same sharded init.
void apply_ddp(Transformer& model, const dist::DeviceMesh& mesh, bool broadcast, ParallelizedModel& r) {
  parallel::ReplicateOptions options;
  options.broadcast_from_rank0 = broadcast;
  auto ddp = parallel::replicate(*model, mesh.group("dp_replicate"), options);
  r.description = "DDP, " + std::to_string(ddp->buckets().size()) + " gradient bucket(s) of <= 25 MiB";
  r.step_hooks.add(std::make_shared<parallel::DdpStepHooks>(std::move(ddp)));
}

// TP first, as torchtitan: FSDP then shards the TP-local weights over
// dp_shard (2-D FSDP x TP), and the tp group is the mesh's innermost dim
// (neighbouring ranks: one node on GPUs).
std::string apply_tensor_parallel(Transformer& model, const dist::DeviceMesh& mesh, const TpOptions& opts,
                                  ParallelizedModel& r) {
  const int64_t tp = mesh.size("tp");
  const dist::DeviceMesh tp_mesh = mesh["tp"];
  std::string description = apply_tp(model, tp_mesh, opts);
  if (opts.loss_parallel) {
    auto group = mesh.group("tp");
    const int64_t offset = shard_size_and_offset(model->args().vocab_size, tp, tp_mesh.coordinate()[0]).second;
    r.loss_fn = [group, offset](const at::Tensor& logits, const at::Tensor& labels) {
      return tp::vocab_parallel_cross_entropy(logits, labels, *group, offset, ops::LossReduction::Sum);
    };
  }
  return description;
}

void apply_activation_checkpointing(Transformer& model, const AcJobOptions& a) {
  for (const auto& block : model->blocks()) {
    if (!a.blocks.at(static_cast<size_t>(block->layer_id))) continue;
    if (a.policy.per_op())
      ac::checkpoint_module_selective_op(*block, a.force_recompute_mm_shapes_by_fqns,
                                         "layers." + std::to_string(block->layer_id));
    else ac::checkpoint_module(*block);
  }
}

// "full AC (k of n blocks)" counted over `parts`: the model, or every
// pipeline stage this rank holds (ZBV's rank 0 holds the first and the last
// layer), whichever part is being parallelised.
std::string describe_rank_ac(const std::vector<Transformer>& parts, const AcJobOptions& a) {
  int64_t blocks = 0, wrapped = 0;
  for (const Transformer& part : parts)
    for (const auto& block : part->blocks()) {
      ++blocks;
      if (a.blocks.at(static_cast<size_t>(block->layer_id))) ++wrapped;
    }
  return a.policy.describe(wrapped, blocks);
}

// One model (or one pipeline stage of it): TP, AC, then FSDP / DDP.
// `rank_parts`: with PP, all of this rank's stages (what its description
// counts the checkpointed blocks over); null: the model alone.
ParallelizedModel parallelize_part(Transformer& model, const parallel::ParallelDims& dims, dist::DeviceMesh* mesh,
                                   const ParallelizeOptions& o, const std::vector<Transformer>* rank_parts = nullptr) {
  ParallelizedModel r;
  const std::vector<Transformer> rank = rank_parts ? *rank_parts : std::vector<Transformer>{model};
  r.loss_fn = [chunked = model->args().fused_kernels](const at::Tensor& logits, const at::Tensor& labels) {
    return chunked ? ops::chunked_cross_entropy(logits, labels, ops::LossReduction::Sum)
                   : ops::cross_entropy(logits, labels, ops::LossReduction::Sum);
  };
  // The plain model's weights are already whole: a detached copy of each
  // (FSDP replaces this with its gather, TP wraps whichever it is).
  r.state_dict = std::make_shared<parallel::WholeModuleStateDict>(model.ptr());
  std::string cp_description;
  if (dims.cp_enabled()) {
    TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
    // Attention under TP holds its local heads; ring attention works per
    // head, so the two compose without more communication.
    model->set_context_parallel(cp::make_context_parallel(mesh->group("cp"), o.cp_load_balance, o.cp_rotate));
    cp_description = "CP " + std::to_string(dims.cp) + " (ring attention, " + cp::to_string(o.cp_rotate) + ", " +
                     cp::to_string(o.cp_load_balance) + " sequence split)";
  }
  std::string tp_description;
  if (dims.tp_enabled()) {
    TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
    tp_description = apply_tensor_parallel(model, *mesh, o.tp, r);
  }
  // Activation checkpointing after TP and before FSDP, as torchtitan: the
  // checkpoint wraps each chosen block from outside its FSDP hooks, so the
  // recompute gathers the weights again. Blocks are chosen by layer id, so
  // a pipeline stage checkpoints the same layers as the whole model would.
  // Float8 after TP (the GEMMs of the TP-local weights go float8) and
  // before AC and FSDP, as torchtitan converts the model first.
  std::string f8_description;
  if (o.float8.enable) {
    // Under async TP the ring runs the converted layers' GEMMs in float8
    // itself (tensor_parallel/async_tp_float8.cpp).
    float8::Float8Options f8;
    f8.filter_fqns = o.float8.filter_fqns;
    // Under TP every converted layer takes its amaxes over the tp group, so
    // its pieces scale as the whole layer would.
    if (dims.tp_enabled() && mesh) {
      f8.tp_group = mesh->group("tp");
      f8.tp_placements = tp::tp_placements(*model);
    }
    f8.fsdp_float8_all_gather = o.float8.fsdp_float8_all_gather;
    f8.recipe = o.float8.recipe;
    f8.emulate = o.float8.emulate;
    float8::convert_to_float8_training(*model, f8);
    // Counted over this rank's stages: by the last stage's turn every one
    // of them is converted (parallelize_llama describes the rank by it).
    int64_t converted = 0;
    for (const Transformer& part : rank) converted += float8::count_float8_linears(*part.ptr());
    f8_description = "float8 linear (" + std::to_string(converted) + " layers, " +
                     float8::to_string(o.float8.recipe) + " scaling";
    if (f8.emulate) f8_description += ", emulated GEMMs";
    if (f8.fsdp_float8_all_gather) {
      f8_description += ", float8 all-gather";
      if (o.float8.precompute_scales) {
        f8_description += " with precomputed scales";
        // torchtitan's post-optimizer hook: the scales of the next step's
        // all-gathers, one all-reduce for all layers.
        r.step_hooks.add(std::make_shared<float8::Float8StepHooks>(model.ptr()));
      }
    }
    f8_description += ")";
  }
  apply_activation_checkpointing(model, o.ac);
  const std::string ac_description = describe_rank_ac(rank, o.ac);
  if (dims.fsdp_enabled()) {
    TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
    // HSDP: replicate over dp_replicate, shard within dp_shard (a 2-D mesh,
    // replicate first); FSDP: the 1-D dp_shard mesh.
    // Under context parallelism the cp ranks hold the same weights and
    // see different tokens: FSDP shards over dp_shard × cp together
    // ("dp_shard_cp", torchtitan's), and its averaging reduce-scatter
    // averages their gradients too (each cp rank's loss is the mean over
    // its equally many tokens).
    const std::string shard_dim = !dims.cp_enabled() ? "dp_shard" : (dims.dp_shard_enabled() ? "dp_shard_cp" : "cp");
    const dist::DeviceMesh dp_mesh = dims.dp_replicate_enabled()
                                         ? (*mesh)[std::vector<std::string>{"dp_replicate", shard_dim}]
                                         : (*mesh)[shard_dim];
    apply_fsdp(model, dp_mesh, o.fsdp, dims.pp_enabled(), r);
    // Gradients are shards over the sharding group (and equal across
    // replicas), so the global norm sums squares over that group only.
    r.grad_shard_groups = {mesh->group(shard_dim).get()};
  } else {
    // Built on the meta device, the model gets storage here for what this
    // rank holds whole (the TP-local weights, the replicas of DDP): FSDP
    // above allocated only its shards. The values come later (the
    // trainer's sharded init); DDP's bucket views need real tensors.
    const bool values_later = has_meta_parameters(*model);
    if (mesh != nullptr && values_later) to_empty(*model, dist::world().device());
    if (dims.ddp_enabled()) {
      TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
      apply_ddp(model, *mesh, /*broadcast=*/!values_later, r);
    }
  }
  r.params = model->parameters();
  if (!ac_description.empty()) r.description = r.description.empty() ? ac_description : ac_description + "; " + r.description;
  if (!f8_description.empty()) r.description = r.description.empty() ? f8_description : f8_description + "; " + r.description;
  if (!cp_description.empty()) r.description = r.description.empty() ? cp_description : cp_description + "; " + r.description;
  if (dims.tp_enabled()) {
    // Norm membership is decided by name, since FSDP may since have swapped
    // the TP-local tensors for its own shards.
    const auto placed = tp::tp_parameters(*model);
    const bool tp_rank0 = mesh->local_rank("tp") == 0;
    for (const auto& item : model->named_parameters()) {
      auto it = placed.find(item.key());
      const bool sharded = it != placed.end() && it->second.placement.is_shard();
      if (sharded || tp_rank0) r.grad_norm_params.push_back(item.value());
    }
    r.grad_shard_groups.push_back(mesh->group("tp").get());
    r.description = r.description.empty() ? tp_description : tp_description + "; " + r.description;
    // Full weights: whatever data parallelism gathers, then the TP shards.
    r.state_dict = std::make_shared<tp::TpStateDict>(r.state_dict, placed, dist::world().device());
  }
  return r;
}

}  // namespace

ParallelizedModel parallelize_llama(Transformer& model, const parallel::ParallelDims& dims, dist::DeviceMesh* mesh,
                                    const ParallelizeOptions& o) {
  if (!dims.pp_enabled()) return parallelize_part(model, dims, mesh, o);
  TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
  TITAN_INTERNAL_ASSERT(o.pipeline.has_value(), "parallelize_llama: pp > 1 but no pipeline plan in the options");
  const ModelArgs args = model->args();
  const PipelinePlan& plan = *o.pipeline;
  const int pp_rank = static_cast<int>(mesh->local_rank("pp"));
  ParallelizedModel r;
  r.pipeline_parts = pipeline_llama(model, plan, pp_rank);
  // Only this rank's stages stay: the full model's other layers go now.
  model = r.pipeline_parts.front();

  // Between stages a micro-batch's hidden states: [microbatch, seq (/cp:
  // this rank's shard under CP; /tp under SP), dim], in the dtype the
  // stage computes in.
  const int64_t seq = o.seq_len / dims.cp / (dims.tp_enabled() && o.tp.sequence_parallel ? dims.tp : 1);
  const std::vector<int64_t> shape = {o.pp_microbatch_size, seq, args.dim};
  const at::ScalarType dtype = dims.fsdp_enabled() ? o.fsdp.param_dtype : o.param_storage_dtype;
  std::vector<ParallelizedModel> parts;
  std::vector<std::function<void(bool)>> before_weight_backward;
  std::string description;
  for (Transformer& part : r.pipeline_parts) {
    parts.push_back(parallelize_part(part, dims, mesh, o, &r.pipeline_parts));
    const ParallelizedModel& pm = parts.back();
    // The schedule knows which micro-batch is this stage's last.
    before_weight_backward.push_back([hooks = pm.step_hooks](bool last) { hooks.before_micro_batch_backward(last); });
    for (const at::Tensor& p : pm.params) r.params.push_back(p);
    for (const at::Tensor& p : pm.grad_norm_params) r.grad_norm_params.push_back(p);
    // The last stage's description: the rank-wide counts in it (float8
    // layers, checkpointed blocks) see every stage parallelised by then.
    description = pm.description;
  }
  StageSetup setup;
  setup.activation_shape = shape;
  setup.dtype = dtype;
  setup.device = dist::world().device();  // the compute device (shards may be offloaded to the CPU)
  setup.loss_fn = parts.front().loss_fn;
  const auto stages = pipeline_stages(r.pipeline_parts, plan, pp_rank, setup, before_weight_backward);
  pp::RuntimeOptions runtime;
  runtime.compute_actions = plan.compute_actions;  // [parallelism] pipeline_parallel_schedule_csv, or none
  r.pipeline = std::make_shared<pp::PipelineRuntime>(plan.spec, stages, mesh->group("pp"), runtime);
  // Every part was parallelised alike, so the first one's groups serve
  // all; each pp rank holds different parameters, so the norm also sums
  // over pp.
  r.grad_shard_groups = parts.front().grad_shard_groups;
  r.grad_shard_groups.push_back(mesh->group("pp").get());
  std::vector<parallel::StepHookList> stage_hooks;
  std::vector<std::shared_ptr<parallel::FullStateDict>> stage_state_dicts;
  for (const ParallelizedModel& pm : parts) {
    stage_hooks.push_back(pm.step_hooks);
    stage_state_dicts.push_back(pm.state_dict);
  }
  r.step_hooks.add(std::make_shared<pp::PipelineStepHooks>(std::move(stage_hooks)));
  r.state_dict = std::make_shared<PipelineStateDict>(std::move(stage_state_dicts), args, mesh->group("pp"),
                                                     dist::world().device());
  r.description = "PP " + plan.describe() + (description.empty() ? "" : "; " + description);
  return r;
}

}  // namespace titan::models::llama3
