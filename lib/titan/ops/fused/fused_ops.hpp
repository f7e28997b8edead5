#pragma once
/// @file
/// @brief Fused ops for the Llama block's elementwise work: RMSNorm, SwiGLU
/// and RoPE, each one kernel forward and one backward with its own autograd
/// node, where the op-by-op versions launch several kernels and keep more
/// tensors for backward.
///
/// On the CPU (float32 and bfloat16) they run titan's kernels
/// (fused_cpu_kernel.hpp, vectorised with at::vec, compiled for AVX-512,
/// AVX2 and portable); on CUDA GPUs SwiGLU and RoPE run titan's CUDA
/// kernels (fused_cuda_kernels.cuh) and RMSNorm is at::rms_norm, already
/// one fused kernel there; elsewhere each is the op-by-op version. [model] fused_kernels
/// (ModelArgs::fused_kernels) chooses them in the Llama model; tests compare
/// them with the op-by-op versions and with float64.

#include <ATen/core/Tensor.h>

namespace titan::ops {

/// @brief RMSNorm of the last dim in one pass: x · rstd · weight, rstd = 1 /
/// sqrt(mean(x²) + eps) in fp32, one rounding to x's dtype at the end
/// (at::rms_norm's numerics). Backward keeps x and one fp32 rstd per row.
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// @brief silu(a) · b (the SwiGLU feed-forward's gate, Shazeer 2020) in one
/// pass; backward keeps a and b only, not silu(a).
at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b);

/// @brief apply_rope (rope.hpp: interleaved pairs, fp32 rotation, tables
/// [seq, head_dim/2] or [batch, seq, head_dim/2]) in one pass; backward
/// rotates the gradient back by minus the angles and keeps nothing but the
/// tables.
at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

/// @brief Σ x², as accurate as summing in double: on the CPU (float32 /
/// bfloat16) fp32 squares are summed 32 at a time and those sums in double,
/// without the double copy of x that at::_foreach_norm(..., kDouble) makes;
/// elsewhere x.to(double).square().sum(). The gradient norm's partial.
double sum_of_squares(const at::Tensor& x);

}  // namespace titan::ops
