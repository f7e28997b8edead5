// Attention on a GPU side by side in one process: titan's CUDA flash kernel
// (ops::flash_attention) against ATen's SDPA (which picks its flash or cuDNN
// kernel for bf16), forward and forward+backward, causal, for a list of
// sequence lengths. Each repetition runs both in turn; medians are printed
// with speed = SDPA time / our time (the goal is >= 0.6 at 4096 on an H200)
// and the achieved TFLOP/s (causal: half of 4·B·H·S²·D forward, 2.5× that
// for forward+backward, as FlashAttention-2 counts). scripts/gpu_check.sh
// runs it; built only with CUDA.
//
//   bench_attention_cuda [--seqs 1024,2048,4096,8192] [--batch 2] [--heads 16]
//                        [--kv-heads 16] [--dim 128] [--reps 20] [--doc-len L]

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "titan/ops/attention/backend.hpp"
#include "titan/ops/attention/document_mask.hpp"
#include "titan/util/measure.hpp"

using namespace titan;

namespace {

struct Options {
  std::vector<int64_t> seqs = {1024, 2048, 4096, 8192};
  int64_t batch = 2, heads = 16, kv_heads = 16, dim = 128, reps = 20, doc_len = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_attention_cuda: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const std::string v = argv[++i];
    if (a == "--seqs") {
      o.seqs.clear();
      for (const std::string& s : split_commas(v)) o.seqs.push_back(std::stoll(s));
    } else if (a == "--batch") {
      o.batch = std::stoll(v);
    } else if (a == "--heads") {
      o.heads = std::stoll(v);
    } else if (a == "--kv-heads") {
      o.kv_heads = std::stoll(v);
    } else if (a == "--dim") {
      o.dim = std::stoll(v);
    } else if (a == "--reps") {
      o.reps = std::stoll(v);
    } else if (a == "--doc-len") {
      o.doc_len = std::stoll(v);
    } else {
      std::fprintf(stderr, "bench_attention_cuda: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

double time_ms(const std::function<void()>& fn) {
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_attention_cuda: no CUDA device\n");
    return 1;
  }
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  std::printf("attention on CUDA, bf16 causal, batch %lld, heads %lld/%lld, head_dim %lld, %lld reps (medians, ms)%s\n",
              (long long)o.batch, (long long)o.heads,
              (long long)o.kv_heads, (long long)o.dim, (long long)o.reps,
              o.doc_len ? (", documents of " + std::to_string(o.doc_len)).c_str() : "");
  std::printf("%6s | %9s %9s %6s | %9s %9s %6s | %8s %8s\n", "seq", "ours fwd", "sdpa fwd", "speed", "ours f+b",
              "sdpa f+b", "speed", "TF/s f+b", "sdpa");
  for (const int64_t s : o.seqs) {
    at::Tensor q = at::randn({o.batch, o.heads, s, o.dim}, opts).requires_grad_();
    at::Tensor k = at::randn({o.batch, o.kv_heads, s, o.dim}, opts).requires_grad_();
    at::Tensor v = at::randn({o.batch, o.kv_heads, s, o.dim}, opts).requires_grad_();
    const at::Tensor dout = at::randn({o.batch, o.heads, s, o.dim}, opts);
    at::Tensor doc;
    if (o.doc_len > 0) {
      at::Tensor tokens = at::ones({o.batch, s}, at::TensorOptions().dtype(at::kLong));
      tokens.slice(1, 0, s, o.doc_len).fill_(0);
      doc = ops::document_starts(tokens, 0).to(at::kCUDA);
    }
    auto fwd = [&](ops::AttentionBackend b) {
      at::NoGradGuard no_grad;
      (void)ops::attention(q, k, v, b, true, std::nullopt, doc);
    };
    auto fwd_bwd = [&](ops::AttentionBackend b) {
      for (at::Tensor* t : {&q, &k, &v}) t->mutable_grad() = at::Tensor();
      ops::attention(q, k, v, b, true, std::nullopt, doc).backward(dout);
    };
    std::vector<double> of, sf, ob, sb;
    for (int64_t r = 0; r < o.reps + 3; ++r) {
      const double a = time_ms([&] { fwd(ops::AttentionBackend::flash); });
      const double b = time_ms([&] { fwd(ops::AttentionBackend::sdpa); });
      const double c = time_ms([&] { fwd_bwd(ops::AttentionBackend::flash); });
      const double d = time_ms([&] { fwd_bwd(ops::AttentionBackend::sdpa); });
      if (r < 3) continue;  // warm-up: kernel loading, the allocator's first blocks
      of.push_back(a), sf.push_back(b), ob.push_back(c), sb.push_back(d);
    }
    const double flop_fwd = 4.0 * o.batch * o.heads * s * s * o.dim / 2.0;
    auto tflops = [&](double ms) { return 3.5 * flop_fwd / (ms * 1e-3) / 1e12; };
    std::printf("%6lld | %9.3f %9.3f %6.2f | %9.3f %9.3f %6.2f | %8.1f %8.1f\n", (long long)s, median(of), median(sf),
                median(sf) / median(of), median(ob), median(sb), median(sb) / median(ob), tflops(median(ob)),
                tflops(median(sb)));
    std::printf("RESULT seq=%lld ours_fwd_ms=%.4f sdpa_fwd_ms=%.4f ours_fwdbwd_ms=%.4f sdpa_fwdbwd_ms=%.4f\n",
                (long long)s, median(of), median(sf), median(ob), median(sb));
  }
  std::printf("speed = SDPA time / our time (higher is better for us)\n");
  return 0;
}
