#include "titan/train/job_layout.hpp"

#include "titan/config/supported.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/train/builders.hpp"
#include "titan/train/device.hpp"
#include "titan/util/error.hpp"

namespace titan::train {

JobLayout plan_job_layout(const config::JobConfig& cfg, int64_t world_size, c10::Device device,
                          const std::optional<models::llama3::ModelArgs>& model_args,
                          std::optional<int64_t> batch_dp_degree) {
  // Cheapest first: a bad key fails before any shape is worked out.
  config::check_supported(cfg, world_size);
  JobLayout out;
  out.dims = parallel::ParallelDims::from_config(cfg, world_size);
  if (cfg.checkpoint.create_seed_checkpoint) {
    TITAN_CHECK(cfg.checkpoint.enable_checkpoint,
                "[checkpoint] create_seed_checkpoint needs [checkpoint] enable_checkpoint = true");
    TITAN_CHECK(world_size == 1, "[checkpoint] create_seed_checkpoint runs on one process (the seed holds whole, "
                "unsharded weights), not under WORLD_SIZE=", world_size);
  }
  out.batches = config::plan_batches(cfg, batch_dp_degree.value_or(out.dims.dp_degree()));
  out.args = build_model_args(cfg, model_args, device);
  out.parallelize = models::llama3::parallelize_options(cfg, out.dims, out.args, out.batches.local_batch);
  return out;
}

JobLayout check_job_before_launch(const config::JobConfig& cfg, int world_size) {
  dist::LaunchEnv env;
  env.world_size = world_size;
  env.local_world_size = world_size;
  return plan_job_layout(cfg, world_size, resolve_device(cfg.training.device, env));
}

}  // namespace titan::train
