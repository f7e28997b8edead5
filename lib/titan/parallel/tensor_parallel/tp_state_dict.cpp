#include "titan/parallel/tensor_parallel/tp_state_dict.hpp"

#include "titan/util/internal_assert.hpp"

namespace titan::tp {

TpStateDict::TpStateDict(std::shared_ptr<parallel::FullStateDict> below, std::map<std::string, TpParameterInfo> placed,
                         c10::Device comm_device)
    : below_(std::move(below)), placed_(std::move(placed)), comm_device_(comm_device) {
  TITAN_INTERNAL_ASSERT(below_ != nullptr, "TpStateDict: null state dict below");
}

std::map<std::string, at::Tensor> TpStateDict::gather() { return gather_tp_tensors(below_->gather(), placed_, comm_device_); }

}  // namespace titan::tp
