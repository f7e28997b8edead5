// The trainer with [checkpoint] on, one process: resuming equals the
// uninterrupted run bitwise (fp32, CPU, deterministic), in every async
// mode; weights-only exports and seed checkpoints; and bad checkpoints or
// a failing disk give one clear line with the earlier checkpoints intact.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "../train/train_test_util.hpp"
#include "support/error_of.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/file_io.hpp"
#include "titan/checkpoint/manager.hpp"
#include "titan/config/validate.hpp"
#include "titan/util/files.hpp"
#include "titan/optim/adam_state.hpp"
#include "titan/train/trainer.hpp"

namespace {

namespace ck = titan::checkpoint;
using titan::config::JobConfig;
using titan::testing::ScratchDir;
using titan::train::Trainer;
using titan::train::TrainerOptions;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

struct TrainRun {
  std::vector<double> losses, grad_norms;
  std::map<std::string, at::Tensor> weights;
  std::vector<at::Tensor> exp_avg_sq;  // the optimizer's second moments, parameter order
  int64_t start_step = 0;
};

TrainerOptions quiet() {
  TrainerOptions o;
  o.model_args = titan::testing::tiny_model();
  o.console = false;
  o.handle_signals = false;
  o.peak_flops = 0;
  return o;
}

TrainRun train(const JobConfig& cfg) {
  TrainerOptions o = quiet();
  TrainRun run;
  o.on_step = [&](const titan::train::StepResult& r) {
    run.losses.push_back(r.loss);
    run.grad_norms.push_back(r.grad_norm);
  };
  Trainer t(cfg, o);
  run.start_step = t.step();
  t.train();
  run.weights = t.full_state_dict();
  for (const auto& p : t.trained_parameters())
    run.exp_avg_sq.push_back(titan::optim::adam_state(t.optimizer(), p).exp_avg_sq.clone());
  return run;
}

JobConfig checkpointed(const std::string& dump, int64_t steps = 6, int64_t interval = 3) {
  JobConfig c = titan::testing::tiny_config(dump, steps);
  c.checkpoint.enable_checkpoint = true;
  c.checkpoint.interval = interval;
  return c;
}

using titan::testing::error_of;

void expect_bitwise_equal(const TrainRun& resumed, const TrainRun& whole, size_t from_step) {
  ASSERT_EQ(resumed.losses.size() + from_step, whole.losses.size());
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    EXPECT_EQ(resumed.losses[i], whole.losses[from_step + i]) << "step " << from_step + i + 1;
    EXPECT_EQ(resumed.grad_norms[i], whole.grad_norms[from_step + i]) << "step " << from_step + i + 1;
  }
  ASSERT_EQ(resumed.weights.size(), whole.weights.size());
  for (const auto& [name, w] : whole.weights) EXPECT_TRUE(at::equal(resumed.weights.at(name), w)) << name;
  ASSERT_EQ(resumed.exp_avg_sq.size(), whole.exp_avg_sq.size());
  for (size_t i = 0; i < whole.exp_avg_sq.size(); ++i)
    EXPECT_TRUE(at::equal(resumed.exp_avg_sq[i], whole.exp_avg_sq[i])) << "parameter " << i;
}

class ResumeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeTest, ResumedRunEqualsTheUninterruptedOneBitwise) {
  ScratchDir dir("ckpt_resume");
  JobConfig plain = titan::testing::tiny_config(dir.path() + "/plain", 6);
  plain.training.deterministic = true;
  const TrainRun uninterrupted = train(plain);

  JobConfig cfg = checkpointed(dir.path() + "/ck");
  cfg.training.deterministic = true;
  cfg.checkpoint.async_mode = GetParam();
  const TrainRun whole = train(cfg);
  // Saving does not disturb training (the async copy, the background thread).
  expect_bitwise_equal(whole, uninterrupted, 0);
  const std::string folder = cfg.job.dump_folder + "/checkpoint";
  EXPECT_EQ(ck::list_checkpoints(folder), (std::vector<int64_t>{3, 6}));

