// The fused CUDA kernels' source (lib/titan/ops/fused/fused_cuda_kernels.cuh)
// run on CPU threads (tests/attention/cuda_emulation.hpp) against the CPU
// kernels and the op-by-op versions: the indexing, the per-sequence tables,
// the tails of the last block, float32 and bfloat16. What the GPU adds
// (its expf, its contraction into FMAs) is checked by gpu_check.sh's run of
// test_fused_ops_cuda on a real GPU.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "titan/ops/fused/fused_ops.hpp"
#include "titan/ops/rope.hpp"
// After LibTorch: it defines CUDA's keywords and thread indices as macros.
#include "attention/cuda_emulation.hpp"
#include "titan/ops/fused/fused_cuda_kernels.cuh"

namespace k = titan::ops::fused_cuda_detail::kernels;
namespace fd = titan::ops::fused_detail;

namespace {

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor bd = b.to(at::kDouble);
  const double scale = bd.abs().max().item<double>();
  return (a.to(at::kDouble) - bd).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

template <typename Args, typename Kernel>
void launch(int64_t n, const Args& args, Kernel kernel) {
  cuda_emu::launch({k::blocks_for(n), 1, 1}, k::kThreads, 0, [&] { kernel(args); });
}

// fp32: the CUDA source and the CPU kernel round the same fp32 arithmetic,
// up to where each compiler contracts a·b − c·d into an FMA (measured
// <= 1.2e-7); bf16: at most one bf16 rounding apart (2^-8 = 3.9e-3).
double bound(at::ScalarType dtype) { return dtype == at::kFloat ? 3e-7 : 4e-3; }

}  // namespace

TEST(FusedCudaEmulated, SwigluForwardAndBackward) {
  torch::manual_seed(0);
  const int64_t n = 3 * k::kPerBlock + 77;  // a partial last block
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const bool bf16 = dtype == at::kBFloat16;
    const at::Tensor a = (torch::randn({n}) * 3).to(dtype), b = torch::randn({n}).to(dtype);
    const at::Tensor g = torch::randn({n}).to(dtype);
    at::Tensor out = torch::empty_like(a), da = torch::empty_like(a), db = torch::empty_like(a);
    fd::SwigluForward f;
    f.a = a.data_ptr(), f.b = b.data_ptr(), f.out = out.data_ptr(), f.n = n, f.bf16 = bf16;
    fd::SwigluBackward bw;
    bw.dout = g.data_ptr(), bw.a = a.data_ptr(), bw.b = b.data_ptr(), bw.da = da.data_ptr(), bw.db = db.data_ptr();
    bw.n = n, bw.bf16 = bf16;
    if (bf16) {
      launch(n, f, k::swiglu_forward_kernel<c10::BFloat16>);
      launch(n, bw, k::swiglu_backward_kernel<c10::BFloat16>);
    } else {
      launch(n, f, k::swiglu_forward_kernel<float>);
      launch(n, bw, k::swiglu_backward_kernel<float>);
    }
    // The CPU kernel through autograd, for the same upstream gradient.
    at::Tensor ar = a.clone().requires_grad_(true), br = b.clone().requires_grad_(true);
    at::Tensor want = titan::ops::swiglu(ar, br);
    want.backward(g);
    const double e_out = rel_err(out, want), e_da = rel_err(da, ar.grad()), e_db = rel_err(db, br.grad());
    std::printf("swiglu %s: out %.2e  da %.2e  db %.2e (emulated CUDA vs CPU kernel)\n", bf16 ? "bf16" : "fp32",
                e_out, e_da, e_db);
    EXPECT_LE(e_out, bound(dtype));
    EXPECT_LE(e_da, bound(dtype));
    EXPECT_LE(e_db, bound(dtype));
  }
}

TEST(FusedCudaEmulated, RopeSharedAndPerSequenceTablesAndInverse) {
  torch::manual_seed(1);
  const int64_t batch = 2, seq = 9, heads = 5, hd = 24;
  const auto t = titan::ops::make_rope_table(hd, 16, 10000.0, titan::ops::RopeScaling{}, torch::kCPU);
  const at::Tensor pos = torch::randint(0, 16, {batch, seq}, torch::kLong);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (bool per_sequence : {false, true}) {
      for (bool inverse : {false, true}) {
        const at::Tensor c = per_sequence ? t.cos.index_select(0, pos.flatten()).view({batch, seq, -1})
                                          : t.cos.narrow(0, 0, seq).contiguous();
        const at::Tensor s = per_sequence ? t.sin.index_select(0, pos.flatten()).view({batch, seq, -1})
                                          : t.sin.narrow(0, 0, seq).contiguous();
        const at::Tensor x = torch::randn({batch, seq, heads, hd}).to(dtype);
        at::Tensor out = torch::empty_like(x);
        fd::Rope p;
        p.x = x.data_ptr(), p.out = out.data_ptr(), p.cos = c.data_ptr<float>(), p.sin = s.data_ptr<float>();
        p.batch = batch, p.seq = seq, p.heads = heads, p.half = hd / 2;
        p.per_sequence = per_sequence, p.inverse = inverse, p.bf16 = dtype == at::kBFloat16;
        const int64_t pairs = batch * seq * heads * hd / 2;
        if (p.bf16) launch(pairs, p, k::rope_kernel<c10::BFloat16>);
        else launch(pairs, p, k::rope_kernel<float>);
        // The op-by-op rotation by the angle, or by minus it.
        const at::Tensor want = titan::ops::apply_rope(x, c, inverse ? -s : s);
        const double e = rel_err(out, want);
        std::printf("rope %s, %s tables%s: %.2e (emulated CUDA vs apply_rope)\n", p.bf16 ? "bf16" : "fp32",
                    per_sequence ? "per-sequence" : "shared", inverse ? ", inverse" : "", e);
        EXPECT_LE(e, bound(dtype));
      }
    }
  }
}

