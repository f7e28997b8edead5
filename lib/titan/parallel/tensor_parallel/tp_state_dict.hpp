#pragma once
/// @file
/// @brief The full weights of a tensor-parallel model: whatever the layout
/// below TP gathers (FSDP's shards, or the TP-local tensors themselves),
/// then the TP slices concatenated (gather_tp_tensors).

#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <string>

#include "titan/parallel/step_hooks.hpp"
#include "titan/parallel/tensor_parallel/parallelize_module.hpp"

namespace titan::tp {

/// @brief FullStateDict of a model whose styles placed `placed`
/// (tp_parameters, read right after parallelize_module: FSDP may later
/// swap the tensors, the names stay).
class TpStateDict : public parallel::FullStateDict {
 public:
  TpStateDict(std::shared_ptr<parallel::FullStateDict> below, std::map<std::string, TpParameterInfo> placed,
              c10::Device comm_device);
  std::map<std::string, at::Tensor> gather() override;

 private:
  std::shared_ptr<parallel::FullStateDict> below_;
  std::map<std::string, TpParameterInfo> placed_;
  c10::Device comm_device_;
};

}  // namespace titan::tp
