// Gradient clipping by global norm. Runs as 1 and 2 ranks: every rank checks
// the local cases against torch::nn::utils::clip_grad_norm_, and the sharded
// cases split one full gradient (the same on every rank: same seed) into
// per-rank shards, clip them with the group, and compare with clipping the
// full gradient on one rank.
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "support/dist_test.hpp"
#include "titan/optim/grad_clip.hpp"
#include "titan/util/error.hpp"

using titan::optim::clip_grad_norm;
using titan::optim::kInfNorm;
using titan::testing::world;

namespace {

const std::vector<std::vector<int64_t>> kShapes = {{6, 5}, {8}, {4, 3, 2}, {10, 7}};

// Parameters whose gradients are fixed by `seed` (the same on every rank).
std::vector<torch::Tensor> make_params(uint64_t seed, double grad_scale,
                                       torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> ps;
  for (const auto& s : kShapes) {
    auto p = torch::randn(s).to(dtype).requires_grad_();
    p.mutable_grad() = (torch::randn(s) * grad_scale).to(dtype);
    ps.push_back(p);
  }
  return ps;
}

std::vector<torch::Tensor> clone_with_grads(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) {
    auto c = p.detach().clone().requires_grad_();
    c.mutable_grad() = p.grad().clone();
    out.push_back(c);
  }
  return out;
}

