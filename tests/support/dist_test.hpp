#pragma once
// Helpers for multi-process GoogleTest tests (linked through titan_test_support).

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "titan/dist/world.hpp"

namespace titan::testing {

/// The job the test binary joined (dist_main.cpp calls init_distributed).
inline const dist::World& world() { return dist::world(); }

/// Tensor options on the test device (TITAN_TEST_DEVICE=cuda for the GPU twins).
inline at::TensorOptions opts(at::ScalarType dtype = at::kFloat) {
  return at::TensorOptions().dtype(dtype).device(dist::world().device());
}

/// The same N(0, 1) tensor on every rank (drawn in fp64 on the CPU from its
/// own generator, so the draw does not depend on the device or on other
/// random calls), as fp32 on the test device.
inline at::Tensor seeded(uint64_t seed, std::vector<int64_t> shape) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)).to(opts(at::kFloat));
}

/// Largest |a - b| as a double (0 for empty tensors).
inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) return 0.0;
  return (a.to(at::kDouble).cpu() - b.to(at::kDouble).cpu()).abs().max().item<double>();
}

/// Checks shapes and max |a - b| <= tol, printing the difference seen.
#define TITAN_EXPECT_CLOSE(a, b, tol)                                                        \
  do {                                                                                     \
    auto _a = (a);                                                                         \
    auto _b = (b);                                                                         \
    ASSERT_EQ(_a.sizes(), _b.sizes()) << #a " vs " #b;                                     \
    double _d = ::titan::testing::max_abs_diff(_a, _b);                                    \
    EXPECT_LE(_d, (tol)) << #a " vs " #b ": max |diff| = " << _d << " (rank "              \
                         << ::titan::dist::world().rank() << ")";                         \
  } while (0)

}  // namespace titan::testing