  // As if the job died after step 3's save: the restarted job resumes there.
  titan::files::remove_all(folder + "/step-6");
  const TrainRun resumed = train(cfg);
  EXPECT_EQ(resumed.start_step, 3);
  expect_bitwise_equal(resumed, whole, 3);
  std::printf("[%s] resumed steps 4-6: losses, grad norms, weights and Adam moments bitwise equal\n",
              GetParam().c_str());
}

INSTANTIATE_TEST_SUITE_P(AsyncModes, ResumeTest, ::testing::Values("disabled", "async", "async_with_pinned_mem"));

TEST(CheckpointTrainer, KeepsTheLatestK) {
  ScratchDir dir("ckpt_keep");
  JobConfig cfg = checkpointed(dir.path(), 8, 2);
  cfg.checkpoint.keep_latest_k = 2;
  train(cfg);
  EXPECT_EQ(ck::list_checkpoints(dir.path() + "/checkpoint"), (std::vector<int64_t>{6, 8}));
  // A finished job restarted does nothing more (and says where it resumed).
  const TrainRun again = train(cfg);
  EXPECT_EQ(again.start_step, 8);
  EXPECT_TRUE(again.losses.empty());
}

TEST(CheckpointTrainer, AnAbsoluteFolderIsUsedAsItIs) {
  ScratchDir dir("ckpt_abs");
  JobConfig cfg = checkpointed(dir.path() + "/dump", 3, 3);
  cfg.checkpoint.folder = dir.path() + "/elsewhere";  // os.path.join semantics, as torchtitan
  train(cfg);
  EXPECT_EQ(ck::list_checkpoints(dir.path() + "/elsewhere"), (std::vector<int64_t>{3}));
  EXPECT_EQ(train(cfg).start_step, 3);
}

TEST(CheckpointTrainer, LoadStepChoosesAnOlderCheckpoint) {
  ScratchDir dir("ckpt_load_step");
  JobConfig cfg = checkpointed(dir.path());
  const TrainRun whole = train(cfg);
  cfg.checkpoint.load_step = 3;
  const TrainRun resumed = train(cfg);
  EXPECT_EQ(resumed.start_step, 3);
  expect_bitwise_equal(resumed, whole, 3);
  cfg.checkpoint.load_step = 4;
  EXPECT_HAS(error_of([&] { train(cfg); }), "[checkpoint] load_step = 4: " + cfg.job.dump_folder +
                                                "/checkpoint has no complete checkpoint step-4");
}

TEST(CheckpointTrainer, FirstStepCheckpointAndLoadOnly) {
  ScratchDir dir("ckpt_first_step");
  JobConfig cfg = checkpointed(dir.path());
  cfg.checkpoint.enable_first_step_checkpoint = true;
  const TrainRun whole = train(cfg);
  const std::string folder = cfg.job.dump_folder + "/checkpoint";
  EXPECT_EQ(ck::list_checkpoints(folder), (std::vector<int64_t>{1, 3, 6}));
  // load_only: resumes from the latest, trains on, saves nothing (not even
  // at its last step).
  cfg.checkpoint.enable_first_step_checkpoint = false;
  cfg.checkpoint.load_only = true;
  cfg.training.steps = 8;
  const TrainRun more = train(cfg);
  EXPECT_EQ(more.start_step, 6);
  EXPECT_EQ(more.losses.size(), 2u);
  EXPECT_EQ(ck::list_checkpoints(folder), (std::vector<int64_t>{1, 3, 6}));
}

