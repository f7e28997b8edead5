// fused_rope: titan's CPU or CUDA kernel behind an autograd node of its own.
// A rotation's transpose is the rotation by minus the angle, so backward is
// the same kernel run with `inverse`.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "titan/ops/fused/fused_dispatch.hpp"
#include "titan/ops/fused/fused_ops.hpp"
#include "titan/ops/rope.hpp"

namespace titan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedRopeFunction : torch::autograd::Function<FusedRopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return fused_kernels::rope(x, cos, sin, /*inverse=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {fused_kernels::rope(grads[0], s[0], s[1], /*inverse=*/true), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  RECORD_FUNCTION("titan::fused_rope", std::vector<c10::IValue>());  // an op in profiler traces
  // The op-by-op version serves every device and dtype the kernels do not
  // take; check_rope_tables gives both paths the same message for bad shapes.
  if (!fused_kernels::takes(x) || cos.device() != x.device() || sin.device() != x.device() || cos.requires_grad() ||
      sin.requires_grad() || x.dim() != 4)
    return apply_rope(x, cos, sin);
  check_rope_tables(x, cos, sin);
  return FusedRopeFunction::apply(x, cos, sin);
}

}  // namespace titan::ops
