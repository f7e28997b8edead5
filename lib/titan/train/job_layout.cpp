#include "titan/train/job_layout.hpp"

#include "titan/config/supported.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/train/device.hpp"
#include "titan/util/error.hpp"

namespace titan::train {

namespace {

// plan_job_layout's checks and plan, whatever named the world size.
JobLayout plan_on_world(const config::JobConfig& cfg, int64_t world_size, c10::Device device,
                        const std::optional<models::llama3::ModelArgs>& model_args,
                        std::optional<int64_t> batch_dp_degree) {
  // Cheapest first: a bad key fails before any shape is worked out.
  config::check_supported(cfg, world_size);
  if (cfg.checkpoint.create_seed_checkpoint) {
    TITAN_CHECK(cfg.checkpoint.enable_checkpoint,
                "[checkpoint] create_seed_checkpoint needs [checkpoint] enable_checkpoint = true");
    TITAN_CHECK(world_size == 1, "[checkpoint] create_seed_checkpoint runs on one process (the seed holds whole, "
                "unsharded weights), not under WORLD_SIZE=", world_size);
  }
  models::llama3::JobLayout layout = models::llama3::plan_layout(cfg, world_size, device, model_args, batch_dp_degree);
  // Said before any model is built: titan's flash kernels exist for the CPU
  // and, in CUDA builds, for CUDA GPUs.
  const std::string& attention = layout.args.attn_type;
#ifndef TITAN_HAS_CUDA
  TITAN_CHECK(attention != "flash" || device.is_cpu(), "[model] attn_type = \"flash\" runs on the CPU in ",
              "this build (built without CUDA), but training.device is ", device.str());
#endif
  TITAN_CHECK(attention != "flash" || device.is_cpu() || device.is_cuda(),
              "[model] attn_type = \"flash\" runs on the CPU or a CUDA GPU, not on ", device.str());
  return layout;
}

}  // namespace

JobLayout plan_job_layout(const config::JobConfig& cfg, int64_t world_size, c10::Device device,
                          const std::optional<models::llama3::ModelArgs>& model_args,
                          std::optional<int64_t> batch_dp_degree) {
  if (!plays_fake_rank(cfg) || world_size != cfg.comm.fake_world_size || world_size == 1)
    return plan_on_world(cfg, world_size, device, model_args, batch_dp_degree);
  // A fake rank's world is a key of the config: errors about it name the key.
  try {
    return plan_on_world(cfg, world_size, device, model_args, batch_dp_degree);
  } catch (const Error& e) {
    throw Error("[comm] fake_world_size = " + std::to_string(world_size) + ": " + e.what());
  }
}

bool plays_fake_rank(const config::JobConfig& cfg) { return cfg.comm.mode == "fake_backend"; }

dist::LaunchEnv job_launch_env(const config::JobConfig& cfg, const dist::LaunchEnv& launched) {
  if (!plays_fake_rank(cfg)) return launched;
  return dist::fake_launch_env(launched, static_cast<int>(cfg.comm.fake_rank),
                               static_cast<int>(cfg.comm.fake_world_size));
}

JobLayout check_job_before_launch(const config::JobConfig& cfg, int world_size) {
  dist::LaunchEnv env;
  env.world_size = world_size;
  env.local_world_size = world_size;
  TITAN_CHECK(!plays_fake_rank(cfg) || world_size == 1, "[comm] mode = \"fake_backend\" plays one rank in one ",
              "process, not --nproc ", world_size, ": give the job's size as [comm] fake_world_size and the rank as ",
              "[comm] fake_rank");
  env = job_launch_env(cfg, env);
  return plan_job_layout(cfg, env.world_size,
                         resolve_device(cfg.training.device, env, static_cast<int>(cfg.comm.ranks_per_device)));
}

}  // namespace titan::train
