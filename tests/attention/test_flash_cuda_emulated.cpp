// The CUDA flash kernels' source (flash_cuda_kernels.cuh) run on CPU
// threads by cuda_emulation.hpp, against fp64 math attention: outputs,
// log-sum-exps and the three gradients, causal and not, GQA 1/2/4, lengths
// that are not a multiple of the 64-row tile, head dims 16 to 128, bf16 and
// fp16, and block-causal document masking. What it cannot check — the
// hardware's WMMA, memory model and speed — test_flash_cuda does on a GPU.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <vector>

#include "attention_test_util.hpp"
#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/flash_cpu.hpp"
#include "titan/ops/attention/flash_operands.hpp"
#include "titan/ops/attention/math_attention.hpp"

// After every LibTorch header: it defines CUDA's names as macros.
#include "cuda_emulation.hpp"
#include "titan/ops/attention/flash_cuda_kernels.cuh"

namespace {

using namespace titan;
namespace k = titan::ops::flash_cuda_detail::kernels;
using titan::ops::flash_detail::BackwardArgs;
using titan::ops::flash_detail::ForwardArgs;
struct Case {
  int64_t hq, hkv, seq, dim;
  bool causal;
  at::ScalarType dtype;
  int64_t doc_len = 0;  // > 0: documents of about this length, block-causal
  std::vector<int64_t> bos = {};  // or documents beginning exactly here
};

struct Outcome {
  at::Tensor out, lse, dq, dk, dv;
};

// What flash_attention_cuda.cpp does around the launches (the same
// flash_operands helpers), on CPU tensors.
template <typename T, int D>
Outcome run_emulated(const attn_test::Inputs& in, bool causal, const at::Tensor& bounds) {
  const at::Tensor &q = in.q, &kk = in.k, &v = in.v;
  ops::flash_detail::Problem p;
  p.batch = q.size(0), p.hq = q.size(1), p.hkv = kk.size(1), p.sq = q.size(2), p.sk = kk.size(2);
  p.d = D, p.causal = causal, p.bf16 = q.scalar_type() == at::kBFloat16;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  if (bounds.defined()) p.doc_start = bounds.data_ptr<int64_t>();
  ForwardArgs f;
  f.p = p;
  const ops::FlashForward fwd = ops::flash_detail::forward_operands(f, q, kk, v);
  const auto tiles = [](int64_t n) { return static_cast<unsigned>((n + k::kRows - 1) / k::kRows); };
  cuda_emu::launch({tiles(p.sq), static_cast<unsigned>(p.batch * p.hq), 1}, k::kThreads,
                   k::forward_smem_bytes<T, D>(), [&] { k::forward_kernel<T, D>(f); });

  BackwardArgs b;
  b.p = p;
  const at::Tensor dout = in.dout.to(q.scalar_type());
  const ops::flash_detail::BackwardBuffers buf =
      ops::flash_detail::backward_operands(b, dout, q, kk, v, fwd.out, fwd.lse, "emulated backward");
  cuda_emu::launch({tiles(p.sk), static_cast<unsigned>(p.batch * p.hkv), 1}, k::kThreads,
                   k::backward_smem_bytes<T, D>(), [&] { k::backward_kernel<T, D>(b); });
  return {fwd.out, fwd.lse, buf.dq, buf.dk, buf.dv};
}

template <typename T>
Outcome run_for_dim(const attn_test::Inputs& in, bool causal, const at::Tensor& doc_start) {
  switch (in.q.size(3)) {
    case 16: return run_emulated<T, 16>(in, causal, doc_start);
    case 32: return run_emulated<T, 32>(in, causal, doc_start);
    case 64: return run_emulated<T, 64>(in, causal, doc_start);
    default: return run_emulated<T, 128>(in, causal, doc_start);
  }
}

// Documents of doc_len ± a few tokens (so that they straddle tiles), or
// beginning at the given positions.
at::Tensor document_starts_of(int64_t batch, int64_t seq, const Case& c) {
  at::Tensor tokens = at::ones({batch, seq}, at::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t pos : c.bos) tokens[b][pos] = 0;  // BOS = 0
    for (int64_t pos = 0, i = 0; c.doc_len > 0 && pos < seq; pos += c.doc_len + (i++ % 3) * 7 - 5 + b)
      tokens[b][pos] = 0;
  }
  return ops::document_starts(tokens, /*bos_id=*/0);
}

struct Errors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  double max() const { return std::max({out, lse, dq, dk, dv}); }
};

