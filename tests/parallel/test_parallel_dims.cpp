// ParallelDims: resolving -1, rejecting degrees that do not multiply to the
// world size, and the mesh it builds (dimension order, sizes, flattened
// groups) checked against rank arithmetic done by hand here.
#include <gtest/gtest.h>

#include "support/dist_test.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/util/error.hpp"

using titan::parallel::ParallelDims;

namespace {

ParallelDims dims(int64_t rep, int64_t shard, int64_t tp, int64_t pp, int64_t world) {
  ParallelDims d;
  d.dp_replicate = rep, d.dp_shard = shard, d.tp = tp, d.pp = pp, d.world_size = world;
  d.resolve();
  return d;
}

std::string resolve_error(int64_t rep, int64_t shard, int64_t tp, int64_t world) {
  try {
    dims(rep, shard, tp, 1, world);
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ParallelDims, MinusOneTakesTheRanksLeftOver) {
  EXPECT_EQ(dims(1, -1, 1, 1, 4).dp_shard, 4);
  EXPECT_EQ(dims(2, -1, 1, 1, 8).dp_shard, 4);
  EXPECT_EQ(dims(1, -1, 2, 2, 8).dp_shard, 2);
  ParallelDims d = dims(2, -1, 1, 1, 4);
  EXPECT_EQ(d.dp_degree(), 4);
  EXPECT_TRUE(d.fsdp_enabled());
  EXPECT_FALSE(d.ddp_enabled());
  EXPECT_TRUE(dims(4, 1, 1, 1, 4).ddp_enabled());
  EXPECT_EQ(dims(1, -1, 1, 1, 1).describe(), "single rank");
  EXPECT_EQ(dims(2, 2, 1, 1, 4).describe(), "dp_replicate=2 x dp_shard=2");
}

TEST(ParallelDims, BadDegreesGiveOneLineErrors) {
  for (const std::string& e : {resolve_error(1, -1, 3, 4), resolve_error(2, 3, 1, 4), resolve_error(0, -1, 1, 4),
                               resolve_error(1, 0, 1, 4), resolve_error(1, -2, 1, 4)}) {
    SCOPED_TRACE(e);
    EXPECT_NE(e, "");
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  EXPECT_NE(resolve_error(2, 3, 1, 4).find("needs 6 ranks, but 4 were launched"), std::string::npos);
  EXPECT_NE(resolve_error(1, -1, 3, 4).find("do not divide"), std::string::npos);
}

TEST(ParallelDims, MeshDimsInTorchtitanOrder) {
  auto names = [](const ParallelDims& d) {
    std::string s;
    for (const auto& [n, size] : d.mesh_dims()) s += n + "=" + std::to_string(size) + " ";
    return s;
  };
  EXPECT_EQ(names(dims(2, 2, 2, 2, 16)), "pp=2 dp_replicate=2 dp_shard=2 tp=2 ");
  EXPECT_EQ(names(dims(1, -1, 1, 1, 4)), "dp_shard=4 ");
  EXPECT_EQ(names(dims(1, -1, 1, 1, 1)), "dp_shard=1 ");
  EXPECT_EQ(dims(2, 2, 1, 1, 4).dp_mesh_name(), "dp");
  EXPECT_EQ(dims(4, 1, 1, 1, 4).dp_mesh_name(), "dp_replicate");
  EXPECT_EQ(dims(1, 1, 4, 1, 4).dp_mesh_name(), "");
}

// On 4 ranks, HSDP 2x2: rank r sits at (r / 2, r % 2); its dp_shard group is
// the ranks of its row, dp_replicate those of its column, dp all four. An
// all-reduce of the global rank over each group gives the sums computed here.
TEST(ParallelDims, HsdpMeshGroupsReduceOverTheRightRanks) {
  auto& w = titan::testing::world();
  if (w.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ParallelDims d = dims(2, -1, 1, 1, 4);
  titan::dist::DeviceMesh mesh = d.build_mesh(w);
  const int r = w.rank();
  auto sum_over = [&](const std::string& name) {
    at::Tensor t = at::full({1}, static_cast<double>(r), at::kDouble);
    mesh.group(name)->all_reduce(t);
    return t.item<double>();
  };
  const int row = r / 2, col = r % 2;
  EXPECT_EQ(sum_over("dp_shard"), 2 * row * 2 + 1);       // ranks 2row, 2row+1
  EXPECT_EQ(sum_over("dp_replicate"), col + (col + 2));  // ranks col, col+2
  EXPECT_EQ(sum_over(d.dp_mesh_name()), 0 + 1 + 2 + 3);
  EXPECT_EQ(mesh.size("dp"), 4);
  EXPECT_EQ(mesh.local_rank("dp_shard"), col);
}
