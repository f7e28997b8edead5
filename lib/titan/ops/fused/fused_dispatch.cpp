#include "titan/ops/fused/fused_dispatch.hpp"

#include "titan/ops/fused/fused_cpu.hpp"
#ifdef TITAN_HAS_CUDA
#include "titan/ops/fused/fused_cuda.hpp"
#endif

namespace titan::ops::fused_kernels {

bool takes(const at::Tensor& t) {
#ifdef TITAN_HAS_CUDA
  if (fused_cuda::takes(t)) return true;
#endif
  return fused_cpu::takes(t);
}

at::Tensor swiglu_forward(const at::Tensor& a, const at::Tensor& b) {
#ifdef TITAN_HAS_CUDA
  if (a.is_cuda()) return fused_cuda::swiglu_forward(a, b);
#endif
  return fused_cpu::swiglu_forward(a, b);
}

std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout, const at::Tensor& a, const at::Tensor& b) {
#ifdef TITAN_HAS_CUDA
  if (a.is_cuda()) return fused_cuda::swiglu_backward(dout, a, b);
#endif
  return fused_cpu::swiglu_backward(dout, a, b);
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse) {
#ifdef TITAN_HAS_CUDA
  if (x.is_cuda()) return fused_cuda::rope(x, cos, sin, inverse);
#endif
  return fused_cpu::rope(x, cos, sin, inverse);
}

}  // namespace titan::ops::fused_kernels
