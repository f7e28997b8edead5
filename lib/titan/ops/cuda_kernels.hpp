#pragma once
/// @file
/// @brief Whether titan's own CUDA kernels (the fused ops, the flash
/// kernel) run on a given GPU, and what a run says when they do not.
/// Defined only in CUDA builds (TITAN_HAS_CUDA; cuda_kernels_cuda.cpp).
///
/// The build compiles them for the architectures people train on
/// (cmake/FindTorchFromVenv.cmake: sm_80 code, which also runs on 8.6 and
/// 8.9, and sm_90 code with its PTX, which the driver compiles for later
/// GPUs). A GPU outside that set, or one with too little shared memory for
/// a flash kernel, runs ATen's ops instead: the fused-op entry points and
/// the flash backend ask here first, and the trainer's banner says why.

#include <cstdint>
#include <string>

namespace titan::ops {

/// @brief The GPU architectures this build's CUDA code was compiled for,
/// as CMake listed them ("80-real 90").
const char* cuda_architectures_built();

/// @brief "" when the fused CUDA kernels run on CUDA device `device`, else
/// why not. Asked of the device once per process.
const std::string& fused_cuda_unavailable(int device);

/// @brief "" when the flash kernels of this head dim (bf16 or fp16) run on
/// CUDA device `device`, else why not (no image for its architecture, too
/// little shared memory per block, a head dim without kernels). Asked once
/// per device, head dim and dtype.
std::string flash_cuda_unavailable(int device, int64_t head_dim, bool bf16);

/// @brief The banner's word on titan's CUDA kernels for a job on device
/// `device` whose attention has head dim `head_dim`: "" when every kernel
/// the job would use runs there, else one line of what runs instead and why.
std::string describe_cuda_kernels(int device, int64_t head_dim, bool fused_kernels, bool flash_attention);

}  // namespace titan::ops
