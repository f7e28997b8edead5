// Every config in train_configs/ as written. Each one:
//
// 1. trains two steps on 8 emulated ranks with `titan train --nproc 8`,
//    changing only the model flavor (debugmodel), the degrees that do not
//    fit 8 ranks, the batch and sequence (and, for a scratch run, the
//    steps, the device and the output folder). Everything else — AC,
//    float8, async TP, loss parallel, checkpointing, profiling, TensorBoard,
//    the learning-rate schedule, the tokenizer it names — is the file's;
// 2. is estimated unchanged with its real flavor on a world size that runs
//    its layout (`titan estimate`): per-rank memory, and the ranks over an
//    80 GiB device named with a layout that fits.
//
// One CTest per config (train_config_<name>).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/run_command.hpp"
#include "titan/data/files.hpp"
#include "train_test_util.hpp"

namespace {

using titan::testing::bin_path;
using titan::testing::run_command;
using titan::testing::ScratchDir;
using titan::testing::source_path;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

struct ConfigCase {
  const char* file;
  /// What 8 ranks need besides the flavor: degrees, batch, sequence.
  const char* fit_overrides;
  /// What the 8-rank run's banner must say of its layout.
  const char* layout;
  /// titan estimate: the real flavor when the file names none, the world
  /// size its layout is written for.
  const char* estimate_flavor;
  int estimate_world;
  /// Whether that layout fits 80 GiB per rank (when not, the estimate must
  /// name the ranks and a layout that fits).
  bool fits;
};

const ConfigCase kCases[] = {
    {"llama3_8b.toml", "--training.batch_size 2 --training.seq_len 64", "dp_shard=8: FSDP", "", 8, true},
    {"llama3_8b_h100x8.toml", "--training.batch_size 2 --training.seq_len 64", "dp_shard=8: FSDP", "", 8, true},
    {"llama3_70b.toml", "--training.batch_size 2 --training.seq_len 64", "tp=8: TP over 8 ranks", "", 64, true},
    {"llama3_405b.toml", "--training.batch_size 2 --training.seq_len 64", "tp=8: TP over 8 ranks", "", 64, false},
    {"llama3_70b_32gpu.toml",
     "--training.data_parallel_shard_degree 2 --training.tensor_parallel_degree 2 --training.batch_size 1"
     " --training.seq_len 64",
     "dp_replicate=2 x dp_shard=2 x tp=2", "70B", 32, true},
    {"llama3_405b_large.toml",
     "--training.data_parallel_replicate_degree 1 --training.data_parallel_shard_degree 2"
     " --training.tensor_parallel_degree 2 --experimental.pipeline_parallel_degree 2 --training.batch_size 2"
     " --training.seq_len 64",
     "pp=2 x dp_shard=2 x tp=2", "405B", 2048, true},
};

class TrainConfig : public ::testing::TestWithParam<ConfigCase> {};

TEST_P(TrainConfig, TrainsOnEightRanksAndIsEstimatedAsWritten) {
  const ConfigCase& c = GetParam();
  ScratchDir dir("train_config");
  const std::string config = source_path(std::string("train_configs/") + c.file);

  const std::string train = bin_path("titan") + " train --nproc 8 --job.config_file " + config +
                            " --model.flavor debugmodel " + c.fit_overrides +
                            " --training.steps 2 --training.device cpu --job.dump_folder " + dir.path() + "/out";
  const auto r = run_command(train);
  ASSERT_EQ(r.exit_code, 0) << train << "\n" << r.output;
  EXPECT_HAS(r.output, c.layout);
  EXPECT_HAS(r.output, "training done: 2/2 steps");
  // The tokenizer it names is a file of torchtitan's repository: the debug
  // model's 2048 ids take the built-in one instead, and the log says so.
  EXPECT_HAS(r.output, "inside torchtitan's repository) is not here");
  std::printf("[%s] %s\n", c.file, train.c_str());

  std::string estimate = bin_path("titan") + " estimate --job.config_file " + config + " --nproc " +
                         std::to_string(c.estimate_world);
  if (*c.estimate_flavor) estimate += std::string(" --model.flavor ") + c.estimate_flavor;
  const auto e = run_command(estimate);
  ASSERT_EQ(e.exit_code, 0) << estimate << "\n" << e.output;
  EXPECT_HAS(e.output, "Total estimated GPU memory:");
  if (c.fits) {
    EXPECT_HAS(e.output, "fits       every rank within 80 GiB");
  } else {
    EXPECT_HAS(e.output, "over       pp rank 0 over 80 GiB per rank");
    EXPECT_HAS(e.output, "fit        --nproc ");
  }
  std::printf("[%s] %s\n%s", c.file, estimate.c_str(), e.output.c_str());
}

std::string case_name(const ::testing::TestParamInfo<ConfigCase>& info) {
  std::string name = info.param.file;
  name = name.substr(0, name.find('.'));
  for (char& ch : name)
    if (ch == '.' || ch == '-') ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(AsWritten, TrainConfig, ::testing::ValuesIn(kCases), case_name);

}  // namespace
