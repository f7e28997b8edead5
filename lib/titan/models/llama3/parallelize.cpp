// Which data parallelism wraps the model, from the job's degrees — the
// C++ counterpart of torchtitan's parallelize_llama (data-parallel part).
#include "titan/models/llama3/parallelize.hpp"

#include "titan/config/job_config.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/parallel/data_parallel.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"

#include <optional>

#include "titan/dist/world.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/parallel/tensor_parallel/loss_parallel.hpp"
#include "titan/util/error.hpp"

namespace titan::models::llama3 {
namespace {

at::ScalarType dtype_named(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  throw Error("[training] mixed precision dtype '" + name + "' is not float32 or bfloat16");
}

// FSDP per transformer block, then the root, as torchtitan's apply_fsdp:
// each block is one all-gather / reduce-scatter unit, the root unit takes
// the embeddings, final norm and output projection.
void apply_fsdp(Transformer& model, const dist::DeviceMesh& mesh, const config::JobConfig& cfg, ParallelizedModel& r) {
  fsdp::FullyShardOptions opts;
  opts.mp_policy.param_dtype = dtype_named(cfg.training.mixed_precision_param);
  opts.mp_policy.reduce_dtype = dtype_named(cfg.training.mixed_precision_reduce);
  if (cfg.training.enable_cpu_offload) opts.offload_policy = fsdp::CPUOffloadPolicy{};
  const std::string& reshard = cfg.training.fsdp_reshard_after_forward;
  const auto blocks = model->blocks();
  for (size_t i = 0; i < blocks.size(); ++i) {
    // "default": the last block's backward runs first, right after forward,
    // so freeing its weights only to gather them again at once is waste.
    opts.reshard_after_forward = reshard == "always" || (reshard == "default" && i + 1 < blocks.size());
    fsdp::fully_shard(*blocks[i], mesh, opts);
  }
  opts.reshard_after_forward = reshard == "always" || reshard == "default";
  fsdp::fully_shard(*model, mesh, opts);
  r.full_state_dict = [model]() mutable { return fsdp::full_state_dict(*model); };
  r.description = std::string("FSDP per block + root, ") + cfg.training.mixed_precision_param + " params, " +
                  cfg.training.mixed_precision_reduce + " reduce" +
                  (cfg.training.enable_cpu_offload ? ", CPU offload" : "");
}

// DDP over dp_replicate: one all-reduce per 25 MiB bucket, launched from
// backward. Gradient accumulation holds a no_sync guard for every
// micro-batch but the last, so only the accumulated sum travels.
void apply_ddp(Transformer& model, const dist::DeviceMesh& mesh, ParallelizedModel& r) {
  struct State {
    std::shared_ptr<parallel::DataParallel> ddp;
    std::optional<parallel::NoSyncGuard> no_sync;
  };
  auto state = std::make_shared<State>();
  state->ddp = parallel::replicate(*model, mesh.group("dp_replicate"));
  r.set_gradient_sync = [state](bool sync) {
    if (sync) state->no_sync.reset();
    else if (!state->no_sync) state->no_sync.emplace(*state->ddp);
  };
  r.finish_gradient_sync = [state] { state->ddp->finish_gradient_sync(); };
  r.description = "DDP, " + std::to_string(state->ddp->buckets().size()) + " gradient bucket(s) of <= 25 MiB";
  r.state = state;
}

// TP first, as torchtitan: FSDP then shards the TP-local weights over
// dp_shard (2-D FSDP x TP), and the tp group is the mesh's innermost dim
// (neighbouring ranks: one node on GPUs).
std::string apply_tensor_parallel(Transformer& model, const dist::DeviceMesh& mesh, const config::JobConfig& cfg,
                                  ParallelizedModel& r) {
  const TpOptions opts = tp_options(cfg);
  const int64_t tp = mesh.size("tp");
  check_tp_job(model->args(), tp, cfg.training.seq_len, opts);
  const dist::DeviceMesh tp_mesh = mesh["tp"];
  std::string description = apply_tp(model, tp_mesh, opts);
  if (opts.loss_parallel) {
    auto group = mesh.group("tp");
    const int64_t offset = shard_size_and_offset(model->args().vocab_size, tp, tp_mesh.coordinate()[0]).second;
    r.loss_fn = [group, offset](const at::Tensor& logits, const at::Tensor& labels) {
      return tp::vocab_parallel_cross_entropy(logits, labels, *group, offset);
    };
  }
  return description;
}

}  // namespace

TpOptions tp_options(const config::JobConfig& cfg) {
  TpOptions o;
  o.sequence_parallel = cfg.training.enable_sequence_parallel;
  o.loss_parallel = cfg.training.enable_loss_parallel;
  o.async_tp = cfg.training.enable_async_tensor_parallel;
  return o;
}

ParallelizedModel parallelize_llama(Transformer& model, const parallel::ParallelDims& dims, dist::DeviceMesh* mesh,
                                    const config::JobConfig& cfg) {
  ParallelizedModel r;
  // The plain model's weights are already whole: a detached copy of each.
  r.full_state_dict = [model]() mutable {
    std::map<std::string, at::Tensor> out;
    for (const auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
    return out;
  };
  TITAN_CHECK(!dims.pp_enabled() && !dims.cp_enabled(),
              "parallelize_llama: ", dims.describe(), " asks for pipeline or context parallelism, not built yet");
  std::string tp_description;
  if (dims.tp_enabled()) {
    TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
    tp_description = apply_tensor_parallel(model, *mesh, cfg, r);
  }
  if (dims.fsdp_enabled()) {
    TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
    // HSDP: replicate over dp_replicate, shard within dp_shard (a 2-D mesh,
    // replicate first); FSDP: the 1-D dp_shard mesh.
    const dist::DeviceMesh dp_mesh = dims.dp_replicate_enabled()
                                         ? (*mesh)[std::vector<std::string>{"dp_replicate", "dp_shard"}]
                                         : (*mesh)["dp_shard"];
    apply_fsdp(model, dp_mesh, cfg, r);
    // Gradients are shards over dp_shard (and equal across replicas), so
    // the global norm sums squares over the dp_shard group only.
    r.grad_shard_groups = {mesh->group("dp_shard").get()};
  } else if (dims.ddp_enabled()) {
    TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
    apply_ddp(model, *mesh, r);
  }
  r.params = model->parameters();
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
    auto gather_dp = r.full_state_dict;
    r.full_state_dict = [model, gather_dp, placed]() mutable {
      return tp::gather_tp_tensors(gather_dp(), placed, dist::world().device());
    };
  }
  return r;
}

}  // namespace titan::models::llama3
