// Checkpoints of parallel jobs (np2, np4): a resumed run equals the
// uninterrupted one bitwise under FSDP, HSDP, TP x FSDP and PP; a
// checkpoint saved under one layout loads into others (TP x FSDP, HSDP,
// one process) with the same weights and continues with the same losses;
// and PyTorch's own DCP loader reads what the ranks wrote.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "checkpoint_dist_util.hpp"
#include "../train/train_test_util.hpp"
#include "support/dist_test.hpp"
#include "support/run_command.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/checkpoint/sharded_state.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/optim/adam_state.hpp"
#include "titan/train/trainer.hpp"

namespace {

namespace ck = titan::checkpoint;
using namespace titan::testing::checkpoint_dist;

// Saves at 3 and 6, forgets step 6 (as if the job had died after step 3's
// save), resumes: steps 4-6 must be bitwise those of the whole run.
TrainRun expect_resume_is_bitwise(const JobConfig& cfg, const std::string& what, bool tied = false) {
  SCOPED_TRACE(what);
  const TrainRun whole = train(cfg, quiet(cfg, tied));
  const std::string folder = cfg.job.dump_folder + "/checkpoint";
  if (titan::testing::world().rank() == 0) titan::files::remove_all(folder + "/step-6");
  world_group().barrier();
  const TrainRun resumed = train(cfg, quiet(cfg, tied));
  EXPECT_EQ(resumed.start_step, 3);
  EXPECT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < resumed.losses.size() && i + 3 < whole.losses.size(); ++i) {
    EXPECT_EQ(resumed.losses[i], whole.losses[i + 3]) << "step " << i + 4;
    EXPECT_EQ(resumed.grad_norms[i], whole.grad_norms[i + 3]) << "step " << i + 4;
  }
  for (const auto& [name, w] : whole.weights) EXPECT_TRUE(at::equal(resumed.weights.at(name), w)) << name;
  if (titan::testing::world().rank() == 0)
    std::printf("[%s] resumed at step 3: steps 4-6 and the final weights bitwise equal to the whole run\n",
                what.c_str());
  // And the layout's checkpoint loads into one process (any layout into
  // any other): the same weights, gathered by nobody.
  if (titan::testing::world().rank() == 0) {
    JobConfig one = cfg;
    one.training.tensor_parallel_degree = 1;
    one.training.data_parallel_replicate_degree = 1;
    one.training.data_parallel_shard_degree = -1;
    one.training.enable_loss_parallel = false;
    one.experimental.pipeline_parallel_degree = 1;
    one.training.context_parallel_degree = 1;
    TrainerOptions single = quiet(cfg, tied);
    single.single_process = titan::train::DataParallelReads{};
    Trainer t(one, single);
    EXPECT_EQ(t.step(), 6);
    const auto weights = t.full_state_dict();
    for (const auto& [name, w] : whole.weights) EXPECT_TRUE(at::equal(weights.at(name), w)) << name;
    std::printf("[%s] its checkpoint loaded into one process: weights bitwise equal\n", what.c_str());
  }
  world_group().barrier();
  return whole;
}

