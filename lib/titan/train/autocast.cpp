#include "titan/train/autocast.hpp"

#include <ATen/autocast_mode.h>

namespace titan::train {

std::optional<at::ScalarType> autocast_dtype(const parallel::ParallelDims& dims,
                                             const std::string& mixed_precision_param, const c10::Device& device,
                                             bool on_cpu) {
  if (dims.fsdp_enabled() || dims.tp_enabled() || dims.pp_enabled()) return std::nullopt;
  if (device.is_cpu() && !on_cpu) return std::nullopt;
  if (mixed_precision_param == "bfloat16") return at::kBFloat16;
  if (mixed_precision_param == "float16") return at::kHalf;
  return std::nullopt;
}

AutocastGuard::AutocastGuard(const c10::Device& device, std::optional<at::ScalarType> dtype) {
  if (!dtype) return;
  active_ = true;
  type_ = device.type();
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  was_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, *dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
}

}  // namespace titan::train
