// Chapter 06 — Flash attention.
//
// Attention is softmax(Q Kᵀ / √d) V. Written as three steps it makes the
// score matrix S = Q Kᵀ and its softmax P, each seq × seq numbers per head
// and sequence: at seq 4096 that is 4096² × 4 B = 64 MiB in fp32 for ONE
// head of ONE layer, at 32768 it is 4 GiB — quadratic in the length, and
// all of it is kept for backward.
//
// Flash attention (Dao et al. 2022, arXiv:2205.14135; FlashAttention-2,
// arXiv:2307.08691) never makes S. It walks K/V in tiles; for each query
// row it keeps a running maximum m, a running normaliser l and an output
// accumulator, rescaling both when m grows (the online softmax, Milakov &
// Gimelshein 2018). It saves only the output and L = m + log l per row;
// backward recomputes each tile's P = exp(S − L) from them. Memory is
// linear in the length; the arithmetic is the same.
//
// This program climbs to the project's own CPU kernel
// (lib/titan/ops/attention/flash_cpu.hpp) and measures it:
//   0. the ladder (ladder.hpp): attention as written, row by row, tiled
//      with the online softmax, titan's kernel (and on a GPU its CUDA
//      kernel), each rung checked against the one before;
//   1. memory: the peak bytes math attention and flash attention allocate,
//      against the length, next to the size of S;
//   2. equality: outputs and gradients of flash vs math attention
//      (fp32; causal and full; grouped-query; a length no tile divides);
//   3. speed: forward + backward against ATen's own CPU flash kernel;
//   4. the figure: memory and time against the length, as an SVG.
//
//   ./build/bin/ch06_flash_attention
//   ./build/bin/ch06_flash_attention --max-seq 16384     # longer sweep
//   ./build/bin/ch06_flash_attention --quick              # CTest
//
// Exit status 0 when flash equals math within the stated bounds and its
// memory grows linearly while math's grows quadratically.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ladder.hpp"
#include "svg_chart.hpp"
#include "titan/util/files.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/ops/attention/flash_function.hpp"
#include "titan/ops/attention/math_attention.hpp"
#include "titan/util/measure.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;
using titan::strprintf;

