// The job layout (models/llama3/job_layout.hpp): one reading of a config
// that the trainer, the estimate and the communication count share, and
// the rules derived from it, each stated once.
#include <gtest/gtest.h>

#include <string>

#include "titan/config/job_config.hpp"
#include "titan/models/llama3/job_layout.hpp"
#include "titan/util/error.hpp"

namespace {

using titan::models::llama3::FsdpJobOptions;
using titan::models::llama3::ReshardAfterForward;

// torchtitan's reshard_after_forward rule as parallelize_llama applies it:
// "default" frees every block but the model's last, none under PP;
// "always" and "never" as they say, the root as a block that is not last.
TEST(JobLayout, ReshardAfterForwardRule) {
  FsdpJobOptions o;
  struct Row {
    ReshardAfterForward policy;
    bool last, pipelined, expected;
  };
  const Row rows[] = {
      {ReshardAfterForward::Default, false, false, true}, {ReshardAfterForward::Default, true, false, false},
      {ReshardAfterForward::Default, false, true, false}, {ReshardAfterForward::Default, true, true, false},
      {ReshardAfterForward::Always, false, false, true},  {ReshardAfterForward::Always, true, false, true},
      {ReshardAfterForward::Always, false, true, true},   {ReshardAfterForward::Always, true, true, true},
      {ReshardAfterForward::Never, false, false, false},  {ReshardAfterForward::Never, true, false, false},
      {ReshardAfterForward::Never, false, true, false},   {ReshardAfterForward::Never, true, true, false},
  };
  for (const Row& r : rows) {
    o.reshard = r.policy;
    EXPECT_EQ(o.block_reshards_after_forward(r.last, r.pipelined), r.expected)
        << static_cast<int>(r.policy) << " last " << r.last << " pipelined " << r.pipelined;
    EXPECT_EQ(o.root_reshards_after_forward(r.pipelined), o.block_reshards_after_forward(false, r.pipelined));
  }
}

// What the layout reads from the config, as the trainer will use it.
TEST(JobLayout, ReadsTheConfigOnce) {
  titan::config::JobConfig cfg;
  cfg.training.seq_len = 64;
  cfg.training.batch_size = 4;
  cfg.training.fsdp_reshard_after_forward = "always";
  cfg.activation_checkpoint.mode = "selective";
  cfg.activation_checkpoint.selective_ac_option = "2";
  cfg.optimizer.early_step_in_backward = true;
  const auto layout = titan::models::llama3::plan_layout(cfg, 2, c10::Device(c10::kCPU));
  EXPECT_EQ(layout.dims.dp_shard, 2);
  EXPECT_EQ(layout.batches.local_batch, 4);
  EXPECT_EQ(layout.microbatch_sequences(), 4);
  EXPECT_FALSE(layout.pipelined());
  EXPECT_EQ(layout.args.max_seq_len, 64);
  EXPECT_EQ(layout.parallelize.fsdp.reshard, ReshardAfterForward::Always);
  EXPECT_EQ(layout.parallelize.ac.policy.mode, titan::ac::AcMode::SelectiveEveryN);
  EXPECT_EQ(layout.parallelize.ac.blocks.size(), static_cast<size_t>(layout.args.n_layers));
  EXPECT_FALSE(layout.parallelize.ac.blocks[0]);
  EXPECT_TRUE(layout.parallelize.ac.blocks[1]);
  EXPECT_TRUE(layout.step_in_backward);
}

// The optimizer step in backward is a layout rule: refused with PP and
// DDP, in one line naming the key.
TEST(JobLayout, StepInBackwardIsRefusedWithDdpAndPp) {
  titan::config::JobConfig cfg;
  cfg.training.seq_len = 64;
  cfg.optimizer.early_step_in_backward = true;
  cfg.training.data_parallel_replicate_degree = 2;
  cfg.training.data_parallel_shard_degree = 1;
  auto refusal = [&] {
    try {
      titan::models::llama3::plan_layout(cfg, 2, c10::Device(c10::kCPU));
    } catch (const titan::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::string what = refusal();
  EXPECT_NE(what.find("[optimizer] early_step_in_backward with DDP"), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  cfg.training.data_parallel_replicate_degree = 1;
  cfg.experimental.pipeline_parallel_degree = 2;
  what = refusal();
  EXPECT_NE(what.find("[optimizer] early_step_in_backward with pipeline parallelism"), std::string::npos) << what;
  cfg.optimizer.early_step_in_backward = false;
  EXPECT_EQ(refusal(), "accepted") << "the same pipeline layout without the step in backward";
}

}  // namespace
