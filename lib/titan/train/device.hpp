#pragma once
/// @file
/// @brief Which device a run trains on, from `[training] device`.

#include <c10/core/Device.h>

#include <string>

namespace titan::train {

/// @brief "cpu" → CPU; "cuda" → GPU `local_rank` (an error naming the
/// option when this build or machine has no CUDA); "auto" → CUDA when a GPU
/// is present, else CPU. Anything else throws titan::Error.
c10::Device resolve_device(const std::string& want, int local_rank = 0);

}  // namespace titan::train
