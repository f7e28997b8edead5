// fused_rms_norm: the CPU kernel behind an autograd node of its own.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "titan/ops/fused/fused_cpu.hpp"
#include "titan/ops/fused/fused_ops.hpp"

namespace titan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedRmsNormFunction : torch::autograd::Function<FusedRmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor xc = x.contiguous();
    auto [y, rstd] = fused_cpu::rms_norm_forward(xc, weight, eps);
    ctx->save_for_backward({xc, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto [dx, dw] = fused_cpu::rms_norm_backward(grads[0], s[0], s[1], s[2]);
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  RECORD_FUNCTION("titan::fused_rms_norm", std::vector<c10::IValue>());  // an op in profiler traces
  if (!fused_cpu::takes(x) || !weight.defined() || weight.scalar_type() != x.scalar_type() ||
      !weight.device().is_cpu() || weight.dim() != 1 || x.dim() == 0 || weight.size(0) != x.size(-1))
    return at::rms_norm(x, {x.dim() == 0 ? 1 : x.size(-1)}, weight, eps);
  return FusedRmsNormFunction::apply(x, weight, eps);
}

}  // namespace titan::ops