// Rank r's shard of each parameter: rows split with tensor_split, so sizes
// that do not divide by the world size give uneven (even empty) shards.
std::vector<torch::Tensor> shard(const std::vector<torch::Tensor>& ps, int rank, int n) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) {
    auto s = p.detach().tensor_split(n, 0)[rank].clone().requires_grad_();
    s.mutable_grad() = p.grad().tensor_split(n, 0)[rank].clone();
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST(GradClip, MatchesTorchClipGradNorm) {
  for (double norm_type : {2.0, 1.0, 3.0, kInfNorm}) {
    for (double max_norm : {0.5, 1e6}) {  // clipping and not clipping
      auto ps = make_params(1, 1.0);
      auto ref = clone_with_grads(ps);
      const double got = clip_grad_norm(ps, max_norm, norm_type);
      const double want = torch::nn::utils::clip_grad_norm_(ref, max_norm, norm_type);
      EXPECT_NEAR(got, want, 1e-5 * want) << "p=" << norm_type << " max=" << max_norm;
      for (size_t i = 0; i < ps.size(); ++i) TITAN_EXPECT_CLOSE(ps[i].grad(), ref[i].grad(), 1e-6);
    }
  }
}

TEST(GradClip, TotalNormIsHandComputable) {
  // Gradients (3, 4) and (12): the 2-norm is √(9 + 16 + 144) = 13.
  auto a = torch::zeros({2}).requires_grad_();
  auto b = torch::zeros({1}).requires_grad_();
  a.mutable_grad() = torch::tensor({3.0f, 4.0f});
  b.mutable_grad() = torch::tensor({12.0f});
  const double n = clip_grad_norm({a, b}, 1.3);
  EXPECT_NEAR(n, 13.0, 1e-6);
  // Scaled by 1.3 / (13 + 1e-6): the new norm is 1.3 (up to the 1e-6).
  EXPECT_NEAR(a.grad()[0].item<float>(), 0.3f, 1e-6);
  EXPECT_NEAR(b.grad()[0].item<float>(), 1.2f, 1e-6);
}

TEST(GradClip, Bf16GradsAccumulateInFp32) {
  auto ps = make_params(2, 1.0, torch::kBFloat16);
  std::vector<torch::Tensor> as_f32;
  for (auto& p : ps) {
    auto c = p.detach().to(torch::kFloat).requires_grad_();
    c.mutable_grad() = p.grad().to(torch::kFloat);
    as_f32.push_back(c);
  }
  const double got = titan::optim::total_grad_norm(ps, 2.0, {});
  const double want = titan::optim::total_grad_norm(as_f32, 2.0, {});
  EXPECT_NEAR(got, want, 1e-6 * want);
}

TEST(GradClip, NonFiniteNormIsReturnedAndGradsLeftAlone) {
  auto ps = make_params(3, 1.0);
  ps[1].mutable_grad()[0] = std::numeric_limits<float>::quiet_NaN();
  auto before = clone_with_grads(ps);
  EXPECT_TRUE(std::isnan(clip_grad_norm(ps, 1.0)));
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_TRUE(ps[i].grad().allclose(before[i].grad(), 0.0, 0.0, /*equal_nan=*/true)) << i;
  ps[1].mutable_grad()[0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(clip_grad_norm(ps, 1.0)));
  EXPECT_TRUE(std::isinf(clip_grad_norm(ps, 1.0, kInfNorm)));
}

TEST(GradClip, NoGradientsAndBadArguments) {
  auto p = torch::zeros({3}).requires_grad_();
  EXPECT_EQ(clip_grad_norm({p}, 1.0), 0.0);
  EXPECT_THROW(clip_grad_norm({p}, 0.0), titan::Error);
  EXPECT_THROW(clip_grad_norm({p}, 1.0, -2.0), titan::Error);
}

TEST(GradClipSharded, ShardsGiveTheFullGradientsNorm) {
  const auto& g = *world().group();
  for (double norm_type : {2.0, 1.0, kInfNorm}) {
    auto full = make_params(7, 3.0);
    auto mine = shard(full, g.rank(), g.size());
    const double want = torch::nn::utils::clip_grad_norm_(full, 1.0, norm_type);
    const double got = clip_grad_norm(mine, 1.0, norm_type, &g);
    EXPECT_NEAR(got, want, 1e-5 * want) << "p=" << norm_type << " rank " << g.rank();
    // Each rank's clipped shard is its part of the clipped full gradient.
    auto expect = shard(full, g.rank(), g.size());
    for (size_t i = 0; i < mine.size(); ++i) TITAN_EXPECT_CLOSE(mine[i].grad(), expect[i].grad(), 1e-6);
  }
}

TEST(GradClipSharded, WithoutTheGroupEachRankSeesOnlyItsShard) {
  // The mistake the group argument prevents: a local-only norm is smaller
  // than the full one whenever another rank holds part of the gradient.
  const auto& g = *world().group();
  if (g.size() == 1) GTEST_SKIP() << "needs 2+ ranks";
  auto full = make_params(8, 1.0);
  auto mine = shard(full, g.rank(), g.size());
  const double local = titan::optim::total_grad_norm(mine, 2.0, {});
  const double global = titan::optim::total_grad_norm(mine, 2.0, {&g});
  EXPECT_LT(local, global);
  // And the partials add up: Σ_r local_r² = global².
  auto partial = titan::optim::grad_norm_partial(mine, 2.0);
  g.all_reduce(partial);
  EXPECT_NEAR(std::sqrt(partial.item<double>()), global, 1e-9 * global);
}

// The trainer's step clips on the device (total_grad_norm_tensor,
// scale_grads by a tensor) so that the norm reaches the host only in the
// step's one copy. Same norm and same clipped gradients, bit for bit, as
// the host path, sharded or not, below and above the limit, and NaN/inf
// norms leave the gradients alone.
TEST(GradClipSharded, DeviceNormAndScalingAreTheHostPathsBitForBit) {
  const auto& g = *world().group();
  for (double grad_scale : {3.0, 1e-3}) {  // clipped, and below the limit (coef >= 1)
    for (double norm_type : {2.0, kInfNorm}) {
      auto full = make_params(11, grad_scale);
      auto host = shard(full, g.rank(), g.size());
      auto dev = clone_with_grads(host);
      const double want = titan::optim::total_grad_norm(host, norm_type, {&g});
      const at::Tensor got = titan::optim::total_grad_norm_tensor(dev, norm_type, {&g});
      ASSERT_EQ(got.dim(), 0);
      EXPECT_EQ(got.scalar_type(), at::kDouble);
      EXPECT_EQ(got.item<double>(), want) << "p=" << norm_type << " scale " << grad_scale;
      titan::optim::scale_grads(host, 1.0, want);
      titan::optim::scale_grads(dev, 1.0, got);
      for (size_t i = 0; i < host.size(); ++i)
        EXPECT_TRUE(torch::equal(dev[i].grad(), host[i].grad())) << i << " scale " << grad_scale;
    }
  }
}

TEST(GradClip, DeviceScalingLeavesGradsAloneForNonFiniteNorms) {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    auto ps = make_params(12, 1.0);
    auto before = clone_with_grads(ps);
    titan::optim::scale_grads(ps, 1.0, at::scalar_tensor(bad, at::kDouble));
    for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(torch::equal(ps[i].grad(), before[i].grad())) << i;
  }
  EXPECT_THROW(titan::optim::scale_grads(make_params(12, 1.0), 0.0, at::scalar_tensor(1.0, at::kDouble)),
               titan::Error);
}
