// LaunchEnv parsing: torchrun's and Slurm's variables, and the one-line
// errors for bad values.
#include <gtest/gtest.h>

#include "titan/dist/launch_env.hpp"
#include "titan/dist/world.hpp"
#include "titan/util/error.hpp"

using titan::dist::parse_launch_env;

namespace {

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    parse_launch_env(vars);
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, NoVariablesIsAWorldOfOne) {
  auto env = parse_launch_env({});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.source, "none");
}

TEST(LaunchEnv, Torchrun) {
  auto env = parse_launch_env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29400"}});
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29400);
  EXPECT_EQ(env.source, "torchrun");
}

TEST(LaunchEnv, Slurm) {
  auto env = parse_launch_env({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"},
                               {"SLURM_NTASKS_PER_NODE", "8(x2)"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  EXPECT_EQ(env.rank, 9);
  EXPECT_EQ(env.world_size, 16);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 8);
  EXPECT_EQ(env.master_addr, "gpu07");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0 is out of range"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}})
                .find("RANK=4 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}).find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT=70000 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}}).find("RANK is not set"), std::string::npos);
}

}  // namespace

// The GPU of a rank: LOCAL_RANK among all visible GPUs, the only one when a
// launcher gave each rank its own (Slurm's --gpus-per-task), and a one-line
// error when LOCAL_RANK is past the visible ones.
TEST(CudaDeviceFor, LocalRankAmongVisibleGpusOrTheOnlyOne) {
  using titan::dist::cuda_device_for;
  EXPECT_EQ(cuda_device_for(0, 8), 0);
  EXPECT_EQ(cuda_device_for(5, 8), 5);
  EXPECT_EQ(cuda_device_for(3, 1), 0);  // one GPU per task: SLURM_LOCALID 3 sees it as GPU 0
  try {
    cuda_device_for(4, 2);
    FAIL() << "LOCAL_RANK 4 with 2 visible GPUs was accepted";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("LOCAL_RANK 4 has no GPU: 2 visible"), std::string::npos) << e.what();
  }
}
