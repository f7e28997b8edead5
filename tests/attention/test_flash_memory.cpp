// The point of flash attention: extra memory linear in the sequence length.
// Counted exactly with the CPU tensor-memory tracker (the kernel's scratch
// buffers are tensors, so they are counted too), with math attention — the
// S × S matrix — alongside to show the check would catch quadratic growth.

#include <gtest/gtest.h>

#include <cstdio>

#include "attention_test_util.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/ops/attention/flash_cpu.hpp"

using namespace titan::ops;

namespace {

// Peak bytes allocated above what was live before `fn` ran.
template <typename Fn>
int64_t extra_peak(Fn fn) {
  const c10::Device cpu(c10::kCPU);
  titan::metrics::reset_tensor_memory_peak(cpu);
  const int64_t base = titan::metrics::tensor_memory(cpu).current_bytes;
  fn();
  return titan::metrics::tensor_memory(cpu).peak_bytes - base;
}

}  // namespace

TEST(FlashMemory, PeakExtraGrowsLinearlyNotQuadratically) {
  titan::metrics::track_cpu_tensor_memory();
  const int64_t lens[] = {512, 1024, 2048};
  int64_t fwd[3], bwd[3], math[3];
  for (int i = 0; i < 3; ++i) {
    const int64_t s = lens[i];
    const auto in = attn_test::make_inputs(1, 4, 2, s, 64, 1);
    FlashForward f;
    fwd[i] = extra_peak([&] { f = flash_attention_forward(in.q, in.k, in.v, true); });
    bwd[i] = extra_peak([&] { flash_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, true); });
    math[i] = extra_peak([&] { math_attention(in.q, in.k, in.v, true); });
    std::printf("S=%5lld  flash fwd %9.2f MiB  flash bwd %9.2f MiB  math fwd %9.2f MiB\n",
                static_cast<long long>(s), fwd[i] / 1048576.0, bwd[i] / 1048576.0, math[i] / 1048576.0);
  }
  // Four times the length: linear growth is ×4 (plus a constant of tile
  // scratch, which makes it less; per-thread buffers, whose peaks overlap
  // differently from run to run, can make it a little more), quadratic ×16.
  // Measured over several runs on 2 threads: flash ×3.3–3.7 forward
  // (0.6 → 2.2 MiB) and ×3.3–4.3 backward (1.5 → 6.5 MiB), math ×14.3
  // (9.5 → 136 MiB).
  const double fwd_growth = static_cast<double>(fwd[2]) / fwd[0];
  const double bwd_growth = static_cast<double>(bwd[2]) / bwd[0];
  const double math_growth = static_cast<double>(math[2]) / math[0];
  std::printf("growth over 4x length: flash fwd x%.2f, flash bwd x%.2f, math x%.2f\n", fwd_growth, bwd_growth,
              math_growth);
  EXPECT_LT(fwd_growth, 6.0);
  EXPECT_LT(bwd_growth, 6.0);
  EXPECT_GT(math_growth, 10.0);  // the measurement does see the S × S matrix
}
