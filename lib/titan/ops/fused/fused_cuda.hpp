#pragma once
/// @file
/// @brief Internal: the fused CUDA kernels (fused_cuda_kernels.cuh) called on
/// tensors, on the current stream of the tensors' GPU: SwiGLU and RoPE in
/// float32 and bfloat16. RMSNorm needs none of its own on CUDA: at::rms_norm
/// is one fused kernel there. Defined in CUDA builds only (fused_cuda.cpp);
/// callers test TITAN_HAS_CUDA.

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

namespace titan::ops::fused_cuda {

/// True when the CUDA kernels take `t`: a CUDA tensor of float32 or
/// bfloat16 on a GPU they run on.
bool takes(const at::Tensor& t);

/// "" when the fused CUDA kernels run on CUDA device `device`, else why not
/// (ops/cuda_kernels.hpp). Asked of the device once per process.
std::string unavailable(int device);

/// silu(a) · b.
at::Tensor swiglu_forward(const at::Tensor& a, const at::Tensor& b);

/// SwiGLU's backward: da, db.
std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout, const at::Tensor& a, const at::Tensor& b);

/// As fused_cpu::rope (cos/sin fp32 on x's GPU).
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse);

/// Cross-entropy of logits [rows, vocab] (float32 or bfloat16) against
/// labels [rows] (int64, -100 ignored): per-row loss and log-sum-exp, fp32,
/// reading the logits once with no copy of them.
std::pair<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor& logits, const at::Tensor& labels);

/// The logits' gradient (their dtype): (softmax − one-hot) · scale on
/// counted rows; `scale` is a one-element fp32 tensor on the GPU.
at::Tensor cross_entropy_backward(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& lse,
                                  const at::Tensor& scale);

}  // namespace titan::ops::fused_cuda
