#include "titan/parallel/mixed_precision.hpp"

namespace titan::parallel {

std::optional<at::ScalarType> autocast_dtype(const ParallelDims& dims, const std::string& mixed_precision_param,
                                             const c10::Device& device, bool on_cpu) {
  if (dims.fsdp_enabled() || dims.tp_enabled() || dims.pp_enabled()) return std::nullopt;
  if (device.is_cpu() && !on_cpu) return std::nullopt;
  if (mixed_precision_param == "bfloat16") return at::kBFloat16;
  if (mixed_precision_param == "float16") return at::kHalf;
  return std::nullopt;
}

}  // namespace titan::parallel