TEST(CheckpointTrainer, ExcludeFromLoadingLeavesThosePartsFresh) {
  ScratchDir dir("ckpt_exclude");
  JobConfig cfg = checkpointed(dir.path());
  cfg.training.deterministic = true;
  const TrainRun whole = train(cfg);
  const std::string folder = cfg.job.dump_folder + "/checkpoint";
  // Each resume starts from step-3 (the step-6 save of the run before is dropped).
  auto resume_without = [&](std::vector<std::string> parts) {
    titan::files::remove_all(folder + "/step-6");
    cfg.checkpoint.exclude_from_loading = std::move(parts);
    return train(cfg);
  };
  // A fresh optimizer over the step-3 weights: step 4's loss (computed
  // before its update, on the same weights and batch) is the whole run's;
  // the Adam moments after step 6 are not.
  const TrainRun fresh_adam = resume_without({"optimizer"});
  EXPECT_EQ(fresh_adam.start_step, 3);
  ASSERT_EQ(fresh_adam.losses.size(), 3u);
  EXPECT_EQ(fresh_adam.losses[0], whole.losses[3]);
  EXPECT_NE(fresh_adam.losses[2], whole.losses[5]);
  ASSERT_EQ(fresh_adam.exp_avg_sq.size(), whole.exp_avg_sq.size());
  EXPECT_FALSE(at::equal(fresh_adam.exp_avg_sq[0], whole.exp_avg_sq[0]));
  // The data streams start over: step 4 sees step 1's batch, not step 4's.
  const TrainRun fresh_data = resume_without({"dataloader"});
  EXPECT_EQ(fresh_data.start_step, 3);
  EXPECT_NE(fresh_data.losses[0], whole.losses[3]);
  // Without the train state the step count starts over too: six steps from
  // the step-3 weights, the first on step 1's batch as fresh_data's was.
  const TrainRun restarted = resume_without({"train_state", "optimizer", "lr_scheduler", "dataloader"});
  EXPECT_EQ(restarted.start_step, 0);
  ASSERT_EQ(restarted.losses.size(), 6u);
  EXPECT_EQ(restarted.losses[0], fresh_data.losses[0]);
  std::printf("step 4 loss: whole %.9f, fresh Adam %.9f, fresh data %.9f; restarted step 1 %.9f\n", whole.losses[3],
              fresh_adam.losses[0], fresh_data.losses[0], restarted.losses[0]);
  // A resume at another seq_len: the saved data position is refused, and
  // the message names the key that keeps the rest of the checkpoint.
  titan::files::remove_all(folder + "/step-6");
  cfg.checkpoint.exclude_from_loading = {};
  cfg.training.seq_len /= 2;
  const std::string shorter = error_of([&] { train(cfg); });
  EXPECT_HAS(shorter, "data loader state was saved with seq_len ");
  EXPECT_HAS(shorter, "--checkpoint.exclude_from_loading dataloader keeps the rest and starts the data over)");
  cfg.checkpoint.exclude_from_loading = {"dataloader"};
  EXPECT_EQ(train(cfg).start_step, 3);
  cfg.checkpoint.exclude_from_loading = {"optimizers"};
  const std::string bad = error_of([&] { titan::config::validate(cfg); });
  EXPECT_HAS(bad, "[checkpoint] exclude_from_loading");
  EXPECT_HAS(bad, "(got \"optimizers\")");
}

