#pragma once
/// @file
/// @brief Mixed precision without FSDP: torchtitan's `maybe_enable_amp`.
/// FSDP casts its gathered weights to [training] mixed_precision_param
/// itself; single-device and DDP training instead run forward and loss
/// under autocast to that dtype (torch.autocast), weights and optimizer in
/// fp32. With TP or PP but no FSDP, torchtitan trains in fp32, and so does
/// titan.

#include <ATen/core/ATen_fwd.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "titan/parallel/parallel_dims.hpp"

namespace titan::train {

/// @brief The dtype forward and loss autocast to, or none: none under FSDP
/// (it casts), with TP or PP (torchtitan's rule), for a float32
/// mixed_precision_param, and on the CPU unless `on_cpu` (the CPU's
/// bf16 kernels are slow where it lacks bf16 instructions, and its runs
/// are there to be compared in fp32; TrainerOptions::autocast_on_cpu).
std::optional<at::ScalarType> autocast_dtype(const parallel::ParallelDims& dims,
                                             const std::string& mixed_precision_param, const c10::Device& device,
                                             bool on_cpu = false);

/// @brief Autocast to `dtype` on `device`'s type for this scope (nothing
/// when dtype is none), as `with torch.autocast(...)`: the previous state
/// comes back at the end, and the cast-weight cache is cleared when the
/// outermost one ends.
class AutocastGuard {
 public:
  AutocastGuard(const c10::Device& device, std::optional<at::ScalarType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

}  // namespace titan::train
