// `titan train --metrics.enable_tensorboard` end to end: the event file the
// run writes is read back by the Python tensorboard package
// (tests/metrics/tensorboard_roundtrip.py, EventAccumulator) and every
// scalar is compared with the metrics.jsonl beside it; on 2 ranks only rank
// 0 writes, unless save_for_all_ranks asks every rank to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "train/train_test_util.hpp"
#include "support/run_command.hpp"

namespace {

using titan::testing::bin_path;
using titan::testing::run_command;
using titan::testing::ScratchDir;
using titan::testing::source_path;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

using titan::testing::python;

// The debug model cut to a few tiny steps; log_freq 2 over 5 steps logs at
// 1, 2, 4 and 5, so intervals of 1 and 2 steps are both checked.
std::string train(const std::string& dump, const std::string& extra) {
  return bin_path("titan") + " train --job.config_file " + source_path("train_configs/debug_model.toml") +
         " --job.dump_folder " + dump + " --training.device cpu --training.seq_len 16 --training.batch_size 2" +
         " --training.steps 5 --metrics.log_freq 2 --metrics.enable_tensorboard" + extra;
}

std::string roundtrip(const std::string& dump, const std::string& tb_folder = "tb", int rank = -1) {
  return python() + " " + source_path("tests/metrics/tensorboard_roundtrip.py") + " " + dump + " 2 5 " + tb_folder +
         (rank >= 0 ? " " + std::to_string(rank) : "");
}

TEST(TensorboardTrain, EventFileMatchesJsonl) {
  ScratchDir dir("tb_train");
  const std::string dump = dir.path() + "/out";
  auto r = run_command(train(dump, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "tensorboard " + dump + "/tb/");
  auto c = run_command(roundtrip(dump));
  std::cout << c.output;
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_HAS(c.output, "OK: ");
}

TEST(TensorboardTrain, TwoRanksOnlyRankZeroWrites) {
  ScratchDir dir("tb_train2");
  const std::string dump = dir.path() + "/out";
  auto r = run_command(train(dump, " --nproc 2 --metrics.save_tb_folder board"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "on 2 data-parallel rank(s)");
  // The script fails unless there is exactly one event file and one JSONL
  // record per step.
  auto c = run_command(roundtrip(dump, "board"));
  std::cout << c.output;
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_HAS(c.output, "OK: ");
}

// [metrics] save_for_all_ranks (torchtitan's): each rank writes its own
// event file under rank_N of one run folder; the job-wide values of every
// rank's file are those of rank 0's metrics.jsonl.
TEST(TensorboardTrain, SaveForAllRanksWritesOneFolderPerRank) {
  ScratchDir dir("tb_all_ranks");
  const std::string dump = dir.path() + "/out";
  auto r = run_command(train(dump, " --nproc 2 --metrics.save_for_all_ranks"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank : {0, 1}) {
    auto c = run_command(roundtrip(dump, "tb", rank));
    std::cout << c.output;
    EXPECT_EQ(c.exit_code, 0) << c.output;
    EXPECT_HAS(c.output, "OK: ");
  }
  // One run folder for both ranks (the job agrees on its name).
  auto runs = run_command("ls " + dump + "/tb");
  EXPECT_EQ(std::count(runs.output.begin(), runs.output.end(), '\n'), 1) << runs.output;
}

// [validation] on 2 ranks: the console's "validate step:" lines, one JSONL
// record per validation (steps 1, 2 and 4 with freq 2) and the same values
// as TensorBoard's validation/loss.
TEST(TensorboardTrain, ValidationIsLoggedEverywhere) {
  ScratchDir dir("tb_validation");
  const std::string dump = dir.path() + "/out";
  auto r = run_command(train(dump, " --nproc 2 --validation.enable --validation.dataset \"\" --validation.freq 2"
                                   " --validation.steps 2 --validation.local_batch_size 2 --validation.seq_len 16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"validate step:  1  loss:", "validate step:  2  loss:", "validate step:  4  loss:"})
    EXPECT_HAS(r.output, line);
  EXPECT_EQ(r.output.find("validate step:  5"), std::string::npos) << r.output;
  EXPECT_HAS(r.output, "batches: 2");
  EXPECT_HAS(r.output, "validate  after step 1 and every 2: 2 batch(es) of 2 x 16 tokens per data-parallel rank");
  EXPECT_HAS(r.output, "val loss ");
  auto c = run_command(roundtrip(dump));
  std::cout << c.output;
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_HAS(c.output, "validation/loss");
  EXPECT_HAS(c.output, "OK: ");
}

}  // namespace
