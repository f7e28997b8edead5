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
#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/lse_attention.hpp"
#include "titan/util/error.hpp"

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
    FlashForward a = fwd(in.q, in.k.narrow(2, 0, h), in.v.narrow(2, 0, h), false, std::nullopt, {});
    const FlashForward b = fwd(in.q, in.k.narrow(2, h, h), in.v.narrow(2, h, h), false, std::nullopt, {});
    at::Tensor out = a.out.to(at::kFloat).contiguous().clone(), lse = a.lse.clone();
    merge_attention_partial(out, lse, b.out, b.lse);
    const double d_out = rel_diff(out, ref.out), d_lse = abs_diff(lse, reference_lse(in, false));
    const FlashGrads g0 =
        bwd(in.dout, in.q, in.k.narrow(2, 0, h), in.v.narrow(2, 0, h), out, lse, false, std::nullopt, {});
    const FlashGrads g1 =
        bwd(in.dout, in.q, in.k.narrow(2, h, h), in.v.narrow(2, h, h), out, lse, false, std::nullopt, {});
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

// Per-row key bounds (ring attention's block-causal blocks): query row i
// sees keys key_begin[i] <= j of the block (and j <= i when causal). A
// block off the diagonal (not causal, more keys than queries) has rows
// that see every key, some, and none at all; a diagonal block has rows
// whose document starts inside it. The reference builds its mask with
// plain loops, in fp64; rows that see no key must come out 0 with lse
// −inf, and their (zeroed) upstream gradient gives them no gradient.
// Measured (printed), math and flash: out <= 3.2e-7, lse <= 5.2e-7,
// grads <= 4.2e-7; bound kTol.
TEST(LseAttention, PerRowKeyBoundsMatchAMaskedReference) {
  for (bool causal : {false, true}) {
    const int64_t sq = 40, sk = causal ? 40 : 56;
    attn_test::Inputs in = make_inputs(2, 4, 2, sq, 16, causal ? 31 : 32);
    in.k = make_inputs(2, 2, 2, sk, 16, 33).k, in.v = make_inputs(2, 2, 2, sk, 16, 34).v;
    // Row bounds that never decrease: batch 0 from 0 up to "sees none"
    // (sk, off the diagonal); batch 1 starts at 0 and later inside.
    std::vector<int64_t> kb(2 * sq);
    for (int64_t i = 0; i < sq; ++i) {
      kb[i] = causal ? std::min<int64_t>(i, (i / 7) * 7) : std::min<int64_t>(sk, std::max<int64_t>(0, (i - 10) * 2));
      kb[sq + i] = i < 15 ? 0 : std::min<int64_t>(causal ? i : sk, 15 + (i - 15) / 3);
    }
    const at::Tensor key_begin = at::tensor(kb, at::kLong).view({2, sq});
    at::Tensor visible = at::zeros({2, 1, sq, sk}, at::kBool);
    at::Tensor empty = at::zeros({2, 1, sq, 1}, at::kBool);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < sq; ++i) {
        bool any = false;
        for (int64_t j = 0; j < sk; ++j) {
          const bool vis = j >= kb[b * sq + i] && (!causal || j <= i);
          visible[b][0][i][j] = vis;
          any = any || vis;
        }
        empty[b][0][i][0] = !any;
      }
    // The reference over rows that see a key; an empty row sees every key
    // there (finite, so autograd stays clean) and gets no upstream gradient.
    const at::Tensor mask = visible | empty;
    const at::Tensor dout = in.dout.masked_fill(empty, 0.0f);
    at::Tensor q = in.q.to(at::kDouble).requires_grad_(), k = in.k.to(at::kDouble).requires_grad_(),
               v = in.v.to(at::kDouble).requires_grad_();
    const at::Tensor kr = k.repeat_interleave(2, 1), vr = v.repeat_interleave(2, 1);
    const at::Tensor scores = (at::matmul(q, kr.transpose(-2, -1)) / 4.0).masked_fill(mask.logical_not(), -INFINITY);
    const at::Tensor lse_ref = at::logsumexp(scores, -1).masked_fill(empty.squeeze(-1), -INFINITY);
    const at::Tensor out_ref = at::matmul(at::softmax(scores, -1), vr).masked_fill(empty, 0.0);
    out_ref.backward(dout.to(at::kDouble));
    for (bool math : {true, false}) {
      const FlashForward f = math ? math_attention_forward_lse(in.q, in.k, in.v, causal, std::nullopt, key_begin)
                                  : attention_forward_lse(in.q, in.k, in.v, causal, std::nullopt, key_begin);
      const FlashGrads g = math ? math_attention_backward_lse(dout, in.q, in.k, in.v, f.out, f.lse, causal,
                                                              std::nullopt, key_begin)
                                : attention_backward_lse(dout, in.q, in.k, in.v, f.out, f.lse, causal, std::nullopt,
                                                         key_begin);
      ASSERT_FALSE(f.out.isnan().any().item<bool>()) << (math ? "math" : "flash");
      const at::Tensor lse_inf_ok = (f.lse.isinf() == lse_ref.isinf()).all();
      EXPECT_TRUE(lse_inf_ok.item<bool>()) << "rows that see no key must have lse -inf, and only they";
      const at::Tensor finite = lse_ref.isfinite();
      const double d_out = rel_diff(f.out, out_ref.detach());
      const double d_lse = abs_diff(f.lse.masked_fill(finite.logical_not(), 0), lse_ref.masked_fill(finite.logical_not(), 0));
      const double d_grad = std::max({rel_diff(g.dq, q.grad()), rel_diff(g.dk, k.grad()), rel_diff(g.dv, v.grad())});
      std::printf("[measured] key bounds %s causal=%d: out %.3g, lse %.3g, grads %.3g\n", math ? "math " : "flash",
                  causal, d_out, d_lse, d_grad);
      EXPECT_LE(d_out, kTol);
      EXPECT_LE(d_lse, kTol);
      EXPECT_LE(d_grad, kTol);
    }
  }
  // Bounds that decrease, or pass the diagonal under causal, are refused.
  const auto in = make_inputs(1, 2, 2, 8, 16, 3);
  const at::Tensor down = at::tensor(std::vector<int64_t>{0, 0, 2, 2, 1, 1, 1, 1}, at::kLong).view({1, 8});
  const at::Tensor past = at::tensor(std::vector<int64_t>{0, 0, 3, 3, 5, 5, 5, 5}, at::kLong).view({1, 8});
  EXPECT_THROW(attention_forward_lse(in.q, in.k, in.v, false, std::nullopt, down), titan::Error);
  EXPECT_THROW(attention_forward_lse(in.q, in.k, in.v, true, std::nullopt, past), titan::Error);
  EXPECT_NO_THROW(attention_forward_lse(in.q, in.k, in.v, false, std::nullopt, past));
}

// document_key_begin: the count of a block's keys before each row's
// document start, for keys that are not contiguous window positions (a
// head-tail rank's two chunks).
TEST(LseAttention, DocumentKeyBeginCountsTheKeysBeforeEachStart) {
  const at::Tensor starts = at::tensor(std::vector<int64_t>{0, 3, 4, 9, 13, 20}, at::kLong).view({1, 6});
  const at::Tensor keys = at::tensor(std::vector<int64_t>{4, 5, 6, 7, 12, 13, 14, 15}, at::kLong);
  const at::Tensor want = at::tensor(std::vector<int64_t>{0, 0, 0, 4, 5, 8}, at::kLong).view({1, 6});
  EXPECT_TRUE(at::equal(document_key_begin(starts, keys), want)) << document_key_begin(starts, keys);
}

}  // namespace
