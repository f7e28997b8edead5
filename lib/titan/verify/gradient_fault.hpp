#pragma once
/// @file
/// @brief The fault the tests of `titan verify` inject, as a
/// TrainerOptions::after_backward adapter: a layout that mis-averages (or
/// mis-signs) one rank's gradients, which the layout check must name.
/// Outside the train step, so that no real run carries test code.

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace titan::verify {

/// @brief TITAN_FAULT_SCALE_GRADS="RANK:FACTOR": on that rank of a job of
/// more than one rank, every gradient of the tensors the optimizer steps
/// (its shards under FSDP) is multiplied by FACTOR after backward. Returns
/// the adapter, or an empty function where the variable is unset, names
/// another rank, or the job has one rank. Never set in real runs.
std::function<void(const std::vector<at::Tensor>&)> gradient_fault_from_env();

}  // namespace titan::verify
