// DeviceMesh: coordinates, sub-groups and flattened groups reduce over the
// right ranks, checked against the row-major layout computed by hand.
#include <ATen/ATen.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "support/dist_test.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/util/error.hpp"

using titan::dist::DeviceMesh;
using titan::testing::opts;
using titan::testing::world;

namespace {

// Sum over a group of every member's global rank.
double sum_of_ranks(const titan::dist::ProcessGroup& g) {
  at::Tensor x = at::full({1}, static_cast<double>(world().rank()), opts());
  g.all_reduce(x);
  return x.item<double>();
}

// Shapes to try for this world size, last dim fastest (torchtitan's order).
std::vector<std::vector<int64_t>> shapes_for(int n) {
  if (n == 1) return {{1, 1}};
  if (n == 2) return {{1, 2}, {2, 1}};
  return {{2, 2}, {4, 1}, {1, 4}};
}

TEST(DeviceMesh, TwoDimensionalGroupsReduceOverTheRightRanks) {
  const int n = world().size();
  for (const auto& shape : shapes_for(n)) {
    DeviceMesh mesh(world(), shape, {"dp_shard", "tp"});
    const int rank = world().rank();
    const int64_t tp = shape[1];
    const int64_t dp_i = rank / tp, tp_i = rank % tp;
    EXPECT_EQ(mesh.coordinate(), (std::vector<int64_t>{dp_i, tp_i}));
    EXPECT_EQ(mesh.local_rank("tp"), tp_i);
    EXPECT_EQ(mesh.size("dp_shard"), shape[0]);

    // tp group: same dp index, every tp index.
    double expect_tp = 0;
    for (int64_t j = 0; j < tp; ++j) expect_tp += static_cast<double>(dp_i * tp + j);
    EXPECT_EQ(sum_of_ranks(*mesh.group("tp")), expect_tp) << mesh.describe();
    // dp group: same tp index, every dp index.
    double expect_dp = 0;
    for (int64_t i = 0; i < shape[0]; ++i) expect_dp += static_cast<double>(i * tp + tp_i);
    EXPECT_EQ(sum_of_ranks(*mesh.group("dp_shard")), expect_dp) << mesh.describe();
    EXPECT_EQ(mesh.group("tp")->rank(), tp_i);
    EXPECT_EQ(mesh.rank_at({dp_i, tp_i}), rank);

    // A 1-D sub-mesh keeps the group and coordinate.
    DeviceMesh tp_mesh = mesh["tp"];
    EXPECT_EQ(tp_mesh.ndim(), 1);
    EXPECT_EQ(tp_mesh.size(0), tp);
    EXPECT_EQ(tp_mesh.coordinate()[0], tp_i);
    EXPECT_EQ(tp_mesh.rank_at({0}), static_cast<int>(dp_i * tp));

    // Flattening both dims gives a group over every rank.
    DeviceMesh flat = mesh.flatten({"dp_shard", "tp"}, "dp_tp");
    EXPECT_EQ(flat.size(0), n);
    EXPECT_EQ(mesh.local_rank("dp_tp"), rank);
    EXPECT_EQ(sum_of_ranks(*mesh.group("dp_tp")), n * (n - 1) / 2.0);
  }
}

TEST(DeviceMesh, ThreeDimensionalTorchtitanOrder) {
  const int n = world().size();
  std::vector<int64_t> shape = {1, n >= 2 ? 2 : 1, n >= 4 ? n / 2 : 1};
  DeviceMesh mesh(world(), shape, {"pp", "dp_shard", "tp"});
  EXPECT_EQ(mesh.numel(), n);
  EXPECT_EQ(mesh.size("pp"), 1);
  EXPECT_EQ(sum_of_ranks(*mesh.group("pp")), static_cast<double>(world().rank()));
  // Flattening dp_shard with a later dim (as FSDP over dp_shard and cp does).
  mesh.flatten({"dp_shard", "tp"}, "dp_shard_tp");
  EXPECT_EQ(mesh.size("dp_shard_tp"), n);
  EXPECT_EQ(sum_of_ranks(*mesh["dp_shard_tp"].group(0)), n * (n - 1) / 2.0);
}

TEST(DeviceMesh, BadShapesAndNamesAreClearErrors) {
  const int n = world().size();
  EXPECT_THROW(DeviceMesh(world(), {n + 1}, {"dp"}), titan::Error);
  EXPECT_THROW(DeviceMesh(world(), {n, 1}, {"dp"}), titan::Error);
  EXPECT_THROW(DeviceMesh(world(), {n, 1}, {"dp", "dp"}), titan::Error);
  DeviceMesh mesh(world(), {n}, {"dp"});
  try {
    mesh.group("tp");
    FAIL() << "expected an error for an unknown dimension";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no dimension 'tp'"), std::string::npos) << e.what();
  }
}

}  // namespace

// A group whose connect failed on one member (Gloo's one-sided "Connection
// closed by peer", injected here with TITAN_FAULT_GLOO_CONNECT on the last
// group rank while the others connected) is connected again by every member
// together: the group then reduces over the right ranks.
TEST(DeviceMesh, AGroupWhoseConnectFailedOnOneRankIsConnectedAgainByAll) {
  const int n = world().size();
  if (n == 1) GTEST_SKIP() << "needs a peer";
  ::setenv("TITAN_FAULT_GLOO_CONNECT", ("retried:" + std::to_string(n - 1)).c_str(), 1);
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  std::shared_ptr<titan::dist::ProcessGroup> g;
  EXPECT_NO_THROW(g = world().new_group("retried", all));
  ::unsetenv("TITAN_FAULT_GLOO_CONNECT");
  ASSERT_TRUE(g);
  EXPECT_EQ(sum_of_ranks(*g), n * (n - 1) / 2.0);
}
