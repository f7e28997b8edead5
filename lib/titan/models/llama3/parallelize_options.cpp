#include "titan/models/llama3/parallelize_options.hpp"

#include "titan/config/job_config.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/parallel/pipeline/schedule.hpp"
#include "titan/util/error.hpp"

namespace titan::models::llama3 {
namespace {

at::ScalarType dtype_named(const std::string& key, const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  throw Error("[training] " + key + " = \"" + name + "\" is not float32 or bfloat16");
}

ReshardAfterForward reshard_named(const std::string& name) {
  if (name == "default") return ReshardAfterForward::Default;
  if (name == "always") return ReshardAfterForward::Always;
  if (name == "never") return ReshardAfterForward::Never;
  throw Error("[training] fsdp_reshard_after_forward = \"" + name + "\" is not \"default\", \"always\" or \"never\"");
}

}  // namespace

std::string config_dtype_name(at::ScalarType dtype) { return dtype == at::kBFloat16 ? "bfloat16" : "float32"; }

ParallelizeOptions parallelize_options(const config::JobConfig& cfg, const parallel::ParallelDims& dims,
                                       const ModelArgs& args, int64_t local_batch) {
  ParallelizeOptions o;
  const config::TrainingSection& t = cfg.training;
  o.seq_len = t.seq_len;

  o.param_storage_dtype = dtype_named("dtype", t.dtype);
  o.fsdp.param_dtype = dtype_named("mixed_precision_param", t.mixed_precision_param);
  o.fsdp.reduce_dtype = dtype_named("mixed_precision_reduce", t.mixed_precision_reduce);
  o.fsdp.cpu_offload = t.enable_cpu_offload;
  o.fsdp.reshard = reshard_named(t.fsdp_reshard_after_forward);
  o.fsdp.reduce_scatter_per_microbatch = t.fsdp_reduce_scatter_per_microbatch;

  o.tp.sequence_parallel = t.enable_sequence_parallel;
  o.tp.loss_parallel = t.enable_loss_parallel;
  o.tp.async_tp = t.enable_async_tensor_parallel;
  if (dims.tp_enabled()) check_tp_job(args, dims.tp, t.seq_len, o.tp);

  // Context parallelism: the names, and a sequence that the load
  // balancer's chunks (2·cp for headtail) and sequence parallelism's tp
  // split both divide.
  o.cp_load_balance = cp::parse_load_balance(t.context_parallel_load_balancer);
  o.cp_rotate = cp::parse_rotate_method(t.context_parallel_rotate_method);
  if (dims.cp_enabled()) {
    cp::SequenceLayout{dims.cp, o.cp_load_balance}.check_seq_len(t.seq_len, "[training] seq_len");
    const int64_t local = t.seq_len / dims.cp;
    TITAN_CHECK(!dims.tp_enabled() || !o.tp.sequence_parallel || local % dims.tp == 0,
                "[training] seq_len / context_parallel_degree = ", local, " tokens per cp rank does not divide by ",
                "tensor_parallel_degree = ", dims.tp, " for sequence parallelism");
  }

  const config::ActivationCheckpointSection& a = cfg.activation_checkpoint;
  o.ac.policy = ac::AcPolicy::from_config(a.mode, a.selective_ac_option);
  o.ac.blocks = o.ac.policy.blocks(args.n_layers);
  o.ac.force_recompute_mm_shapes_by_fqns = a.per_op_sac_force_recompute_mm_shapes_by_fqns;

  o.float8.enable = cfg.float8.enable_float8_linear;
  o.float8.filter_fqns = cfg.float8.filter_fqns;
  o.float8.emulate = cfg.float8.emulate;
  if (o.float8.enable) o.float8.recipe = float8::recipe_from_name(cfg.float8.recipe_name);
  TITAN_CHECK(!o.float8.enable || o.float8.recipe != float8::Recipe::Rowwise || !dims.tp_enabled() ||
                  !t.enable_async_tensor_parallel,
              "[float8] recipe_name = \"rowwise\" inside async tensor parallelism is not supported (the ring's "
              "chunked GEMMs take tensorwise scales): use \"tensorwise\" there, or synchronous TP with rowwise");
  // As torchtitan: the float8 all-gather only where FSDP shards, and the
  // precomputed scales only with it.
  o.float8.fsdp_float8_all_gather = cfg.float8.enable_fsdp_float8_all_gather && dims.fsdp_enabled();
  o.float8.precompute_scales =
      o.float8.fsdp_float8_all_gather && cfg.float8.precompute_float8_dynamic_scale_for_fsdp;

  if (dims.pp_enabled()) {
    o.pipeline = plan_pipeline(cfg, args.n_layers, local_batch);
    o.pp_microbatch_size = cfg.experimental.pipeline_parallel_microbatch_size;
    // Activation checkpointing goes with every schedule: under a
    // zero-bubble one a checkpointed block's recompute is split too, its
    // weights' gradients left for the W step (ops/input_gradient_split.hpp).
  }
  return o;
}

}  // namespace titan::models::llama3
