#pragma once
/// @file
/// @brief Internal: what the CPU (flash_cpu.cpp) and CUDA
/// (flash_attention_cuda.cpp) flash wrappers do alike around their kernels —
/// allocate the outputs and point the kernels' raw-pointer operands
/// (flash_cpu_args.hpp) at the tensors.

#include <ATen/ATen.h>

#include "titan/ops/attention/flash_cpu.hpp"
#include "titan/ops/attention/flash_cpu_args.hpp"

namespace titan::ops::flash_detail {

/// Element strides of a [B, H, S, D] tensor (its last dimension contiguous).
Strides strides_of(const at::Tensor& t);

/// @brief Allocates the forward's out (laid out [B, S, H, D], returned as
/// its [B, H, S, D] transpose: what the model reshapes to [B, S, H·D] next,
/// so that costs no copy) and fp32 lse, and sets every pointer and stride
/// of `a` (a.p is the caller's).
FlashForward forward_operands(ForwardArgs& a, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

/// @brief The backward's buffers: delta = rowsum(dO ∘ O) and lse as
/// contiguous fp32, dq an fp32 accumulator of zeros laid out like q, dk and
/// dv like k and v.
struct BackwardBuffers {
  at::Tensor delta, lse, dq, dk, dv;
};

/// @brief Checks dout/out/lse against q (errors name `who`), makes the
/// backward's buffers and sets every pointer and stride of `a` (a.p is the
/// caller's).
BackwardBuffers backward_operands(BackwardArgs& a, const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const char* who);

}  // namespace titan::ops::flash_detail
