// The model's building blocks: RoPE (tables and rotation), RMSNorm,
// trunc_normal_, repeat_kv.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "titan/models/llama3/attention.hpp"
#include "titan/ops/init.hpp"
#include "titan/ops/rms_norm.hpp"
#include "titan/ops/rope.hpp"
#include "titan/util/error.hpp"

using namespace titan::ops;

TEST(Rope, ScaledFrequenciesFollowTheThreeBands) {
  // Llama 3 8B's table: head_dim 128, theta 500000, factor 8 around 8192.
  RopeScaling s;
  at::Tensor angles = rope_angles(128, 2, 500000.0, s);
  ASSERT_EQ(angles.sizes().vec(), (std::vector<int64_t>{2, 64}));
  EXPECT_TRUE(angles[0].eq(0).all().item<bool>());
  auto freqs = angles[1];  // position 1: angle = frequency
  for (int64_t i = 0; i < 64; ++i) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * i / 128.0);
    const double wavelen = 2 * M_PI / f;
    double want;
    if (wavelen < 8192.0 / 4) want = f;              // high frequencies kept
    else if (wavelen > 8192.0 / 1) want = f / 8.0;   // low frequencies slowed by 8
    else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8.0 + smooth * f;
    }
    EXPECT_NEAR(freqs[i].item<double>(), want, 1e-6 * want + 1e-12) << "i=" << i;
  }
  s.enabled = false;
  EXPECT_NEAR(rope_angles(128, 2, 500000.0, s)[1][63].item<double>(), std::pow(500000.0, -126.0 / 128), 1e-12);
}

TEST(Rope, RotationEqualsComplexMultiplicationOfInterleavedPairs) {
  torch::manual_seed(0);
  auto x = torch::randn({2, 5, 3, 8});
  RopeTable t = make_rope_table(8, 16, 10000.0, RopeScaling{}, torch::kCPU);
  auto cos = t.cos.narrow(0, 0, 5), sin = t.sin.narrow(0, 0, 5);
  auto got = apply_rope(x, cos, sin);
  auto xc = torch::view_as_complex(x.view({2, 5, 3, 4, 2}));
  auto rot = torch::polar(torch::ones_like(cos), torch::atan2(sin, cos)).view({1, 5, 1, 4});
  auto want = torch::view_as_real(xc * rot).flatten(3);
  EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6));
  // Rotations keep the norm of every pair; position 0 is the identity.
  EXPECT_TRUE(torch::allclose(got.narrow(1, 0, 1), x.narrow(1, 0, 1)));
  EXPECT_TRUE(torch::allclose(got.norm(2, -1), x.norm(2, -1), 1e-5, 1e-5));
  // bf16 in, bf16 out (computed in fp32).
  EXPECT_EQ(apply_rope(x.to(torch::kBFloat16), cos, sin).scalar_type(), torch::kBFloat16);
  EXPECT_THROW(apply_rope(x, t.cos, t.sin), titan::Error);
}

TEST(RmsNorm, FusedOpMatchesTheFormula) {
  torch::manual_seed(1);
  RMSNorm norm(32, 1e-5);
  norm->reset_parameters();
  EXPECT_TRUE(norm->weight.eq(1).all().item<bool>());
  {
    torch::NoGradGuard ng;
    norm->weight.uniform_(0.5, 1.5);
  }
  auto x = torch::randn({4, 7, 32}) * 3.0;
  auto got = norm(x);
  auto want = rms_norm_reference(x, norm->weight, 1e-5);
  EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6));
  auto manual = x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-5) * norm->weight;
  EXPECT_TRUE(torch::allclose(got, manual, 1e-5, 1e-6));
}

TEST(TruncNormal, RespectsAbsoluteBoundsAndMoments) {
  torch::manual_seed(2);
  auto t = torch::empty({200000});
  trunc_normal_(t, 0.0, 1.0, -0.5, 1.0);
  EXPECT_GE(t.min().item<double>(), -0.5);
  EXPECT_LE(t.max().item<double>(), 1.0);
  // Mean of N(0,1) truncated to [-0.5, 1]: (φ(-0.5) - φ(1)) / (Φ(1) - Φ(-0.5)).
  auto phi = [](double z) { return std::exp(-z * z / 2) / std::sqrt(2 * M_PI); };
  auto Phi = [](double z) { return 0.5 * (1 + std::erf(z / std::sqrt(2.0))); };
  const double mean = (phi(-0.5) - phi(1.0)) / (Phi(1.0) - Phi(-0.5));
  EXPECT_NEAR(t.mean().item<double>(), mean, 0.005);
  // Default bounds are absolute ±2, not ±2σ: with std 0.02 nothing is clipped.
  auto w = torch::empty({100000});
  trunc_normal_(w, 0.0, 0.02);
  EXPECT_NEAR(w.std().item<double>(), 0.02, 0.0005);
  EXPECT_THROW(trunc_normal_(w, 0.0, -1.0), titan::Error);
  // On the meta device it is a no-op that still checks its arguments.
  auto m = torch::empty({1000, 1000}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_NO_THROW(trunc_normal_(m, 0.0, 0.02));
}

TEST(RepeatKv, QueryHeadReadsKvHeadIntegerDivision) {
  auto x = torch::arange(2 * 3 * 2 * 4, torch::kFloat).view({2, 3, 2, 4});
  auto r = titan::models::llama3::repeat_kv(x, 3);
  ASSERT_EQ(r.sizes().vec(), (std::vector<int64_t>{2, 3, 6, 4}));
  for (int64_t h = 0; h < 6; ++h)
    EXPECT_TRUE(torch::equal(r.select(2, h), x.select(2, h / 3))) << "head " << h;
  EXPECT_TRUE(titan::models::llama3::repeat_kv(x, 1).is_same(x));
}
