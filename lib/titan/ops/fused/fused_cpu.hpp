#pragma once
/// @file
/// @brief Internal: the fused CPU kernels called on tensors. Each checks its
/// operands, makes them contiguous, allocates the outputs and runs the copy
/// of the kernel compiled for the best instruction set this CPU has.
/// The autograd functions of fused_ops.hpp call these.

#include <ATen/core/Tensor.h>

#include <utility>

namespace titan::ops::fused_cpu {

/// True when the fused CPU kernels take `t`: a CPU tensor of float32 or bfloat16.
bool takes(const at::Tensor& t);

/// RMSNorm over the last dim of x: y (x's dtype) and rstd (fp32, one per row).
std::pair<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps);

/// RMSNorm's backward: dx (x's dtype) and dweight (weight's dtype).
std::pair<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy, const at::Tensor& x,
                                                    const at::Tensor& weight, const at::Tensor& rstd);

/// silu(a) · b.
at::Tensor swiglu_forward(const at::Tensor& a, const at::Tensor& b);

/// SwiGLU's backward: da, db.
std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout, const at::Tensor& a, const at::Tensor& b);

/// x [batch, seq, heads, head_dim] rotated by the angles of cos/sin ([seq,
/// head_dim/2] or [batch, seq, head_dim/2], fp32); by minus them if `inverse`.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse);

/// Σ x² of a float32 or bfloat16 CPU tensor, accumulated in double (fp32
/// squares summed 32 at a time, then in double): what a double-precision
/// norm gives, without its double copy of x.
double sum_of_squares(const at::Tensor& x);

}  // namespace titan::ops::fused_cpu
