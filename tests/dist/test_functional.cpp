// Gradients of the functional collectives against a single-process
// computation: every rank rebuilds all ranks' inputs (seeded by rank), runs
// the same math without communication, and takes d(Σ_q loss_q)/d x_rank.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include <functional>

#include "support/dist_test.hpp"
#include "titan/dist/functional.hpp"

namespace F = titan::dist::functional;
using titan::dist::ReduceOp;
using titan::testing::opts;
using titan::testing::seeded;
using titan::testing::world;

namespace {


// y_q for every q, computed on one process from all the inputs.
using Direct = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& xs)>;
// y_rank, computed with communication.
using Distributed = std::function<at::Tensor(const at::Tensor& x)>;

// Runs both ways and compares the output and d(Σ loss)/dx of this rank.
void check(std::vector<int64_t> in_shape, const Direct& direct, const Distributed& distributed) {
  const int n = world().size(), rank = world().rank();
  std::vector<at::Tensor> xs;
  for (int q = 0; q < n; ++q) xs.push_back(seeded(q + 1, in_shape).requires_grad_(true));
  std::vector<at::Tensor> ys = direct(xs);
  at::Tensor total = at::zeros({}, opts());
  for (int q = 0; q < n; ++q) total = total + (ys[q] * seeded(100 + q, ys[q].sizes().vec())).sum();
  total.backward();

  at::Tensor x = seeded(rank + 1, in_shape).requires_grad_(true);
  at::Tensor y = distributed(x);
  TITAN_EXPECT_CLOSE(y, ys[rank].detach(), 1e-5);
  (y * seeded(100 + rank, y.sizes().vec())).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  // An input that reaches no output (a non-root of broadcast) has no
  // gradient in the reference: that is a zero gradient.
  at::Tensor expected = xs[rank].grad().defined() ? xs[rank].grad() : at::zeros_like(xs[rank]);
  TITAN_EXPECT_CLOSE(x.grad(), expected, 1e-5);
}

at::Tensor sum_of(const std::vector<at::Tensor>& xs) {
  at::Tensor s = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) s = s + xs[i];
  return s;
}

TEST(Functional, AllReduceSumAndAvg) {
  const auto& g = *world().group();
  const int n = g.size();
  check({4, 3}, [&](const auto& xs) { return std::vector<at::Tensor>(n, sum_of(xs)); },
        [&](const at::Tensor& x) { return F::all_reduce(x, g); });
  check({4, 3}, [&](const auto& xs) { return std::vector<at::Tensor>(n, sum_of(xs) / n); },
        [&](const at::Tensor& x) { return F::all_reduce(x, g, ReduceOp::Avg); });
}

TEST(Functional, AllGatherBackwardIsReduceScatter) {
  const auto& g = *world().group();
  const int n = g.size();
  for (int64_t dim : {0, 1}) {
    check({2, 3}, [&](const auto& xs) { return std::vector<at::Tensor>(n, at::cat(xs, dim)); },
          [&](const at::Tensor& x) { return F::all_gather(x, g, dim); });
  }
}

TEST(Functional, ReduceScatterBackwardIsAllGather) {
  const auto& g = *world().group();
  const int n = g.size();
  for (int64_t dim : {0, 1}) {
    check({2 * n, n},
          [&](const auto& xs) {
            std::vector<at::Tensor> ys;
            for (int q = 0; q < n; ++q) ys.push_back(sum_of(xs).chunk(n, dim)[q]);
            return ys;
          },
          [&](const at::Tensor& x) { return F::reduce_scatter(x, g, dim); });
    check({2 * n, n},
          [&](const auto& xs) {
            std::vector<at::Tensor> ys;
            for (int q = 0; q < n; ++q) ys.push_back((sum_of(xs) / n).chunk(n, dim)[q]);
            return ys;
          },
          [&](const at::Tensor& x) { return F::reduce_scatter(x, g, dim, ReduceOp::Avg); });
  }
}

TEST(Functional, AllToAllBackwardIsTheReverseAllToAll) {
  const auto& g = *world().group();
  const int n = g.size();
  check({2 * n, 3},
        [&](const auto& xs) {
          std::vector<at::Tensor> ys;
          for (int q = 0; q < n; ++q) {
            std::vector<at::Tensor> parts;
            for (int p = 0; p < n; ++p) parts.push_back(xs[p].chunk(n, 0)[q]);
            ys.push_back(at::cat(parts, 1));
          }
          return ys;
        },
        [&](const at::Tensor& x) { return F::all_to_all(x, g, 0, 1); });
}

TEST(Functional, BroadcastBackwardReducesOntoTheRoot) {
  const auto& g = *world().group();
  const int n = g.size();
  const int root = n - 1;
  check({5}, [&](const auto& xs) { return std::vector<at::Tensor>(n, xs[root] * 1.0); },
        [&](const at::Tensor& x) { return F::broadcast(x, g, root); });
}

TEST(Functional, SendRecvCarryGradientsBack) {
  const auto& g = *world().group();
  const int rank = g.rank();
  if (g.size() % 2 != 0) GTEST_SKIP() << "pairs need an even world";
  // Even rank r sends 2·x_r to r+1, which computes loss = Σ(z · w).
  // d loss / d x_r = 2·w, which rank r receives through the send token.
  at::Tensor w = seeded(7, {6});
  if (rank % 2 == 0) {
    at::Tensor x = seeded(rank + 1, {6}).requires_grad_(true);
    at::Tensor token = F::send(x * 2, g, rank + 1);
    token.backward();
    ASSERT_TRUE(x.grad().defined());
    TITAN_EXPECT_CLOSE(x.grad(), w * 2, 1e-6);
  } else {
    at::Tensor like = at::empty({6}, opts()).requires_grad_(true);
    at::Tensor z = F::recv(like, g, rank - 1);
    TITAN_EXPECT_CLOSE(z, seeded(rank, {6}) * 2, 1e-6);
    (z * w).sum().backward();
  }
}

}  // namespace
