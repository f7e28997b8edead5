// The CPU flash kernel (forward and backward) against the fp64 math
// reference: causal and not, GQA 1/2/4, sequence lengths that are not a
// multiple of the tiles, head dims 64 and 128, fp32 and bf16, both tile
// product engines, and small tiles so that many tiles and dq flushes occur.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "attention_test_util.hpp"
#include "titan/ops/attention/flash_cpu.hpp"
#include "titan/ops/attention/flash_function.hpp"
#include "titan/util/error.hpp"

using namespace titan::ops;
using attn_test::rel_diff;

namespace {

struct Case {
  bool causal;
  int64_t rep;  // query heads per kv head
  int64_t seq;
  int64_t head_dim;
};

std::string name(const Case& c) {
  return std::string(c.causal ? "causal" : "full") + " rep=" + std::to_string(c.rep) + " S=" +
         std::to_string(c.seq) + " D=" + std::to_string(c.head_dim);
}

// Runs flash through its autograd Function and returns the four tensors.
attn_test::Result run_flash(const attn_test::Inputs& in, bool causal, const FlashOptions& opts) {
  at::Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(),
             v = in.v.clone().requires_grad_();
  at::Tensor out = flash_attention(q, k, v, causal, std::nullopt, opts);
  out.backward(in.dout);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

struct Worst {
  double out = 0, dq = 0, dk = 0, dv = 0;
  void update(const attn_test::Result& got, const attn_test::Result& ref, const std::string& what) {
    const double o = rel_diff(got.out, ref.out), q = rel_diff(got.dq, ref.dq), k = rel_diff(got.dk, ref.dk),
                 v = rel_diff(got.dv, ref.dv);
    std::printf("  %-28s out %.2e  dq %.2e  dk %.2e  dv %.2e\n", what.c_str(), o, q, k, v);
    out = std::max(out, o), dq = std::max(dq, q), dk = std::max(dk, k), dv = std::max(dv, v);
  }
  double max() const { return std::max({out, dq, dk, dv}); }
};

// 100 and 300 are not multiples of the default tiles (64 queries, 256 keys);
// 300 needs two kv tiles, the second a tail; 1 is a lone row.
const Case kCases[] = {
    {false, 1, 100, 64}, {true, 1, 100, 64},  {false, 2, 300, 64}, {true, 2, 300, 64},
    {false, 4, 300, 128}, {true, 4, 300, 128}, {true, 1, 1, 64},   {true, 4, 257, 128},
};

}  // namespace

TEST(FlashAttention, Fp32MatchesMathForwardAndBackward) {
  // fp32 vs the fp64 reference. The floor measured here (exp_u20, fp32
  // sums in another order than one softmax) was ≤ 1.9e-6 relative on every
  // tensor for these shapes (worst: out and dv at D=128, non-causal, S=300);
  // fp32 math_attention itself sits at ~4e-7..6e-7. 5e-6 leaves room for
  // other BLAS blockings, not for a wrong mask or a missed tile (≥ 1e-2).
  Worst worst;
  for (const Case& c : kCases) {
    const auto in = attn_test::make_inputs(2, 2 * c.rep, 2, c.seq, c.head_dim, 7);
    const auto ref = attn_test::math_reference(in, c.causal);
    worst.update(run_flash(in, c.causal, {}), ref, name(c));
    // Small tiles: many tiles per row, many kv tiles per thread, so the dq
    // hand-over between threads and groups happens many times.
    FlashOptions small;
    small.q_tile = 16, small.kv_tile = 24;
    worst.update(run_flash(in, c.causal, small), ref, name(c) + " tiles 16/24");
  }
  std::printf("worst fp32 relative difference: out %.2e dq %.2e dk %.2e dv %.2e\n", worst.out, worst.dq, worst.dk,
              worst.dv);
  EXPECT_LT(worst.max(), 5e-6);
}

TEST(FlashAttention, AtenTileEngineMatchesBlasEngine) {
  // The two tile-product engines compute the same sums in possibly
  // different orders: equal to fp32 rounding (measured 0: MKL under both).
  const auto in = attn_test::make_inputs(1, 4, 2, 200, 64, 11);
  FlashOptions aten;
  aten.gemm = TileGemm::aten;
  const auto a = run_flash(in, true, {}), b = run_flash(in, true, aten);
  const double d = std::max({rel_diff(a.out, b.out), rel_diff(a.dq, b.dq), rel_diff(a.dk, b.dk),
                             rel_diff(a.dv, b.dv)});
  std::printf("blas vs aten engine: %.2e\n", d);
  EXPECT_LT(d, 5e-6);
}

TEST(FlashAttention, Bf16MatchesFp32MathWithinBf16Rounding) {
  // bf16 inputs, fp32 accumulation; the reference is fp64 math on the same
  // (bf16-valued) inputs. The measured error is bf16's: the output and the
  // gradients are rounded to 8 mantissa bits (2^-8 = 3.9e-3) and P / dS are
  // rounded before their products. Measured worst 4.6e-3 relative to each
  // tensor's largest entry (dk, S=100); 1e-2 is about 2× that.
  Worst worst;
  for (const Case& c : kCases) {
    const auto in = attn_test::make_inputs(2, 2 * c.rep, 2, c.seq, c.head_dim, 5, at::kBFloat16);
    const auto ref = attn_test::math_reference(in, c.causal);
    const auto got = run_flash(in, c.causal, {});
    ASSERT_EQ(got.out.scalar_type(), at::kBFloat16);
    ASSERT_EQ(got.dk.scalar_type(), at::kBFloat16);
    worst.update(got, ref, name(c) + " bf16");
  }
  std::printf("worst bf16 relative difference: out %.2e dq %.2e dk %.2e dv %.2e\n", worst.out, worst.dq, worst.dk,
              worst.dv);
  EXPECT_LT(worst.max(), 1e-2);
}

TEST(FlashAttention, LseIsTheRowLogSumExp) {
  const auto in = attn_test::make_inputs(1, 2, 1, 130, 64, 3);
  for (bool causal : {false, true}) {
    FlashForward f = flash_attention_forward(in.q, in.k, in.v, causal);
    at::Tensor s = at::matmul(in.q.to(at::kDouble), in.k.to(at::kDouble).transpose(-2, -1)) / 8.0;
    if (causal) s = s.masked_fill(at::ones({130, 130}, at::kBool).triu(1), -INFINITY);
    const double d = (f.lse.to(at::kDouble) - at::logsumexp(s, -1)).abs().max().item<double>();
    std::printf("lse %s: max |diff| %.2e\n", causal ? "causal" : "full", d);
    EXPECT_LT(d, 1e-5);  // measured 5.3e-7 (log of an fp32 sum)
  }
}

TEST(FlashAttention, StridedInputsAndExplicitScale) {
  // The model hands [B, S, H, D] buffers transposed to [B, H, S, D]: read
  // through strides, same result as contiguous copies.
  const auto in = attn_test::make_inputs(2, 4, 2, 70, 64, 9);
  const at::Tensor qt = in.q.transpose(1, 2).contiguous().transpose(1, 2);
  const at::Tensor a = flash_attention_forward(qt, in.k, in.v, true, 0.3).out;
  const at::Tensor b = math_attention(in.q.to(at::kDouble), in.k.to(at::kDouble), in.v.to(at::kDouble), true, 0.3);
  EXPECT_LT(rel_diff(a, b), 5e-6);
}

TEST(FlashAttention, BackwardKeepsAGivenScaleEvenBelowZero) {
  // The backward used to take a saved scale ≤ 0 for "none" and fall back to
  // 1/√D: a given -0.2 trained with wrong gradients (7e-1 off).
  const auto in = attn_test::make_inputs(1, 2, 2, 40, 64, 13);
  for (double scale : {0.3, -0.2}) {
    at::Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(),
               v = in.v.clone().requires_grad_();
    flash_attention(q, k, v, true, scale).backward(in.dout);
    at::Tensor qd = in.q.to(at::kDouble).requires_grad_(), kd = in.k.to(at::kDouble).requires_grad_(),
               vd = in.v.to(at::kDouble).requires_grad_();
    math_attention(qd, kd, vd, true, scale).backward(in.dout.to(at::kDouble));
    const double d = std::max({rel_diff(q.grad(), qd.grad()), rel_diff(k.grad(), kd.grad()),
                               rel_diff(v.grad(), vd.grad())});
    std::printf("scale %+.1f: gradients vs fp64 math %.2e\n", scale, d);
    EXPECT_LT(d, 5e-6);  // the fp32 floor of Fp32MatchesMathForwardAndBackward
  }
}

TEST(FlashAttention, BadInputsAreOneLineErrors) {
  const auto in = attn_test::make_inputs(1, 3, 2, 8, 64, 1);
  EXPECT_THROW(flash_attention_forward(in.q, in.k, in.v, false), titan::Error);  // 3 % 2 != 0
  EXPECT_THROW(flash_attention_forward(in.q.to(at::kDouble), in.k, in.v, false), titan::Error);
  const auto b = attn_test::make_inputs(1, 2, 2, 8, 64, 1);
  EXPECT_THROW(flash_attention_forward(b.q, b.k.narrow(2, 0, 4), b.v.narrow(2, 0, 4), true), titan::Error);
}
