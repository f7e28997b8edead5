// Every DTensor transition, forward and backward, on 1-D and 2-D meshes with
// even and uneven shapes. The expected local pieces are cut directly from a
// full tensor every rank builds from the same seed, so no expected value
// comes from the redistribution code under test.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "support/dist_test.hpp"
#include "titan/dtensor/dtensor.hpp"
#include "titan/util/error.hpp"

using titan::DTensor;
using titan::Placement;
using titan::Placements;
using titan::dist::DeviceMesh;
using titan::dist::ReduceOp;
using titan::testing::opts;
using titan::testing::seeded;
using titan::testing::world;

namespace {


// The piece of `full` a rank holds under `placements`, cut by hand with
// torch.chunk's rule (shards nest in mesh-dimension order).
at::Tensor cut(const at::Tensor& full, const DeviceMesh& mesh, const Placements& placements) {
  at::Tensor piece = full;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_shard()) continue;
    int64_t d = placements[i].dim, k = mesh.size(i), c = mesh.coordinate()[i];
    auto chunks = piece.chunk(k, d);
    // torch.chunk may return fewer than k chunks; missing ones are empty.
    if (c < static_cast<int64_t>(chunks.size())) {
      piece = chunks[c];
    } else {
      std::vector<int64_t> empty = piece.sizes().vec();
      empty[d] = 0;
      piece = at::empty(empty, piece.options());
    }
  }
  return piece.contiguous();
}

Placements without_partial(Placements ps) {
  for (auto& p : ps)
    if (p.is_partial()) p = Placement::replicate();
  return ps;
}

// This rank's share of a Partial: coordinate 0 holds value - (k-1)·noise,
// the others value + noise... for Sum the shares add up to the value; for
// Avg coordinate 0 holds value - (k-1)·noise and the rest value + noise, so
// the average is the value.
at::Tensor split_partial(at::Tensor piece, const DeviceMesh& mesh, const Placements& placements) {
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_partial()) continue;
    int64_t k = mesh.size(i), c = mesh.coordinate()[i];
    at::Tensor noise = seeded(77 + i, piece.sizes().vec());
    bool avg = placements[i].reduce == ReduceOp::Avg;
    at::Tensor base = avg ? piece : piece / static_cast<double>(k);
    piece = c == 0 ? base - noise * static_cast<double>(k - 1) : base + noise;
  }
  return piece;
}

void check(const std::shared_ptr<const DeviceMesh>& mesh, std::vector<int64_t> shape, const Placements& from,
           const Placements& to) {
  SCOPED_TRACE(titan::to_string(from) + " -> " + titan::to_string(to) + " on " + mesh->describe() +
               " shape " + c10::str(c10::IntArrayRef(shape)));
  at::Tensor full = seeded(1, shape);
  at::Tensor local = split_partial(cut(full, *mesh, without_partial(from)), *mesh, from).requires_grad_(true);
  DTensor in(local, mesh, from, shape);
  DTensor out = in.redistribute(to);
  EXPECT_EQ(out.placements(), to);
  EXPECT_EQ(out.local().sizes().vec(), out.local_shape());
  // Forward: the piece is the hand-cut piece; a Partial result must add back
  // up to the full tensor.
  bool to_partial = false;
  for (const auto& p : to) to_partial |= p.is_partial();
  if (to_partial)
    TITAN_EXPECT_CLOSE(out.full_tensor(), full, 1e-5);
  else
    TITAN_EXPECT_CLOSE(out.local(), cut(full, *mesh, to), 1e-6);
  // Backward: with the output's gradient W (a Partial output's gradient is
  // Replicate), the input's gradient is W cut for the input's placements.
  at::Tensor w = seeded(2, shape);
  (out.local() * cut(w, *mesh, without_partial(to))).sum().backward();
  ASSERT_TRUE(local.grad().defined());
  TITAN_EXPECT_CLOSE(local.grad(), cut(w, *mesh, without_partial(from)), 1e-5);
}

const Placement R = Placement::replicate();
const Placement P = Placement::partial();
const Placement Pavg = Placement::partial(ReduceOp::Avg);
Placement S(int64_t d) { return Placement::shard(d); }

TEST(DTensor, EveryTransitionOnA1DMesh) {
  const int n = world().size();
  auto mesh = std::make_shared<const DeviceMesh>(world(), std::vector<int64_t>{n}, std::vector<std::string>{"dp"});
  // Even, uneven (last shard short) and tiny (some shards empty) shapes.
  for (std::vector<int64_t> shape : {std::vector<int64_t>{2 * n, 3 * n}, {2 * n + 1, 3}, {3, n + 1}}) {
    const std::vector<std::pair<Placement, Placement>> moves = {
        {S(0), R}, {S(1), R}, {R, S(0)}, {R, S(1)}, {P, R},    {P, S(0)}, {P, S(1)},
        {S(0), S(1)}, {S(1), S(0)}, {R, P}, {Pavg, R}, {Pavg, S(0)}, {S(0), S(0)}, {R, R}};
    for (const auto& [from, to] : moves) check(mesh, shape, {from}, {to});
  }
}

TEST(DTensor, TransitionsOnA2DMesh) {
  const int n = world().size();
  if (n != 4) GTEST_SKIP() << "the 2-D cases use a 2x2 mesh";
  auto mesh = std::make_shared<const DeviceMesh>(world(), std::vector<int64_t>{2, 2},
                                                 std::vector<std::string>{"dp", "tp"});
  for (std::vector<int64_t> shape : {std::vector<int64_t>{8, 4}, {5, 7}}) {
    const std::vector<std::pair<Placements, Placements>> moves = {
        {{S(0), S(1)}, {R, R}}, {{S(0), S(0)}, {R, R}}, {{R, S(0)}, {S(0), S(0)}},
        {{R, R}, {S(0), S(0)}}, {{P, S(1)}, {S(0), R}}, {{S(0), R}, {R, S(1)}},
        {{S(1), S(0)}, {S(0), S(1)}}, {{R, P}, {R, S(0)}}, {{P, P}, {R, R}},
        {{S(0), S(0)}, {S(1), S(0)}}, {{R, R}, {P, S(1)}}};
    for (const auto& [from, to] : moves) check(mesh, shape, from, to);
  }
}

TEST(DTensor, DistributeTensorAndFullTensorRoundTrip) {
  const int n = world().size();
  auto mesh = std::make_shared<const DeviceMesh>(world(), std::vector<int64_t>{n}, std::vector<std::string>{"dp"});
  at::Tensor full = seeded(3, {2 * n + 1, 5});
  DTensor d = titan::distribute_tensor(full, mesh, {S(0)});
  TITAN_EXPECT_CLOSE(d.local(), cut(full, *mesh, {S(0)}), 0.0);
  EXPECT_EQ(d.shape(), full.sizes().vec());
  auto offset = d.local_offset();
  TITAN_EXPECT_CLOSE(full.narrow(0, offset[0], d.local().size(0)), d.local(), 0.0);
  TITAN_EXPECT_CLOSE(d.full_tensor(), full, 0.0);
  EXPECT_THROW(titan::distribute_tensor(full, mesh, {P}), titan::Error);
}

}  // namespace
