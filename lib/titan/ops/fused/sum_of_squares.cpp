#include <ATen/ATen.h>

#include "titan/ops/fused/fused_cpu.hpp"
#include "titan/ops/fused/fused_ops.hpp"

namespace titan::ops {

double sum_of_squares(const at::Tensor& x) {
  if (fused_cpu::takes(x)) return fused_cpu::sum_of_squares(x);
  return x.to(at::kDouble).square().sum().item<double>();
}

}  // namespace titan::ops