// Key j visible to query i, [B, 1, Sq, Sk]: causal j <= i; row bounds
// (a window's doc_start or a ring block's first visible keys) j >= bounds[i].
at::Tensor visible_mask(int64_t batch, int64_t sq, int64_t sk, bool causal, const at::Tensor& bounds) {
  const at::Tensor i = at::arange(sq).view({1, 1, sq, 1}), j = at::arange(sk).view({1, 1, 1, sk});
  at::Tensor m = at::ones({batch, 1, sq, sk}, at::kBool);
  if (causal) m = m & (j <= i);
  if (bounds.defined()) m = m & (j >= bounds.view({batch, 1, sq, 1}));
  return m;
}

// The independent reference: explicit softmax in fp64 over the visible
// keys; a row that sees no key has out 0, no gradient and lse −inf.
Errors errors_of(const Outcome& o, const attn_test::Inputs& in, bool causal, const at::Tensor& bounds) {
  at::Tensor q = in.q.to(at::kDouble).requires_grad_(), kk = in.k.to(at::kDouble).requires_grad_(),
             v = in.v.to(at::kDouble).requires_grad_();
  const int64_t rep = q.size(1) / kk.size(1);
  const at::Tensor mask = visible_mask(q.size(0), q.size(2), kk.size(2), causal, bounds);
  const at::Tensor seen = mask.any(-1, /*keepdim=*/true);
  at::Tensor scores = at::matmul(q, kk.repeat_interleave(rep, 1).transpose(-2, -1)) /
                      std::sqrt(static_cast<double>(q.size(3)));
  scores = scores.masked_fill(mask.logical_not(), -INFINITY);
  const at::Tensor lse_ref = at::logsumexp(scores.detach(), -1);
  // Unseen rows get finite scores so that softmax stays free of NaN, then 0.
  const at::Tensor probs = at::softmax(at::where(seen, scores, at::zeros_like(scores)), -1) * seen;
  at::Tensor ref = at::matmul(probs, v.repeat_interleave(rep, 1));
  ref.backward(in.dout.to(at::kDouble));
  const at::Tensor seen_rows = seen.squeeze(-1).expand_as(lse_ref);
  Errors e;
  e.out = attn_test::rel_diff(o.out, ref.detach());
  const at::Tensor lse = o.lse.to(at::kDouble);
  e.lse = at::where(seen_rows, (lse - lse_ref).abs(), at::zeros_like(lse)).max().item<double>();
  // An unseen row's lse must be −inf (the merge of ring blocks weighs it 0).
  if (!(seen_rows | lse.eq(-INFINITY)).all().item<bool>()) e.lse = INFINITY;
  e.dq = attn_test::rel_diff(o.dq, q.grad());
  e.dk = attn_test::rel_diff(o.dk, kk.grad());
  e.dv = attn_test::rel_diff(o.dv, v.grad());
  return e;
}

std::string describe(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "hq %ld hkv %ld seq %ld dim %ld %s %s%s", static_cast<long>(c.hq),
                static_cast<long>(c.hkv), static_cast<long>(c.seq), static_cast<long>(c.dim),
                c.causal ? "causal" : "full", c.dtype == at::kBFloat16 ? "bf16" : "fp16",
                c.doc_len ? (" docs ~" + std::to_string(c.doc_len)).c_str() : (c.bos.empty() ? "" : " docs at"));
  return buf;
}