TEST(CheckpointTrainer, WeightsOnlyLastSaveInExportDtype) {
  ScratchDir dir("ckpt_export");
  JobConfig cfg = checkpointed(dir.path());
  cfg.checkpoint.model_weights_only = true;
  cfg.checkpoint.export_dtype = "bfloat16";
  const TrainRun whole = train(cfg);
  const std::string folder = dir.path() + "/checkpoint";
  const ck::CheckpointInfo mid = ck::open_checkpoint(folder + "/step-3");
  const ck::CheckpointInfo last = ck::open_checkpoint(folder + "/step-6");
  EXPECT_EQ(mid.metadata["state"]["content"], "full");  // intermediate saves can resume
  EXPECT_EQ(last.metadata["state"]["content"], "model");
  EXPECT_FALSE(last.has_tensor(ck::optimizer_state_name("norm.weight", "exp_avg")));
  const auto exported = ck::read_model_tensors(folder + "/step-6");
  ASSERT_EQ(exported.size(), whole.weights.size());
  for (const auto& [name, w] : whole.weights) {
    EXPECT_EQ(exported.at(name).scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(at::equal(exported.at(name), w.to(at::kBFloat16))) << name;
  }
  // Auto-resume skips the weights-only export: it continues from step 3,
  // and says which save it passed over and that saving it again replaces it.
  cfg.training.steps = 6;
  std::ostringstream log;
  TrainerOptions o = quiet();
  o.console = true;
  o.out = &log;
  Trainer resumed(cfg, o);
  EXPECT_EQ(resumed.step(), 3);
  resumed.train();
  EXPECT_NE(log.str().find("checkpoint: passed over step-6: weights only ([checkpoint] last_save_model_only), no "
                           "optimizer or data state to continue from; if this run saves that step again, it "
                           "replaces it"),
            std::string::npos)
      << log.str();
}

// [training] dtype = "bfloat16": a checkpoint holds the bf16 weights and
// Adam moments as they are (no fp32 copy to save), a resume continues bit
// for bit, and a checkpoint an fp32 job saved loads rounded to bf16 (as a
// DCP load into bf16 parameters casts), which the resume line says.
TEST(CheckpointTrainer, PureBf16ResumesBitwiseAndLoadsAnFp32CheckpointRounded) {
  ScratchDir dir("ckpt_bf16");
  JobConfig cfg = checkpointed(dir.path() + "/bf16");
  cfg.training.dtype = "bfloat16";
  cfg.training.deterministic = true;
  const TrainRun whole = train(cfg);
  const std::string folder = cfg.job.dump_folder + "/checkpoint";
  const ck::CheckpointInfo last = ck::open_checkpoint(folder + "/step-6");
  int64_t tensors = 0;
  for (const auto& [name, entry] : last.metadata.at("tensors").items()) {
    EXPECT_EQ(entry.at("dtype"), "BF16") << name;
    ++tensors;
  }
  EXPECT_EQ(tensors, 3 * static_cast<int64_t>(whole.weights.size()));  // weights, exp_avg, exp_avg_sq
  titan::files::remove_all(folder + "/step-6");
  const TrainRun resumed = train(cfg);
  EXPECT_EQ(resumed.start_step, 3);
  expect_bitwise_equal(resumed, whole, 3);

  // An fp32 job's step 3, loaded by a bf16 job that has no step left to run.
  const JobConfig fp32 = checkpointed(dir.path() + "/fp32", /*steps=*/3, /*interval=*/3);
  const TrainRun saved = train(fp32);
  JobConfig bf16 = fp32;
  bf16.training.dtype = "bfloat16";
  std::ostringstream out;
  TrainerOptions o = quiet();
  o.console = true;
  o.out = &out;
  Trainer t(bf16, o);
  EXPECT_EQ(t.step(), 3);
  t.train();  // prints the resume line; no step left to run
  EXPECT_HAS(out.str(), "checkpoint: resumed from " + fp32.job.dump_folder +
                            "/checkpoint/step-3 (step 3); saved in float32, cast to this job's bfloat16");
  for (const auto& [name, w] : t.full_state_dict()) {
    EXPECT_EQ(w.scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(at::equal(w, saved.weights.at(name).to(at::kBFloat16))) << name;
  }
  const auto params = t.trained_parameters();
  ASSERT_EQ(params.size(), saved.exp_avg_sq.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor v = titan::optim::adam_state(t.optimizer(), params[i]).exp_avg_sq;
    EXPECT_EQ(v.scalar_type(), at::kBFloat16) << "parameter " << i;
    EXPECT_TRUE(at::equal(v, saved.exp_avg_sq[i].to(at::kBFloat16))) << "parameter " << i;
  }
}

TEST(CheckpointTrainer, SeedCheckpointStartsEveryJobFromTheSameWeights) {
  ScratchDir dir("ckpt_seed");
  JobConfig seed = checkpointed(dir.path());
  seed.checkpoint.create_seed_checkpoint = true;
  {
    Trainer t(seed, quiet());
    const auto initial = t.full_state_dict();
    EXPECT_EQ(t.train().steps_done, 0);
    const auto saved = ck::read_model_tensors(dir.path() + "/checkpoint/step-0");
    for (const auto& [name, w] : initial) EXPECT_TRUE(at::equal(saved.at(name), w)) << name;
  }
  // A job with another seed starts from the seed checkpoint's weights: it
  // trains exactly as the job whose initialisation made them.
  JobConfig fresh = titan::testing::tiny_config(dir.path() + "/fresh", 6);
  const TrainRun reference = train(fresh);
  JobConfig from_seed = checkpointed(dir.path());
  from_seed.training.seed = 12345;
  const TrainRun r = train(from_seed);
  EXPECT_EQ(r.start_step, 0);
  ASSERT_EQ(r.losses.size(), reference.losses.size());
  for (size_t i = 0; i < r.losses.size(); ++i) EXPECT_EQ(r.losses[i], reference.losses[i]) << "step " << i + 1;
}

TEST(CheckpointTrainer, AnotherFlavorNamesTheFirstMismatchingTensor) {
  ScratchDir dir("ckpt_flavor");
  JobConfig cfg = checkpointed(dir.path());
  train(cfg);
  TrainerOptions o = quiet();
  o.model_args->dim = 96;
  const std::string e = error_of([&] { Trainer t(cfg, o); });
  EXPECT_HAS(e, "tok_embeddings.weight was saved with shape [");
  EXPECT_HAS(e, "(another flavor?)");
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(CheckpointTrainer, CorruptedCheckpointIsRefusedNamingTheFile) {
  ScratchDir dir("ckpt_corrupt");
  JobConfig cfg = checkpointed(dir.path(), 3, 3);
  train(cfg);
  const std::string file = dir.path() + "/checkpoint/step-3/" + ck::rank_file_name(0);
  std::string bytes = ck::read_text_file(file);
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  const std::string e = error_of([&] { Trainer t(cfg, quiet()); });
  EXPECT_HAS(e, file + " fails its CRC-32 check");
}

TEST(CheckpointTrainer, UnwritableFolderFailsTheSaveClearly) {
  ScratchDir dir("ckpt_unwritable");
  JobConfig cfg = checkpointed(dir.path(), 3, 3);
  // The checkpoint folder's place is taken by a file.
  std::ofstream(dir.path() + "/checkpoint") << "not a folder";
  const std::string e = error_of([&] { train(cfg); });
  EXPECT_HAS(e, "checkpoint: cannot create the folder " + dir.path() + "/checkpoint");
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

class FullDiskTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FullDiskTest, FailsTheSaveAndKeepsTheEarlierCheckpoint) {
  ScratchDir dir("ckpt_full_disk");
  JobConfig cfg = checkpointed(dir.path(), 6, 3);
  // async: the write fails on the background thread, and the error comes
  // out at the end of training (close()), not silently.
  cfg.checkpoint.async_mode = GetParam();
  cfg.training.steps = 3;
  train(cfg);  // step-3 saved
  // A file-size limit makes the next save's write fail as a full disk
  // would (EFBIG instead of ENOSPC; SIGXFSZ ignored so write() returns).
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  cfg.training.steps = 6;
  const std::string e = error_of([&] { train(cfg); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_HAS(e, "checkpoint: writing " + dir.path() + "/checkpoint/step-6.partial/rank-00000.safetensors failed");
  // Step 3 is still the latest checkpoint, whole and loadable.
  EXPECT_EQ(ck::list_checkpoints(dir.path() + "/checkpoint"), (std::vector<int64_t>{3}));
  Trainer t(cfg, quiet());
  EXPECT_EQ(t.step(), 3);
}

INSTANTIATE_TEST_SUITE_P(AsyncModes, FullDiskTest, ::testing::Values("disabled", "async"));

}  // namespace
