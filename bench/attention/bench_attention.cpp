// Attention side by side in one process: titan's CPU flash kernel, ATen's
// own CPU flash kernel (at::_scaled_dot_product_flash_attention_for_cpu and
// its backward) and math attention (the S × S matrix), forward and
// forward+backward, for a list of sequence lengths. Every repetition runs
// all variants in turn, so machine noise hits them alike; medians are
// printed, with speed = ATen time / our time (the goal is >= 0.8 at 4096).
//
//   bench_attention                      short default run (< 1 min)
//   bench_attention --long               512 .. 8192
//   bench_attention --seqs 4096 --batch 1 --heads 8 --dim 64 --reps 5 --dtype bf16
//   bench_attention --doc-len 512       block-causal with 512-token documents
//                                       vs plain causal, ours, side by side

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "titan/metrics/tensor_memory.hpp"
#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/flash_cpu.hpp"
#include "titan/ops/attention/math_attention.hpp"
#include "titan/util/measure.hpp"

using namespace titan;

namespace {

struct Options {
  std::vector<int64_t> seqs = {512, 1024, 2048};
  int64_t batch = 1, heads = 4, kv_heads = -1, dim = 64, reps = 3, math_max = 4096;
  int64_t doc_len = 0;  // > 0: also time block-causal masking with documents of this length
  bool causal = true;
  at::ScalarType dtype = at::kFloat;
  titan::ops::FlashOptions flash;  // tile sizes (--q-tile, --kv-tile)
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_attention: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--long") {
      o.seqs = {512, 1024, 2048, 4096, 8192};
    } else if (a == "--seqs") {
      o.seqs.clear();
      for (const std::string& s : split_commas(next())) o.seqs.push_back(std::stoll(s));
    } else if (a == "--batch") {
      o.batch = std::stoll(next());
    } else if (a == "--heads") {
      o.heads = std::stoll(next());
    } else if (a == "--kv-heads") {
      o.kv_heads = std::stoll(next());
    } else if (a == "--dim") {
      o.dim = std::stoll(next());
    } else if (a == "--reps") {
      o.reps = std::stoll(next());
    } else if (a == "--math-max") {
      o.math_max = std::stoll(next());
    } else if (a == "--q-tile") {
      o.flash.q_tile = std::stoll(next());
    } else if (a == "--kv-tile") {
      o.flash.kv_tile = std::stoll(next());
    } else if (a == "--doc-len") {
      o.doc_len = std::stoll(next());
    } else if (a == "--full") {
      o.causal = false;
    } else if (a == "--dtype") {
      const std::string d = next();
      o.dtype = d == "bf16" ? at::kBFloat16 : at::kFloat;
    } else {
      std::fprintf(stderr, "bench_attention: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.kv_heads < 0) o.kv_heads = o.heads;
  return o;
}

// q, k, v and an upstream gradient for sequence length s, seeded alike for
// every variant.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> random_qkv(const Options& o, int64_t s) {
  at::manual_seed(0);
  at::Tensor q = at::randn({o.batch, o.heads, s, o.dim}).to(o.dtype);
  at::Tensor k = at::randn({o.batch, o.kv_heads, s, o.dim}).to(o.dtype);
  at::Tensor v = at::randn({o.batch, o.kv_heads, s, o.dim}).to(o.dtype);
  at::Tensor dout = at::randn({o.batch, o.heads, s, o.dim}).to(o.dtype);
  return {q, k, v, dout};
}

// Milliseconds of one call.
double time_ms(const std::function<void()>& fn) {
  const double t0 = now_ms();
  fn();
  return now_ms() - t0;
}

// Peak tensor bytes above the starting level while fn runs, in MiB.
double peak_mib(const std::function<void()>& fn) {
  const c10::Device cpu(c10::kCPU);
  metrics::reset_tensor_memory_peak(cpu);
  const int64_t base = metrics::tensor_memory(cpu).current_bytes;
  fn();
  return (metrics::tensor_memory(cpu).peak_bytes - base) / 1048576.0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  metrics::track_cpu_tensor_memory();
  std::printf("attention %s, %s, batch %lld, heads %lld/%lld, head_dim %lld, %d threads, %lld reps (medians, ms)\n",
              o.causal ? "causal" : "full", o.dtype == at::kFloat ? "fp32" : "bf16",
              static_cast<long long>(o.batch), static_cast<long long>(o.heads), static_cast<long long>(o.kv_heads),
              static_cast<long long>(o.dim), at::get_num_threads(), static_cast<long long>(o.reps));
  std::printf("tile BLAS (MKL sgemm_) available: %d; tiles %lld queries x %lld keys\n", ops::tile_blas_available(),
              static_cast<long long>(o.flash.q_tile), static_cast<long long>(o.flash.kv_tile));
  std::printf("%6s | %9s %9s %9s %6s | %9s %9s %9s %6s | %9s | %8s %8s %8s\n", "seq", "ours fwd", "aten fwd",
              "math fwd", "speed", "ours f+b", "aten f+b", "math f+b", "speed", "ours/mm", "MiB ours", "MiB aten",
              "MiB math");
  const bool gqa = o.kv_heads != o.heads;
  for (int64_t s : o.seqs) {
    const auto qkv = random_qkv(o, s);
    const at::Tensor &q = std::get<0>(qkv), &k = std::get<1>(qkv), &v = std::get<2>(qkv), &dout = std::get<3>(qkv);
    // ATen's CPU flash kernel has no GQA: it gets K/V repeated (not timed).
    const at::Tensor kr = gqa ? k.repeat_interleave(o.heads / o.kv_heads, 1) : k;
    const at::Tensor vr = gqa ? v.repeat_interleave(o.heads / o.kv_heads, 1) : v;
    const bool with_math = s <= o.math_max;
    ops::FlashOptions mm = o.flash;
    mm.gemm = ops::TileGemm::aten;

    auto ours_fwd = [&] { ops::flash_attention_forward(q, k, v, o.causal, std::nullopt, o.flash); };
    auto ours_fb = [&](const ops::FlashOptions& opts) {
      const ops::FlashForward f = ops::flash_attention_forward(q, k, v, o.causal, std::nullopt, opts);
      ops::flash_attention_backward(dout, q, k, v, f.out, f.lse, o.causal, std::nullopt, opts);
    };
    auto aten_fwd = [&] { at::_scaled_dot_product_flash_attention_for_cpu(q, kr, vr, 0.0, o.causal); };
    auto aten_fb = [&] {
      auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, kr, vr, 0.0, o.causal);
      at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, kr, vr, out, lse, 0.0, o.causal);
    };
    auto math_fwd = [&] {
      at::NoGradGuard ng;
      ops::math_attention(q, k, v, o.causal);
    };
    auto math_fb = [&] {
      at::Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(),
                 vg = v.detach().requires_grad_();
      ops::math_attention(qg, kg, vg, o.causal).backward(dout);
    };

