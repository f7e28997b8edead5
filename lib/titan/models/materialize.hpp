#pragma once
/// @file
/// @brief Moving a module built on the meta device onto a real device.

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>

namespace titan::models {

/// @brief Gives every parameter of `module` (recursively) fresh, uninitialised
/// storage of the same shape and dtype on `device` — PyTorch's
/// Module.to_empty(). Works from the meta device, where .to() cannot (there is
/// no data to copy). Every module owning parameters must be a
/// titan::ops::ParamModule (Linear, Embedding, RMSNorm), since LibTorch cannot
/// swap a parameter otherwise; a titan::Error names any other. Modules with
/// buffers are rejected the same way. Initialise afterwards (init_weights()).
void to_empty(torch::nn::Module& module, at::Device device);

/// True when any parameter of `module` (recursively) is on the meta device.
bool has_meta_parameters(const torch::nn::Module& module);

/// Sum of numel() over module.parameters() (works on meta: no memory touched).
int64_t numel_of_parameters(const torch::nn::Module& module);

}  // namespace titan::models