TEST(FlashCudaEmulated, MatchesMathAttention) {
  const std::vector<Case> cases = {
      {2, 2, 130, 64, true, at::kBFloat16},       // GQA 1, a 2-row tail tile
      {4, 2, 100, 64, false, at::kBFloat16},      // GQA 2, non-causal
      {4, 1, 129, 128, true, at::kHalf},          // GQA 4, head dim 128, fp16
      {2, 1, 70, 32, false, at::kHalf},           // head dim 32
      {4, 2, 200, 16, true, at::kBFloat16, 40},   // block-causal, documents straddling tiles
      {2, 2, 192, 64, true, at::kBFloat16, 90},   // block-causal, whole tiles skipped
      // A document opening on a key tile's last key (63) and running into
      // the next query tile: the edge of the backward's query-tile skip.
      {2, 1, 192, 32, true, at::kHalf, 0, {63, 150}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const attn_test::Inputs in = attn_test::make_inputs(2, c.hq, c.hkv, c.seq, c.dim, 100 + i, c.dtype);
    const bool documents = c.doc_len > 0 || !c.bos.empty();
    const at::Tensor doc = documents ? document_starts_of(2, c.seq, c) : at::Tensor();
    const Outcome o = c.dtype == at::kBFloat16 ? run_for_dim<c10::BFloat16>(in, c.causal, doc)
                                               : run_for_dim<c10::Half>(in, c.causal, doc);
    const Errors e = errors_of(o, in, c.causal, doc);
    // The same inputs through the CPU flash kernel in bf16 (fp32 accumulate):
    // the error a correct bf16 kernel has, printed beside ours.
    std::string cpu_note;
    if (c.dtype == at::kBFloat16) {
      const ops::FlashForward cpu = ops::flash_attention_forward(in.q, in.k, in.v, c.causal, std::nullopt, {}, doc);
      char buf[48];
      std::snprintf(buf, sizeof(buf), " (CPU bf16 kernel's out %.2e)",
                    errors_of({cpu.out, cpu.lse, o.dq, o.dk, o.dv}, in, c.causal, doc).out);
      cpu_note = buf;
    }
    std::printf("%-44s out %.2e lse %.2e dq %.2e dk %.2e dv %.2e%s\n", describe(c).c_str(), e.out, e.lse, e.dq,
                e.dk, e.dv, cpu_note.c_str());
    // Measured (max over the cases): out 2.7e-3 in bf16 — the output's own
    // rounding, equal to the CPU kernel's to three digits — and 3.4e-4 in
    // fp16; grads 4.5e-3 bf16, 3.9e-4 fp16; lse 7.9e-7 (fp32 throughout).
    // A wrong mask edge or a missed rescale moves them by orders of magnitude.
    const bool bf16 = c.dtype == at::kBFloat16;
    EXPECT_LT(e.out, bf16 ? 4e-3 : 6e-4) << describe(c);
    EXPECT_LT(e.lse, 2e-6) << describe(c);
    EXPECT_LT(std::max({e.dq, e.dk, e.dv}), bf16 ? 6e-3 : 6e-4) << describe(c);
  }
}

// Ring attention's blocks under block-causal masking (lse_attention,
// flash_block_forward): per-row first visible keys of a block of other
// positions, not causal or causal, with rows that see none of the block.
TEST(FlashCudaEmulated, RowKeyBoundsAsRingBlocksUseThem) {
  struct BoundsCase {
    int64_t sq, sk;
    bool causal;
    at::ScalarType dtype;
  };
  // {150, 128}: rows 104 on see no key, so the query tile of rows 128-149
  // skips the key loop altogether (its output must be zeros, not what shared
  // memory held).
  for (const BoundsCase& c : {BoundsCase{150, 140, false, at::kBFloat16}, BoundsCase{150, 128, false, at::kBFloat16},
                              BoundsCase{130, 130, true, at::kHalf}}) {
    attn_test::Inputs in = attn_test::make_inputs(2, 4, 2, std::max(c.sq, c.sk), 64, 31, c.dtype);
    in.q = in.q.narrow(2, 0, c.sq).contiguous(), in.dout = in.dout.narrow(2, 0, c.sq).contiguous();
    in.k = in.k.narrow(2, 0, c.sk).contiguous(), in.v = in.v.narrow(2, 0, c.sk).contiguous();
    // Non-decreasing bounds reaching sk: the last rows see no key at all.
    const at::Tensor i = at::arange(c.sq, at::kLong);
    const at::Tensor bounds = (c.causal ? at::where(i < 70, at::zeros_like(i), at::full_like(i, c.sk))
                                        : (2 * (i - 40)).clamp(0, c.sk))
                                  .expand({2, c.sq})
                                  .contiguous();
    const Outcome o = c.dtype == at::kBFloat16 ? run_emulated<c10::BFloat16, 64>(in, c.causal, bounds)
                                               : run_emulated<c10::Half, 64>(in, c.causal, bounds);
    const Errors e = errors_of(o, in, c.causal, bounds);
    std::printf("bounds: sq %ld sk %ld %s %s: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", static_cast<long>(c.sq),
                static_cast<long>(c.sk), c.causal ? "causal" : "full", c.dtype == at::kBFloat16 ? "bf16" : "fp16",
                e.out, e.lse, e.dq, e.dk, e.dv);
    // The bounds of MatchesMathAttention (same measured floors).
    const bool bf16 = c.dtype == at::kBFloat16;
    EXPECT_LT(e.out, bf16 ? 4e-3 : 6e-4);
    EXPECT_LT(e.lse, 2e-6);
    EXPECT_LT(std::max({e.dq, e.dk, e.dv}), bf16 ? 6e-3 : 6e-4);
  }
}

}  // namespace
