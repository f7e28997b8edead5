#include "titan/models/llama3/job_layout.hpp"

#include "titan/util/error.hpp"

namespace titan::models::llama3 {

ModelArgs job_model_args(const config::JobConfig& cfg, const std::optional<ModelArgs>& given) {
  ModelArgs args = given ? *given : flavor_args(cfg.model);
  args.max_seq_len = cfg.training.seq_len;
  args.attn_type = cfg.model.attn_type;
  args.fused_kernels = cfg.model.fused_kernels;
  // block_causal from the config, or from a flavor that is block-causal by
  // itself (torchtitan's debugmodel_flex_attn, 8B_varlen, ...).
  if (cfg.model.attn_mask_type == "block_causal") args.attn_mask_type = "block_causal";
  args.validate();
  return args;
}

JobLayout plan_layout(const config::JobConfig& cfg, int64_t world_size, c10::Device device,
                      const std::optional<ModelArgs>& model_args, std::optional<int64_t> batch_dp_degree) {
  JobLayout out;
  out.device = device;
  out.dims = parallel::ParallelDims::from_config(cfg, world_size);
  out.batches = config::plan_batches(cfg, batch_dp_degree.value_or(out.dims.dp_degree()));
  out.args = job_model_args(cfg, model_args);
  out.parallelize = parallelize_options(cfg, out.dims, out.args, out.batches.local_batch);
  // The optimizer's step in backward hangs on the moment a gradient is
  // final. A pipeline's split backward (I, then W) and DDP's bucket
  // all-reduce finish a gradient after that moment; torchtitan refuses PP too.
  out.step_in_backward = cfg.optimizer.early_step_in_backward;
  if (out.step_in_backward) {
    TITAN_CHECK(!out.dims.pp_enabled(), "[optimizer] early_step_in_backward with pipeline parallelism is not "
                "supported (torchtitan refuses it too): turn one of them off");
    TITAN_CHECK(!out.dims.ddp_enabled(), "[optimizer] early_step_in_backward with DDP is not supported: a gradient "
                "is final only when its bucket's all-reduce ends, after its parameter's backward; shard instead "
                "([parallelism] data_parallel_shard_degree) or turn it off");
  }
  return out;
}

}  // namespace titan::models::llama3
