#pragma once
/// @file
/// @brief Whether titan's own CUDA kernels run on a given GPU: what the
/// fused ops (fused/fused_cuda.hpp: fused_cuda_unavailable) and the flash
/// kernel (attention/flash_cuda.hpp: flash_cuda_unavailable) share to ask
/// it once per device and to say why not. Defined only in CUDA builds
/// (TITAN_HAS_CUDA; cuda_kernels_cuda.cpp).
///
/// The build compiles the kernels for the architectures people train on
/// (cmake/FindTorchFromVenv.cmake: sm_80 code, which also runs on 8.6 and
/// 8.9, and sm_90 code with its PTX, which the driver compiles for later
/// GPUs). A GPU outside that set, or one with too little shared memory for
/// a flash kernel, runs ATen's ops instead: the fused-op entry points and
/// the flash backend ask first, and the trainer's banner says why.

#include <cstdint>
#include <functional>
#include <string>

namespace titan::ops {

/// @brief The GPU architectures this build's CUDA code was compiled for,
/// as CMake listed them ("80-real 90").
const char* cuda_architectures_built();

/// @brief "" when a family of kernels runs on CUDA device `device`, else
/// one line of why not: "<GPU> (sm_XY): <why> (titan's CUDA code is built
/// for ...)". `ask` checks the kernels (with `device` current) and returns
/// null when they run, else the reason; it is asked once per process for
/// each (device, `family`), the answer kept.
std::string cuda_kernels_unavailable(int device, const std::string& family, const std::function<const char*()>& ask);

}  // namespace titan::ops
