#pragma once
/// @file
/// @brief Internal: the launchers of the CUDA flash-attention kernels
/// (flash_cuda.cu), called by flash_attention_cuda.cpp with raw device
/// pointers. No ATen here, so that nvcc compiles the kernels without
/// LibTorch's headers; the operands are described by the same
/// flash_detail::ForwardArgs / BackwardArgs as the CPU kernel's (with device
/// pointers, and the tile options ignored: the CUDA tiles are fixed).

#include "titan/ops/attention/flash_cpu_args.hpp"

namespace titan::ops::flash_cuda_detail {

/// Element type of q, k, v, out, dout, dk, dv on the GPU.
enum class Dtype { bf16, fp16 };

/// Head dims the kernels are compiled for (multiples of 16, the tensor-core tile).
bool head_dim_supported(int64_t d);

/// @brief Launches the forward on `stream` (a cudaStream_t). Returns nullptr,
/// or CUDA's message when the launch failed.
const char* launch_forward(const flash_detail::ForwardArgs& a, Dtype dtype, void* stream);

/// @brief Launches the backward on `stream`: a.dq (fp32, zeroed by the
/// caller) is accumulated atomically, a.dk/a.dv written. Returns nullptr or
/// CUDA's message.
const char* launch_backward(const flash_detail::BackwardArgs& a, Dtype dtype, void* stream);

/// @brief Whether CUDA device `device` (the current one) runs the kernels of
/// this head dim and dtype: nullptr, or why not (no image for its
/// architecture in this binary, too little shared memory per block).
const char* kernels_unavailable(int device, int64_t head_dim, Dtype dtype);

}  // namespace titan::ops::flash_cuda_detail