TEST(CheckpointDist, FsdpResumeIsBitwiseAndTorchReadsIt) {
  SharedDir dir("ckpt_fsdp");
  const JobConfig cfg = base(dir.path());
  expect_resume_is_bitwise(cfg, "FSDP " + std::to_string(titan::testing::world().size()));
  // step-6 again (the resumed run saved it): torch's DCP loader assembles
  // every tensor from the ranks' boxes.
  Trainer t(cfg, quiet(cfg));
  ASSERT_EQ(t.step(), 6);
  const auto weights = t.full_state_dict();
  if (titan::testing::world().rank() == 0) {
    std::vector<std::pair<std::string, at::Tensor>> list(weights.begin(), weights.end());
    const std::string expected = dir.path() + "/expected.safetensors";
    ck::save_safetensors(expected, list);
    const char* py = std::getenv("TITAN_PYTHON");
    auto r = titan::testing::run_command(std::string(py && *py ? py : "python3") + " " +
                                         titan::testing::source_path("tests/checkpoint/dcp_read.py") + " " +
                                         dir.path() + "/checkpoint/step-6 " + expected);
    std::printf("%s", r.output.c_str());
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

TEST(CheckpointDist, HsdpResumeIsBitwise) {
  if (titan::testing::world().size() != 4) GTEST_SKIP() << "HSDP 2x2 needs 4 ranks";
  SharedDir dir("ckpt_hsdp");
  JobConfig cfg = base(dir.path());
  cfg.training.data_parallel_replicate_degree = 2;
  expect_resume_is_bitwise(cfg, "HSDP 2x2");
}

TEST(CheckpointDist, TensorParallelResumeIsBitwise) {
  const int n = titan::testing::world().size();
  SharedDir dir("ckpt_tp");
  JobConfig cfg = base(dir.path());
  cfg.training.tensor_parallel_degree = 2;
  cfg.training.enable_loss_parallel = true;
  expect_resume_is_bitwise(cfg, n == 4 ? "TP 2 x FSDP 2" : "TP 2");
}

// Tied embeddings (the 1B/3B layout) under TP (x FSDP on 4 ranks): one
// tensor, tok_embeddings.weight, in the checkpoint; resume and loading into
// one process as for the untied model.
TEST(CheckpointDist, TiedEmbeddingsResumeIsBitwise) {
  const int n = titan::testing::world().size();
  SharedDir dir("ckpt_tied");
  JobConfig cfg = base(dir.path());
  cfg.training.tensor_parallel_degree = 2;
  cfg.training.enable_loss_parallel = true;
  const TrainRun whole = expect_resume_is_bitwise(cfg, n == 4 ? "tied, TP 2 x FSDP 2" : "tied, TP 2", /*tied=*/true);
  EXPECT_EQ(whole.weights.count("output.weight"), 0u);
  EXPECT_EQ(whole.weights.count("tok_embeddings.weight"), 1u);
  if (titan::testing::world().rank() == 0) {
    const auto saved = ck::read_model_tensors(dir.path() + "/checkpoint/step-6");
    EXPECT_EQ(saved.count("output.weight"), 0u);
    ASSERT_EQ(saved.count("tok_embeddings.weight"), 1u);
    EXPECT_TRUE(at::equal(saved.at("tok_embeddings.weight"), whole.weights.at("tok_embeddings.weight")));
    std::printf("[tied] step-6 holds %zu tensors, tok_embeddings.weight once and no output.weight\n", saved.size());
  }
  world_group().barrier();
}

TEST(CheckpointDist, PipelineResumeIsBitwise) {
  const int n = titan::testing::world().size();
  SharedDir dir("ckpt_pp");
  JobConfig cfg = base(dir.path());
  cfg.training.batch_size = 4;
  cfg.experimental.pipeline_parallel_degree = 2;
  // Two stages per rank on 2 ranks (each rank saves two model parts).
  cfg.experimental.pipeline_parallel_schedule = n == 2 ? "Interleaved1F1B" : "1F1B";
  expect_resume_is_bitwise(cfg, n == 2 ? "PP 2 (Interleaved1F1B, 2 stages per rank)" : "PP 2 x FSDP 2 (1F1B)");
}

// Under context parallelism FSDP shards over dp_shard x cp: every cp rank
// writes its own boxes (none is a replica), and one process reads them back.
TEST(CheckpointDist, ContextParallelResumeIsBitwise) {
  const int n = titan::testing::world().size();
  SharedDir dir("ckpt_cp");
  JobConfig cfg = base(dir.path());
  cfg.training.context_parallel_degree = 2;
  cfg.training.context_parallel_rotate_method = "alltoall";
  expect_resume_is_bitwise(cfg, n == 4 ? "FSDP 2 x CP 2" : "CP 2");
}

// Weights (and their Adam moments) after loading `saved` into the layout
// of `cfg`, compared with the gathered weights of the saving run.
// Collective over `group` (null: this rank alone).
void expect_loads_into(const JobConfig& cfg, const TrainRun& saved, const std::string& what, TrainerOptions o,
                       const titan::dist::ProcessGroup* group) {
  SCOPED_TRACE(what);
  Trainer t(cfg, o);
  ASSERT_EQ(t.step(), 6);
  const auto weights = t.full_state_dict();
  for (const auto& [name, w] : saved.weights) EXPECT_TRUE(at::equal(weights.at(name), w)) << name;
  // The moments the trainer loaded are the saved boxes this layout holds
  // (read again into zeroed copies and compared).
  const ck::ShardedState loaded =
      ck::optimizer_shards(t.optimizer(), ck::model_shards({t.model().ptr().get()}, nullptr));
  ck::ShardedState again = loaded;
  for (ck::TensorShard& s : again) s.local = at::zeros_like(s.local);
  ck::load_shards(ck::open_checkpoint(cfg.job.dump_folder + "/checkpoint/step-6"), again, group);
  for (size_t i = 0; i < loaded.size(); ++i) EXPECT_TRUE(at::equal(loaded[i].local, again[i].local)) << loaded[i].fqn;
  if (titan::testing::world().rank() == 0)
    std::printf("[%s] weights and %zu moment boxes bitwise equal to the saved ones\n", what.c_str(), loaded.size());
}

TEST(CheckpointDist, ReshardsIntoOtherLayouts) {
  if (titan::testing::world().size() != 4) GTEST_SKIP() << "resharding FSDP 4 needs 4 ranks";
  SharedDir dir("ckpt_reshard");
  JobConfig fsdp = base(dir.path());
  // TP needs the model with 8 heads: save with that model under FSDP 4.
  fsdp.training.tensor_parallel_degree = 1;
  TrainerOptions o = quiet(fsdp);
  o.model_args->n_heads = 8, o.model_args->n_kv_heads = 4;
  const TrainRun saved = train(fsdp, o);

  JobConfig tp = fsdp;
  tp.training.tensor_parallel_degree = 2;
  tp.training.enable_loss_parallel = true;
  expect_loads_into(tp, saved, "FSDP 4 -> TP 2 x FSDP 2", o, &world_group());
  JobConfig hsdp = fsdp;
  hsdp.training.data_parallel_replicate_degree = 2;
  expect_loads_into(hsdp, saved, "FSDP 4 -> HSDP 2x2", o, &world_group());
  TrainerOptions single = o;
  single.single_process = titan::train::DataParallelReads{};
  if (titan::testing::world().rank() == 0) expect_loads_into(fsdp, saved, "FSDP 4 -> one process", single, nullptr);
  world_group().barrier();
}

}  // namespace
