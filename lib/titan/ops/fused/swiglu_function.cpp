// swiglu: titan's CPU or CUDA kernel behind an autograd node of its own.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "titan/ops/fused/fused_dispatch.hpp"
#include "titan/ops/fused/fused_ops.hpp"

namespace titan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor ac = a.contiguous(), bc = b.contiguous();
    ctx->save_for_backward({ac, bc});
    return fused_kernels::swiglu_forward(ac, bc);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    auto [da, db] = fused_kernels::swiglu_backward(grads[0], s[0], s[1]);
    return {da, db};
  }
};

}  // namespace

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
  RECORD_FUNCTION("titan::swiglu", std::vector<c10::IValue>());  // an op in profiler traces
  if (!fused_kernels::takes(a) || a.device() != b.device() || a.scalar_type() != b.scalar_type() ||
      a.sizes() != b.sizes())
    return at::silu(a) * b;
  return SwigluFunction::apply(a, b);
}

}  // namespace titan::ops
