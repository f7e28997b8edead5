#include "titan/ops/rms_norm.hpp"

#include "titan/ops/fused/fused_ops.hpp"
#include "titan/util/error.hpp"

namespace titan::ops {

at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor y = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return y.to(x.scalar_type()) * weight;
}

RMSNormImpl::RMSNormImpl(int64_t dim_, double eps_, at::TensorOptions options, bool fused_)
    : dim(dim_), eps(eps_), fused(fused_) {
  TITAN_CHECK(dim > 0, "RMSNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", at::empty({dim}, options));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  return call_with_hooks(x, [this](const at::Tensor& in) {
    return fused ? fused_rms_norm(in, weight, eps) : at::rms_norm(in, {dim}, weight, eps);
  });
}

void RMSNormImpl::reset_parameters() {
  at::NoGradGuard no_grad;
  weight.fill_(1.0);
}

}  // namespace titan::ops
