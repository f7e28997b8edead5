// The fake backend ([comm] mode = "fake_backend") through titan's
// ProcessGroup: rank 1 of 4 communicates with nobody, and every collective
// returns what four peers holding this rank's tensors would produce
// (worked here by hand from the inputs), while the CommLog still counts
// what a real rank would have sent.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "titan/dist/backend.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/util/error.hpp"

using namespace titan::dist;

namespace {

ProcessGroup fake_group(int rank, int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ProcessGroup("fake", ranks, rank, make_fake_backend(rank, size), c10::make_intrusive<c10d::HashStore>(),
                      std::chrono::seconds(5));
}

at::Tensor arange(int64_t n) { return at::arange(n, at::TensorOptions().dtype(at::kFloat)); }

}  // namespace

TEST(FakeBackend, CollectivesMirrorThisRank) {
  const ProcessGroup g = fake_group(/*rank=*/1, /*size=*/4);
  EXPECT_FALSE(g.communicates());

  at::Tensor t = arange(3);
  g.all_reduce(t, ReduceOp::Sum);  // four peers of [0, 1, 2]
  EXPECT_TRUE(at::equal(t, at::tensor({0.f, 4.f, 8.f})));
  t = arange(3);
  g.all_reduce(t, ReduceOp::Avg);
  EXPECT_TRUE(at::equal(t, arange(3)));
  t = arange(3);
  g.all_reduce(t, ReduceOp::Max);
  EXPECT_TRUE(at::equal(t, arange(3)));

  // All-gather along dim 1 repeats this rank's columns.
  const at::Tensor cols = arange(4).reshape({2, 2});
  EXPECT_TRUE(at::equal(g.all_gather(cols, 1), at::cat({cols, cols, cols, cols}, 1)));

  // Reduce-scatter: this rank's chunk (index 1) summed over four peers.
  const at::Tensor rs = g.reduce_scatter(arange(8), 0, ReduceOp::Sum);
  EXPECT_TRUE(at::equal(rs, at::tensor({8.f, 12.f})));
  EXPECT_TRUE(at::equal(g.reduce_scatter(arange(8), 0, ReduceOp::Avg), at::tensor({2.f, 3.f})));

  // All-to-all: every peer sends this rank its chunk for rank 1.
  const at::Tensor a2a = g.all_to_all(arange(8), 0, 0);
  EXPECT_TRUE(at::equal(a2a, at::tensor({2.f, 3.f, 2.f, 3.f, 2.f, 3.f, 2.f, 3.f})));

  // A receive reads ones (no sender's data exists); a send changes nothing.
  at::Tensor got = at::zeros({2, 3});
  g.recv(got, /*src=*/0);
  EXPECT_TRUE(at::equal(got, at::ones({2, 3})));
  at::Tensor sent = arange(3);
  g.send(sent, /*dst=*/2);
  EXPECT_TRUE(at::equal(sent, arange(3)));
  g.barrier();
}

TEST(FakeBackend, TheCommLogCountsWhatARealRankWouldSend) {
  CommLog& log = CommLog::instance();
  log.clear();
  log.begin_step(7);
  const ProcessGroup g = fake_group(/*rank=*/3, /*size=*/4);
  at::Tensor t = at::zeros({1024}, at::TensorOptions().dtype(at::kFloat));
  g.all_reduce(t);
  (void)g.all_gather(t);
  const auto totals = log.step_totals(7);
  // Ring all-reduce of 4 KiB over 4 ranks sends 2·3/4·4096 = 6144 bytes;
  // the all-gather's 16 KiB output, 3/4 of it.
  EXPECT_EQ(totals.at("all_reduce").count, 1);
  EXPECT_EQ(totals.at("all_reduce").wire_bytes, 6144);
  EXPECT_EQ(totals.at("all_gather").payload_bytes, 16384);
  EXPECT_EQ(totals.at("all_gather").wire_bytes, 12288);
}

TEST(FakeBackend, PlaysOneRankOnlyWhenLaunchedAlone) {
  LaunchEnv alone;
  const LaunchEnv played = fake_launch_env(alone, 5, 8);
  EXPECT_EQ(played.rank, 5);
  EXPECT_EQ(played.world_size, 8);
  EXPECT_EQ(played.local_rank, 0);
  EXPECT_EQ(played.local_world_size, 1);
  LaunchEnv launched;
  launched.rank = 1, launched.world_size = 2, launched.source = "torchrun";
  try {
    fake_launch_env(launched, 0, 8);
    FAIL() << "a rank of a launched job played a fake rank";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("launched as rank 1 of 2 (torchrun)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fake_launch_env(alone, 8, 8), titan::Error);
}
