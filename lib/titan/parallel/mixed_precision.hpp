#pragma once
/// @file
/// @brief Which mixed precision a layout trains in, torchtitan's rule:
/// FSDP casts its gathered weights to [training] mixed_precision_param;
/// without FSDP, single-device and DDP training run forward and loss under
/// autocast to that dtype (torchtitan's `maybe_enable_amp`, weights and
/// optimizer in fp32); with TP or PP but no FSDP, fp32. The trainer applies
/// the autocast (train/autocast.hpp), `titan estimate` counts activations
/// in its dtype.

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "titan/parallel/parallel_dims.hpp"

namespace titan::parallel {

/// @brief The dtype forward and loss autocast to, or none: none under FSDP
/// (it casts), with TP or PP, for a float32 mixed_precision_param, and on
/// the CPU unless `on_cpu` (the CPU's bf16 kernels are slow where it lacks
/// bf16 instructions, and its runs are there to be compared in fp32).
std::optional<at::ScalarType> autocast_dtype(const ParallelDims& dims, const std::string& mixed_precision_param,
                                             const c10::Device& device, bool on_cpu = false);

}  // namespace titan::parallel