namespace {

const c10::Device kCpu(c10::kCPU);

// Peak tensor bytes fn allocates above what was live before it (the
// counting allocator sees every CPU tensor, the kernel's scratch included).
int64_t peak_extra(const std::function<void()>& fn) {
  metrics::reset_tensor_memory_peak(kCpu);
  const int64_t base = metrics::tensor_memory(kCpu).current_bytes;
  fn();
  return metrics::tensor_memory(kCpu).peak_bytes - base;
}

double ms_of(const std::function<void()>& fn) {
  const double t0 = now_ms();
  fn();
  return now_ms() - t0;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

double rel(const at::Tensor& a, const at::Tensor& ref) {
  return (a.to(at::kDouble) - ref.to(at::kDouble)).norm().item<double>() / ref.to(at::kDouble).norm().item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    int64_t max_seq = 8192, speed_seq = 2048, heads = 4, reps = 3, ladder_seq = 1024;
    std::string svg = files::temp_dir() + "/titan_ch06_flash_attention.svg";
    bool quick = false;
    OptionParser parser("ch06_flash_attention", "flash attention vs the S matrix: memory, equality, speed");
    parser.add("--max-seq", &max_seq, "longest sequence of the memory sweep (math attention needs ~2·seq²·4 B)");
    parser.add("--speed-seq", &speed_seq, "sequence length of the speed comparison");
    parser.add("--heads", &heads, "heads in the speed comparison");
    parser.add("--reps", &reps, "repetitions per timing (medians)");
    parser.add("--ladder-seq", &ladder_seq, "sequence length of the ladder (section 0)");
    parser.add("--svg", &svg, "where to write the figure");
    parser.flag("--quick", &quick, "short sweep (CTest)");
    parser.parse(argc, argv);
    if (quick) max_seq = 2048, speed_seq = 512, reps = 1, ladder_seq = 256;
    metrics::track_cpu_tensor_memory();
    const int64_t head_dim = 64;
    bool ok = true;

    // ------------------------------------------------ (0) the ladder
    // One head, causal, fp32, forward. Each rung is checked against the
    // one before it (max |difference|; outputs are averages of N(0, 1)
    // values, ~0.1-1): they sum the same products in other orders.
    {
      std::printf("0. the ladder: one head, %lld tokens, head_dim %lld, causal, fp32 forward; each rung against the one before\n",
                  static_cast<long long>(ladder_seq), static_cast<long long>(head_dim));
      std::printf("   %-42s %14s %12s %10s\n", "rung", "peak beyond q,k,v", "max|diff|", "ms");
      at::manual_seed(11);
      const at::Tensor q = at::randn({ladder_seq, head_dim}), k = at::randn({ladder_seq, head_dim}),
                       v = at::randn({ladder_seq, head_dim});
      at::NoGradGuard no_grad;
      struct Rung {
        const char* name;
        std::function<at::Tensor()> run;
      };
      const std::vector<Rung> rungs = {
          {"1 as written: S and P whole", [&] { return ch06::attention_as_written(q, k, v, true); }},
          {"2 row by row: one row of S at a time", [&] { return ch06::attention_by_rows(q, k, v, true); }},
          {"3 tiles of 64 x 256, online softmax", [&] { return ch06::attention_tiled_online(q, k, v, true); }},
          {"4 titan's CPU flash kernel", [&] {
             return ops::flash_attention_forward(q.view({1, 1, ladder_seq, head_dim}), k.view({1, 1, ladder_seq, head_dim}),
                                                 v.view({1, 1, ladder_seq, head_dim}), true)
                 .out.view({ladder_seq, head_dim});
           }}};
      // Measured: 3.0e-7 to 6.6e-7 between rungs at 1024 tokens, up to
      // 8.3e-7 at 256 (fp32 rounding of different summation orders); the
      // bound is ~6x that.
      const double ladder_bound = 5e-6;
      at::Tensor previous;
      for (const Rung& r : rungs) {
        at::Tensor out;
        double ms = 0;
        const int64_t peak = peak_extra([&] { ms = ms_of([&] { out = r.run(); }); });
        const double diff = previous.defined() ? (out - previous).abs().max().item<double>() : 0.0;
        std::printf("   %-42s %10.3f MiB %12s %10.1f\n", r.name, mib(static_cast<double>(peak)),
                    previous.defined() ? strprintf("%.2e", diff).c_str() : "(reference)", ms);
        ok = ok && diff < ladder_bound;
        previous = out;
      }
      // 5: the CUDA kernel (flash_cuda_kernels.cuh: one thread block per 64
      // query rows, K/V tiles through shared memory) in bf16, where a GPU is.
      if (at::hasCUDA()) {
        const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
        const at::Tensor out = ops::flash_attention_forward(q.to(cuda).view({1, 1, ladder_seq, head_dim}),
                                                            k.to(cuda).view({1, 1, ladder_seq, head_dim}),
                                                            v.to(cuda).view({1, 1, ladder_seq, head_dim}), true)
                                   .out.view({ladder_seq, head_dim})
                                   .to(at::kCPU, at::kFloat);
        const double diff = (out - previous).abs().max().item<double>();
        // bf16 inputs and output: ~3 significant digits.
        std::printf("   %-42s %14s %12.2e %10s   (bf16; bound 2e-2)\n", "5 titan's CUDA flash kernel, bf16", "-", diff, "-");
        ok = ok && diff < 2e-2;
      } else {
        std::printf("   5 titan's CUDA flash kernel: no GPU here (tests/attention runs its source on CPU threads)\n");
      }
      std::printf("   S would be %.3f MiB; rungs 2-4 never hold it.\n\n",
                  mib(4.0 * static_cast<double>(ladder_seq) * static_cast<double>(ladder_seq)));
    }

    // ------------------------------------------------ (1) memory
    // One sequence, one head, head_dim 64, causal, forward only (no
    // autograd): what the two algorithms allocate beyond Q, K and V.
    std::printf("1. peak memory of one head's causal attention forward (head_dim %lld, fp32), beyond q, k, v:\n",
                static_cast<long long>(head_dim));
    std::printf("   %7s %12s %14s %14s %9s %12s %12s\n", "seq", "S = seq²·4B", "math", "flash", "math/S",
                "math ms", "flash ms");
    std::vector<double> xs, math_mem, flash_mem, s_size, math_ms, flash_ms;
    for (int64_t s = 512; s <= max_seq; s *= 2) {
      at::manual_seed(s);
      const at::Tensor q = at::randn({1, 1, s, head_dim}), k = at::randn({1, 1, s, head_dim}),
                       v = at::randn({1, 1, s, head_dim});
      at::NoGradGuard no_grad;
      double tm = 0, tf = 0;
      const int64_t m = peak_extra([&] { tm = ms_of([&] { ops::math_attention(q, k, v, true); }); });
      const int64_t f = peak_extra([&] { tf = ms_of([&] { ops::flash_attention_forward(q, k, v, true); }); });
      const double sbytes = 4.0 * static_cast<double>(s) * static_cast<double>(s);
      std::printf("   %7lld %9.1f MiB %10.2f MiB %10.3f MiB %9.2f %12.1f %12.1f\n", static_cast<long long>(s),
                  mib(sbytes), mib(static_cast<double>(m)), mib(static_cast<double>(f)), m / sbytes, tm, tf);
      xs.push_back(static_cast<double>(s));
      math_mem.push_back(mib(static_cast<double>(m)));
      flash_mem.push_back(mib(static_cast<double>(f)));
      s_size.push_back(mib(sbytes));
      math_ms.push_back(tm);
      flash_ms.push_back(tf);
    }
    const double span = xs.back() / xs.front();
    const double math_growth = math_mem.back() / math_mem.front(), flash_growth = flash_mem.back() / flash_mem.front();
    std::printf("   over %gx the length: math x%.1f (quadratic would be x%g), flash x%.1f (linear: x%g)\n", span,
                math_growth, span * span, flash_growth, span);
    std::printf("   At 32768 tokens S alone would be %.0f MiB = 4 GiB per head and layer; math attention holds S and\n"
                "   P (its softmax) at once, about %.1f x S as measured above; flash holds %.3f MiB per 1K tokens.\n\n",
                mib(4.0 * 32768.0 * 32768.0), math_mem.back() / s_size.back(), flash_mem.back() / (xs.back() / 1024));
    // Linear: flash's growth stays near the length's (tile scratch is a
    // constant, so it can be less); quadratic: math's near its square.
    const bool memory_ok = flash_growth < 1.5 * span && math_growth > 0.6 * span * span;
    if (!memory_ok) std::printf("   FAIL: flash memory is not linear or math's is not quadratic\n\n");
    ok = ok && memory_ok;

    // ------------------------------------------------ (2) equality
    // Batch 2, 4 query heads over 2 kv heads (GQA), 300 tokens (not a
    // multiple of the 64 × 256 tiles), fp32. Gradients by autograd through
    // each: flash's own backward vs math's ordinary graph.
    std::printf("2. flash vs math attention, fp32, batch 2, 4 query heads / 2 kv heads, seq 300, head_dim 64\n");
    std::printf("   (relative Frobenius difference; math attention is the reference):\n");
    std::printf("   %-8s %11s %11s %11s %11s\n", "mask", "out", "dq", "dk", "dv");
    // Measured: 2.1e-7 to 3.5e-7 on every column, both masks — fp32
    // rounding of two summation orders. The bound is ~6x that floor.
    const double bound = 2e-6;
    for (bool causal : {true, false}) {
      at::manual_seed(causal ? 6 : 7);
      const at::Tensor q0 = at::randn({2, 4, 300, head_dim}), k0 = at::randn({2, 2, 300, head_dim}),
                       v0 = at::randn({2, 2, 300, head_dim}), dout = at::randn({2, 4, 300, head_dim});
      auto run = [&](bool flash) {
        at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
                   v = v0.clone().requires_grad_(true);
        at::Tensor out = flash ? ops::flash_attention(q, k, v, causal) : ops::math_attention(q, k, v, causal);
        out.backward(dout);
        return std::vector<at::Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
      };
      const auto f = run(true), m = run(false);
      double worst = 0;
      std::printf("   %-8s", causal ? "causal" : "full");
      for (size_t i = 0; i < f.size(); ++i) {
        const double d = rel(f[i], m[i]);
        worst = std::max(worst, d);
        std::printf(" %11.3g", d);
      }
      std::printf("\n");
      ok = ok && worst < bound;
    }
    std::printf("   bound %.0e on every column\n\n", bound);

    // ------------------------------------------------ (3) speed
    // Forward + backward, fp32 causal, against ATen's CPU flash kernel on
    // the same inputs; each repetition runs both, alternating, medians.
    at::manual_seed(3);
    const at::Tensor q = at::randn({1, heads, speed_seq, head_dim}), k = at::randn({1, heads, speed_seq, head_dim}),
                     v = at::randn({1, heads, speed_seq, head_dim}), dout = at::randn({1, heads, speed_seq, head_dim});
    std::vector<double> ours, aten;
    for (int64_t r = 0; r < reps + 1; ++r) {  // the first round warms up
      const double a = ms_of([&] {
        ops::FlashForward fw = ops::flash_attention_forward(q, k, v, true);
        ops::flash_attention_backward(dout, q, k, v, fw.out, fw.lse, true);
      });
      const double b = ms_of([&] {
        auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, true);
        at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, true);
      });
      if (r > 0) ours.push_back(a), aten.push_back(b);
    }
    const double mo = median(ours), ma = median(aten);
    std::printf("3. forward + backward, fp32 causal, %lld heads x %lld tokens, %d threads, median of %lld:\n",
                static_cast<long long>(heads), static_cast<long long>(speed_seq), at::get_num_threads(),
                static_cast<long long>(reps));
    std::printf("   titan flash %.1f ms, ATen flash %.1f ms: speed %.2f x ATen's (the issue's goal: >= 0.8 at 4096;\n"
                "   bench/attention runs the full comparison)\n\n",
                mo, ma, ma / mo);

    // ------------------------------------------------ (4) the figure
    const std::string chart = ch06::line_charts_svg(
        "Attention of one head, head_dim 64, causal, fp32 forward (measured on this machine)", xs,
        {{"peak memory beyond q, k, v", "MiB",
          {{"math", "#d62728", math_mem}, {"flash", "#1f77b4", flash_mem}, {"S = seq²·4 B", "#999999", s_size}}},
         {"forward time", "ms", {{"math", "#d62728", math_ms}, {"flash", "#1f77b4", flash_ms}}}});
    std::ofstream(svg) << chart;
    std::printf("4. figure: %s\n\n", svg.c_str());

    std::printf("%s\n", ok ? "OK: flash equals math attention, and its memory is linear in the length"
                           : "FAIL: see above");
    return ok ? 0 : 1;
  });
}
