#pragma once
/// @file
/// @brief Float8's part of the train step (parallel/step_hooks.hpp).

#include <memory>

#include "titan/parallel/step_hooks.hpp"

namespace titan::float8 {

/// @brief torchtitan's post-optimizer hook for float8 all-gathers: after
/// every optimizer step, the scales of the next step's float8 weight
/// all-gathers, from the new weights' amaxes in one all-reduce for all
/// layers (precompute_float8_dynamic_scale_for_fsdp).
class Float8StepHooks : public parallel::TrainStepHooks {
 public:
  explicit Float8StepHooks(std::shared_ptr<torch::nn::Module> root);
  std::string name() const override { return "float8"; }
  void after_optimizer_step() override;

 private:
  std::shared_ptr<torch::nn::Module> root_;
};

}  // namespace titan::float8
