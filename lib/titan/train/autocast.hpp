#pragma once
/// @file
/// @brief Mixed precision without FSDP: torchtitan's `maybe_enable_amp`,
/// the scope that autocasts forward and loss to the dtype
/// parallel::autocast_dtype picks for the layout.

#include <ATen/core/ATen_fwd.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "titan/parallel/mixed_precision.hpp"

namespace titan::train {

using parallel::autocast_dtype;

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
