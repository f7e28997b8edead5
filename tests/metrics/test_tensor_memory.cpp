// The CPU tensor-memory counter: every byte a tensor allocates after
// tracking starts is counted while it lives, and the peak remembers the
// most at once. The numbers must be exact (chapter 04 compares activation
// memory of two layouts with them), so the tests compare with ==.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "titan/metrics/tensor_memory.hpp"

namespace {

using titan::metrics::reset_tensor_memory_peak;
using titan::metrics::tensor_memory;

const c10::Device kCpu(c10::kCPU);

TEST(TensorMemory, CountsLiveCpuTensorsExactly) {
  titan::metrics::track_cpu_tensor_memory();
  const int64_t base = tensor_memory(kCpu).current_bytes;
  {
    at::Tensor a = at::empty({1024, 256}, at::kFloat);  // 1 MiB
    EXPECT_EQ(tensor_memory(kCpu).current_bytes - base, 1 << 20);
    at::Tensor b = at::empty({1000}, at::kDouble);
    EXPECT_EQ(tensor_memory(kCpu).current_bytes - base, (1 << 20) + 8000);
  }
  EXPECT_EQ(tensor_memory(kCpu).current_bytes, base);
}

TEST(TensorMemory, PeakRemembersTheMostAtOnceUntilReset) {
  titan::metrics::track_cpu_tensor_memory();
  reset_tensor_memory_peak(kCpu);
  const int64_t base = tensor_memory(kCpu).current_bytes;
  EXPECT_EQ(tensor_memory(kCpu).peak_bytes, base);
  { at::Tensor t = at::zeros({4096}, at::kFloat); }
  EXPECT_EQ(tensor_memory(kCpu).current_bytes, base);
  EXPECT_EQ(tensor_memory(kCpu).peak_bytes - base, 4096 * 4);
  reset_tensor_memory_peak(kCpu);
  EXPECT_EQ(tensor_memory(kCpu).peak_bytes, base);
}

TEST(TensorMemory, ComputationsAndViewsAreCountedOncePerStorage) {
  titan::metrics::track_cpu_tensor_memory();
  const int64_t base = tensor_memory(kCpu).current_bytes;
  at::Tensor x = at::ones({256, 256}, at::kFloat);
  at::Tensor v = x.narrow(0, 0, 128);  // a view: no new storage
  EXPECT_EQ(tensor_memory(kCpu).current_bytes - base, 256 * 256 * 4);
  at::Tensor y = at::matmul(x, x);
  EXPECT_EQ(tensor_memory(kCpu).current_bytes - base, 2 * 256 * 256 * 4);
  EXPECT_EQ(y[0][0].item<float>(), 256.0f);
}

}  // namespace
