#include "titan/parallel/fsdp/step_hooks.hpp"

#include <torch/nn/module.h>

#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::fsdp {

FsdpStepHooks::FsdpStepHooks(std::shared_ptr<torch::nn::Module> root, bool reduce_once_per_step)
    : root_(std::move(root)), reduce_once_per_step_(reduce_once_per_step) {
  TITAN_INTERNAL_ASSERT(root_ != nullptr, "FsdpStepHooks: null module");
}

void FsdpStepHooks::before_micro_batch_backward(bool last) {
  if (reduce_once_per_step_) set_requires_gradient_sync(*root_, last);
}

FsdpStateDict::FsdpStateDict(std::shared_ptr<torch::nn::Module> root) : root_(std::move(root)) {
  TITAN_INTERNAL_ASSERT(root_ != nullptr, "FsdpStateDict: null module");
}

std::map<std::string, at::Tensor> FsdpStateDict::gather() { return full_state_dict(*root_); }

}  // namespace titan::fsdp