// The cross-entropy kernels: rows longer than a block (each thread several
// values) and shorter (threads with none), ignored labels, against the
// op-by-op log_softmax / nll in fp32 (the emulation's expf and logf are
// the CPU's, so fp32 agrees to rounding: measured <= 2.4e-7).
TEST(FusedCudaEmulated, CrossEntropyForwardAndBackward) {
  torch::manual_seed(2);
  for (int64_t vocab : {1000, 77}) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      const int64_t rows = 5;
      const at::Tensor logits = (torch::randn({rows, vocab}) * 4).to(dtype);
      at::Tensor labels = torch::randint(0, vocab, {rows}, torch::kLong);
      labels[2] = -100;
      at::Tensor loss = torch::empty({rows}), lse = torch::empty({rows});
      fd::CrossEntropyForward f;
      f.logits = logits.data_ptr(), f.labels = labels.data_ptr<int64_t>(), f.lse = lse.data_ptr<float>();
      f.loss = loss.data_ptr<float>(), f.rows = rows, f.vocab = vocab, f.bf16 = dtype == at::kBFloat16;
      auto forward_body = [&] {
        if (f.bf16) k::cross_entropy_forward_kernel<c10::BFloat16>(f);
        else k::cross_entropy_forward_kernel<float>(f);
      };
      cuda_emu::launch({static_cast<unsigned>(rows), 1, 1}, k::kThreads, 2 * k::kThreads * sizeof(float), forward_body);
      const at::Tensor scale = torch::tensor({0.5f});
      at::Tensor dlogits = torch::empty_like(logits);
      fd::CrossEntropyBackward b;
      b.logits = logits.data_ptr(), b.labels = labels.data_ptr<int64_t>(), b.lse = lse.data_ptr<float>();
      b.scale = scale.data_ptr<float>(), b.dlogits = dlogits.data_ptr(), b.rows = rows, b.vocab = vocab;
      b.bf16 = f.bf16;
      if (b.bf16) launch(rows * vocab, b, k::cross_entropy_backward_kernel<c10::BFloat16>);
      else launch(rows * vocab, b, k::cross_entropy_backward_kernel<float>);
      // Op by op in fp32 from the same (rounded) logits: per-row losses, and
      // the gradient of 0.5 · Σ loss.
      at::Tensor x = logits.to(at::kFloat).requires_grad_(true);
      const at::Tensor per_row = at::cross_entropy_loss(x, labels, {}, at::Reduction::None, -100);
      (per_row.sum() * 0.5).backward();
      const double e_loss = rel_err(loss, per_row.detach()), e_lse = rel_err(lse, at::logsumexp(x.detach(), 1));
      const double e_grad = rel_err(dlogits, x.grad());
      std::printf("cross-entropy %s, vocab %lld: loss %.2e  lse %.2e  dlogits %.2e (emulated CUDA vs ATen)\n",
                  f.bf16 ? "bf16" : "fp32", static_cast<long long>(vocab), e_loss, e_lse, e_grad);
      EXPECT_LE(e_loss, 3e-7);
      EXPECT_LE(e_lse, 3e-7);
      EXPECT_LE(e_grad, f.bf16 ? 4e-3 : 3e-7);  // bf16: the gradient is rounded to bf16
      EXPECT_EQ(loss[2].item<float>(), 0.0f);
      EXPECT_TRUE(dlogits[2].eq(0).all().item<bool>());
      // A label past the vocabulary: a NaN loss (which the trainer stops
      // on), not a read past the row.
      labels[3] = vocab;
      cuda_emu::launch({static_cast<unsigned>(rows), 1, 1}, k::kThreads, 2 * k::kThreads * sizeof(float), forward_body);
      EXPECT_TRUE(std::isnan(loss[3].item<float>())) << loss[3].item<float>();
      EXPECT_LE(rel_err(loss.narrow(0, 0, 3), per_row.detach().narrow(0, 0, 3)), 3e-7);  // the other rows unchanged
    }
  }
}