    std::vector<double> t_of, t_af, t_mf, t_ob, t_ab, t_mb, t_om;
    // One untimed warm-up of each (thread pools, page faults, BLAS init).
    ours_fb(o.flash), aten_fb();
    for (int64_t r = 0; r < o.reps; ++r) {
      t_of.push_back(time_ms(ours_fwd));
      t_af.push_back(time_ms(aten_fwd));
      t_ob.push_back(time_ms([&] { ours_fb(o.flash); }));
      t_ab.push_back(time_ms(aten_fb));
      t_om.push_back(time_ms([&] { ours_fb(mm); }));
      if (with_math) {
        t_mf.push_back(time_ms(math_fwd));
        t_mb.push_back(time_ms(math_fb));
      }
    }
    const double mem_ours = peak_mib(ours_fwd), mem_aten = peak_mib(aten_fwd),
                 mem_math = with_math ? peak_mib(math_fwd) : 0.0;
    const double of = median(t_of), af = median(t_af), ob = median(t_ob), ab = median(t_ab), om = median(t_om);
    auto cell = [&](const std::vector<double>& t) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", median(t));
      return t.empty() ? std::string("-") : std::string(buf);
    };
    std::printf("%6lld | %9.1f %9.1f %9.9s %6.2f | %9.1f %9.1f %9.9s %6.2f | %9.2f | %8.1f %8.1f %8.1f\n",
                static_cast<long long>(s), of, af, cell(t_mf).c_str(), af / of, ob, ab, cell(t_mb).c_str(), ab / ob,
                om / ob, mem_ours, mem_aten, mem_math);
    std::printf("RESULT seq=%lld ours_fwd_ms=%.3f aten_fwd_ms=%.3f ours_fwdbwd_ms=%.3f aten_fwdbwd_ms=%.3f "
                "speed_fwd=%.3f speed_fwdbwd=%.3f mm_engine_over_blas=%.3f\n",
                static_cast<long long>(s), of, af, ob, ab, af / of, ab / ob, om / ob);
  }
  std::printf("speed = ATen time / our time (higher is better for us); ours/mm = time with at::addmm_out tiles "
              "over time with BLAS tiles\n");
  if (o.doc_len > 0) {
    // Document masking: the tiles no row of a query tile can see (keys of
    // earlier documents) are skipped, so short documents cost less than
    // the causal triangle. Both variants alternate per repetition.
    std::printf("\nblock-causal, documents of %lld tokens, vs causal (ours, fwd+bwd, medians, ms):\n",
                static_cast<long long>(o.doc_len));
    std::printf("%6s | %10s %12s %8s\n", "seq", "causal", "block-causal", "speed-up");
    for (int64_t s : o.seqs) {
      const auto qkv = random_qkv(o, s);
    const at::Tensor &q = std::get<0>(qkv), &k = std::get<1>(qkv), &v = std::get<2>(qkv), &dout = std::get<3>(qkv);
      const at::Tensor pos = at::arange(s, at::kLong).expand({o.batch, s});
      const at::Tensor starts = (pos.div(o.doc_len, "floor") * o.doc_len).contiguous();
      auto fb = [&](const at::Tensor& doc) {
        const ops::FlashForward f = ops::flash_attention_forward(q, k, v, true, std::nullopt, o.flash, doc);
        ops::flash_attention_backward(dout, q, k, v, f.out, f.lse, true, std::nullopt, o.flash, doc);
      };
      fb(at::Tensor()), fb(starts);
      std::vector<double> plain, docs;
      for (int64_t r = 0; r < o.reps; ++r) {
        plain.push_back(time_ms([&] { fb(at::Tensor()); }));
        docs.push_back(time_ms([&] { fb(starts); }));
      }
      std::printf("%6lld | %10.1f %12.1f %7.2fx\n", static_cast<long long>(s), median(plain), median(docs),
                  median(plain) / median(docs));
      std::printf("RESULT seq=%lld doc_len=%lld causal_ms=%.3f block_causal_ms=%.3f speedup=%.3f\n",
                  static_cast<long long>(s), static_cast<long long>(o.doc_len), median(plain), median(docs),
                  median(plain) / median(docs));
    }
  }
  return 0;
}
