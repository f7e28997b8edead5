// LaunchEnv parsing: torchrun's and Slurm's variables, and the one-line
// errors for bad values.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "support/error_of.hpp"
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
// rank is alone on its node or Slurm gave each task its own
// (--gpus-per-task), and a one-line error when LOCAL_RANK is past the
// visible ones or several ranks of a node would share a GPU (NCCL refuses
// that: "Duplicate GPU detected") unless [comm] ranks_per_device asks.
TEST(CudaDeviceFor, LocalRankAmongVisibleGpusOrTheOnlyOne) {
  using titan::dist::cuda_device_for;
  using titan::testing::error_of;
  auto env = [](int local_rank, int local_world_size, const char* source) {
    titan::dist::LaunchEnv e;
    e.local_rank = local_rank, e.local_world_size = local_world_size, e.source = source;
    e.world_size = local_world_size;
    return e;
  };
  EXPECT_EQ(cuda_device_for(env(0, 8, "torchrun"), 8), 0);
  EXPECT_EQ(cuda_device_for(env(5, 8, "torchrun"), 8), 5);
  EXPECT_EQ(cuda_device_for(env(3, 4, "slurm"), 1), 0);  // one GPU per task: SLURM_LOCALID 3 sees it as GPU 0
  EXPECT_EQ(cuda_device_for(env(0, 1, "none"), 1), 0);
  EXPECT_NE(error_of([&] { cuda_device_for(env(4, 2, "slurm"), 2); }).find("LOCAL_RANK 4 has no GPU: 2 visible"),
            std::string::npos);
  // titan run / torchrun --nproc 2 on a one-GPU machine: both ranks would be on GPU 0.
  const std::string shared = error_of([&] { cuda_device_for(env(1, 2, "torchrun"), 1); });
  std::printf("[measured] 2 ranks, 1 GPU: %s\n", shared.c_str());
  EXPECT_NE(shared.find("2 ranks on this node and 1 visible GPU"), std::string::npos) << shared;
  EXPECT_NE(error_of([&] { cuda_device_for(env(0, 4, "torchrun"), 2); }).find("NCCL needs a GPU per rank"),
            std::string::npos);
  // The refusal names the key that lets ranks share, with the count needed.
  EXPECT_NE(shared.find("[comm] ranks_per_device = 2"), std::string::npos) << shared;
}

// [comm] ranks_per_device = n: local ranks k·n .. k·n+n−1 share GPU k.
TEST(CudaDeviceFor, RanksShareGpusWhenAsked) {
  using titan::dist::cuda_device_for;
  using titan::testing::error_of;
  auto env = [](int local_rank, int local_world_size) {
    titan::dist::LaunchEnv e;
    e.local_rank = local_rank, e.local_world_size = local_world_size, e.world_size = local_world_size;
    e.source = "torchrun";
    return e;
  };
  EXPECT_EQ(cuda_device_for(env(0, 2), 1, 2), 0);
  EXPECT_EQ(cuda_device_for(env(1, 2), 1, 2), 0);
  EXPECT_EQ(cuda_device_for(env(2, 4), 2, 2), 1);
  EXPECT_EQ(cuda_device_for(env(3, 4), 2, 2), 1);
  EXPECT_EQ(cuda_device_for(env(5, 8), 8, 2), 2);  // sharing asked, GPUs to spare: still pairs
  const std::string too_many = error_of([&] { cuda_device_for(env(0, 6), 2, 2); });
  std::printf("[measured] 6 ranks, 2 GPUs, 2 per GPU: %s\n", too_many.c_str());
  EXPECT_NE(too_many.find("6 ranks on this node and 2 visible GPUs"), std::string::npos) << too_many;
  EXPECT_NE(too_many.find("shared by [comm] ranks_per_device = 2"), std::string::npos) << too_many;
  EXPECT_NE(too_many.find("ranks_per_device = 3"), std::string::npos) << too_many;
}

// [comm] backend: auto picks by device; Gloo may carry CUDA tensors; NCCL
// refuses the CPU, and ranks sharing a GPU before NCCL 2.30.
TEST(ChooseEngine, ByDeviceChoiceAndNcclVersion) {
  using titan::dist::choose_engine;
  using titan::testing::error_of;
  const c10::Device cpu(c10::kCPU), gpu(c10::kCUDA, 0);
  EXPECT_EQ(choose_engine("auto", cpu, 1, false, 0), "gloo");
  EXPECT_EQ(choose_engine("auto", gpu, 1, false, 22809), "nccl");
  EXPECT_EQ(choose_engine("gloo", gpu, 2, false, 22809), "gloo");
  EXPECT_EQ(choose_engine("nccl", gpu, 1, false, 22809), "nccl");
  EXPECT_EQ(choose_engine("auto", gpu, 2, false, 23003), "nccl");
  EXPECT_EQ(choose_engine("auto", gpu, 1, true, 22809), "fake");
  const std::string on_cpu = error_of([&] { choose_engine("nccl", cpu, 1, false, 22809); });
  EXPECT_NE(on_cpu.find("[comm] backend = \"nccl\" needs CUDA tensors"), std::string::npos) << on_cpu;
  const std::string old = error_of([&] { choose_engine("auto", gpu, 2, false, 22809); });
  std::printf("[measured] NCCL 2.28.9, 2 ranks per GPU: %s\n", old.c_str());
  EXPECT_NE(old.find("from 2.30 on (found 2.28.9)"), std::string::npos) << old;
  EXPECT_NE(old.find("--comm.backend gloo"), std::string::npos) << old;
}
