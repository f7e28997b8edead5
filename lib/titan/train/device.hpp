#pragma once
/// @file
/// @brief Which device a run trains on, from `[training] device`.

#include <c10/core/Device.h>

#include <string>

#include "titan/dist/launch_env.hpp"

namespace titan::train {

/// @brief "cpu" → CPU; "cuda" → this rank's GPU (dist::cuda_device_for,
/// `ranks_per_device` local ranks to a GPU; an error naming the option when
/// this build or machine has no CUDA); "auto" → CUDA when a GPU is present,
/// else CPU. Anything else throws titan::Error.
c10::Device resolve_device(const std::string& want, const dist::LaunchEnv& env = {}, int ranks_per_device = 1);

}  // namespace titan::train
