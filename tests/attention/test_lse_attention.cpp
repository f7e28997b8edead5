// The pieces of ring attention on one process: attention that returns its
// log-sum-exp (the CPU flash kernel and the math path every other device
// takes), the backward of one block of keys from the final statistics,
// and the merge of two partial results.
//
// References are independent: the log-sum-exp is at::logsumexp of the
// explicit fp64 scores, gradients come from autograd through fp64
// math_attention. Measured (fp32, printed by each test), math and flash
// paths alike: out <= 3.4e-7 relative, lse <= 4.7e-7 absolute, grads <=
// 6.4e-7 relative; two key blocks merged: out <= 2.4e-7, lse <= 4.3e-7,
// summed block gradients <= 5.8e-7. Bound 5e-6 (about 8x the floor).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "attention_test_util.hpp"
#include "titan/ops/attention/lse_attention.hpp"

namespace {

using attn_test::make_inputs;
using attn_test::rel_diff;
using namespace titan::ops;

constexpr double kTol = 5e-6;

// fp64 log-sum-exp of the scaled scores, causal masked, per query head.
at::Tensor reference_lse(const attn_test::Inputs& in, bool causal) {
  const int64_t rep = in.q.size(1) / in.k.size(1);
  const at::Tensor q = in.q.to(at::kDouble), k = in.k.to(at::kDouble).repeat_interleave(rep, 1);
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  if (causal) s = s.masked_fill(at::ones({q.size(2), k.size(2)}, at::kBool).triu(1), -INFINITY);
  return at::logsumexp(s, -1);
}

double abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(LseAttention, MathAndFlashPathsMatchTheReference) {
  for (bool causal : {false, true}) {
    const auto in = make_inputs(2, 4, 2, 48, 16, causal ? 11 : 12);
    const auto ref = attn_test::math_reference(in, causal);
    const at::Tensor lse_ref = reference_lse(in, causal);
    for (bool math : {true, false}) {
      const FlashForward f = math ? math_attention_forward_lse(in.q, in.k, in.v, causal)
                                  : attention_forward_lse(in.q, in.k, in.v, causal);
      const FlashGrads g = math ? math_attention_backward_lse(in.dout, in.q, in.k, in.v, f.out, f.lse, causal)
                                : attention_backward_lse(in.dout, in.q, in.k, in.v, f.out, f.lse, causal);
      const double d_out = rel_diff(f.out, ref.out), d_lse = abs_diff(f.lse, lse_ref);
      const double d_grad = std::max({rel_diff(g.dq, ref.dq), rel_diff(g.dk, ref.dk), rel_diff(g.dv, ref.dv)});
      std::printf("[measured] %s causal=%d: out %.3g, lse %.3g, grads %.3g\n", math ? "math " : "flash", causal,
                  d_out, d_lse, d_grad);
      EXPECT_LE(d_out, kTol);
      EXPECT_LE(d_lse, kTol);
      EXPECT_LE(d_grad, kTol);
    }
  }
}

// Keys split in two blocks [0, s/2) and [s/2, s): each block's partial
// result merged through the log-sum-exps is the full attention, and the
// blocks' backwards from the final out/lse add up to the full gradients.
TEST(LseAttention, TwoKeyBlocksMergeIntoTheWhole) {
  for (bool use_math : {true, false}) {
    const auto in = make_inputs(1, 4, 1, 40, 8, 21);
    const auto ref = attn_test::math_reference(in, /*causal=*/false);
    const int64_t h = in.k.size(2) / 2;
    auto fwd = use_math ? math_attention_forward_lse : attention_forward_lse;
    auto bwd = use_math ? math_attention_backward_lse : attention_backward_lse;
    FlashForward a = fwd(in.q, in.k.narrow(2, 0, h), in.v.narrow(2, 0, h), false, std::nullopt);
    const FlashForward b = fwd(in.q, in.k.narrow(2, h, h), in.v.narrow(2, h, h), false, std::nullopt);
    at::Tensor out = a.out.to(at::kFloat).contiguous().clone(), lse = a.lse.clone();
    merge_attention_partial(out, lse, b.out, b.lse);
    const double d_out = rel_diff(out, ref.out), d_lse = abs_diff(lse, reference_lse(in, false));
    const FlashGrads g0 = bwd(in.dout, in.q, in.k.narrow(2, 0, h), in.v.narrow(2, 0, h), out, lse, false, std::nullopt);
    const FlashGrads g1 = bwd(in.dout, in.q, in.k.narrow(2, h, h), in.v.narrow(2, h, h), out, lse, false, std::nullopt);
    const double d_dq = rel_diff(g0.dq + g1.dq, ref.dq);
    const double d_dk = rel_diff(at::cat({g0.dk, g1.dk}, 2), ref.dk);
    const double d_dv = rel_diff(at::cat({g0.dv, g1.dv}, 2), ref.dv);
    std::printf("[measured] merge (%s): out %.3g, lse %.3g, dq %.3g, dk %.3g, dv %.3g\n", use_math ? "math" : "flash",
                d_out, d_lse, d_dq, d_dk, d_dv);
    EXPECT_LE(d_out, kTol);
    EXPECT_LE(d_lse, kTol);
    EXPECT_LE(std::max({d_dq, d_dk, d_dv}), kTol);
  }
}

// A row no key reached on either side stays 0 with lse −inf (not NaN);
// one empty side leaves the other unchanged.
TEST(LseAttention, MergeWithAnEmptySide) {
  const float ninf = -std::numeric_limits<float>::infinity();
  at::Tensor out = at::zeros({1, 1, 2, 3}), lse = at::full({1, 1, 2}, ninf);
  const at::Tensor ob = at::tensor({1.f, 2.f, 3.f, 0.f, 0.f, 0.f}).view({1, 1, 2, 3});
  const at::Tensor lb = at::tensor({0.5f, ninf}).view({1, 1, 2});
  merge_attention_partial(out, lse, ob, lb);
  EXPECT_TRUE(at::equal(out, ob)) << out;
  EXPECT_FLOAT_EQ(lse[0][0][0].item<float>(), 0.5f);
  EXPECT_TRUE(std::isinf(lse[0][0][1].item<float>()));
  EXPECT_FALSE(out.isnan().any().item<bool>());
}

}  // namespace
