#pragma once
/// @file
/// @brief Internal: the fused kernels of the tensor's device — the CPU
/// kernels (fused_cpu.hpp) or, in CUDA builds, the CUDA ones
/// (fused_cuda.hpp). The one place that knows which devices have kernels;
/// the autograd functions of fused_ops.hpp call these.

#include <ATen/core/Tensor.h>

#include <utility>

namespace titan::ops::fused_kernels {

/// True when a kernel of titan's takes `t`: float32 or bfloat16 on the CPU,
/// or on a CUDA GPU in CUDA builds.
bool takes(const at::Tensor& t);

/// silu(a) · b on a's device.
at::Tensor swiglu_forward(const at::Tensor& a, const at::Tensor& b);

/// SwiGLU's backward (da, db) on a's device.
std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout, const at::Tensor& a, const at::Tensor& b);

/// x rotated by the angles of cos/sin (by minus them if `inverse`) on x's device.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse);

}  // namespace titan::ops::fused_kernels
