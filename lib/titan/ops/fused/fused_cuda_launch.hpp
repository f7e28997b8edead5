#pragma once
/// @file
/// @brief Internal: the fused CUDA kernels' launchers (fused_cuda.cu), in
/// plain C++ so that fused_cuda.cpp (ATen) need not see CUDA's headers.
/// Each returns nullptr, or CUDA's error string when the launch failed.

#include "titan/ops/fused/fused_cpu_args.hpp"

namespace titan::ops::fused_cuda_detail {

/// nullptr when the current CUDA device runs these kernels, else CUDA's
/// word for why not (no kernel image for its architecture in this binary).
const char* kernels_unavailable();

/// silu(a) · b on `stream` (a cudaStream_t); `a.bf16` picks bf16, else fp32.
const char* swiglu_forward(const fused_detail::SwigluForward& a, void* stream);
/// SwiGLU's backward on `stream`.
const char* swiglu_backward(const fused_detail::SwigluBackward& a, void* stream);
/// RoPE (or its inverse) on `stream`.
const char* rope(const fused_detail::Rope& a, void* stream);
/// Cross-entropy's per-row lse and loss on `stream`.
const char* cross_entropy_forward(const fused_detail::CrossEntropyForward& a, void* stream);
/// Cross-entropy's logits gradient on `stream`.
const char* cross_entropy_backward(const fused_detail::CrossEntropyBackward& a, void* stream);

}  // namespace titan::ops::fused_cuda_detail
