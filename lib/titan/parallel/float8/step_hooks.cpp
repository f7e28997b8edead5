#include "titan/parallel/float8/step_hooks.hpp"

#include <torch/nn/module.h>

#include "titan/parallel/float8/float8_linear.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::float8 {

Float8StepHooks::Float8StepHooks(std::shared_ptr<torch::nn::Module> root) : root_(std::move(root)) {
  TITAN_INTERNAL_ASSERT(root_ != nullptr, "Float8StepHooks: null module");
}

void Float8StepHooks::after_optimizer_step() { precompute_float8_dynamic_scale_for_fsdp(*root_); }

}  // namespace titan::float8
