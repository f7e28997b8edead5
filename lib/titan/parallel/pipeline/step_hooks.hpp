#pragma once
/// @file
/// @brief Pipeline parallelism's part of the train step
/// (parallel/step_hooks.hpp): the hooks of this rank's stages.

#include <vector>

#include "titan/parallel/step_hooks.hpp"

namespace titan::pp {

/// @brief The step hooks of this rank's pipeline stages. Each stage calls
/// its own before_micro_batch_backward before its micro-batches' weight
/// backwards (StageOptions::before_weight_backward): the schedule, not the
/// train step's loop, knows which micro-batch is a stage's last. After the
/// step's last backward and after the optimizer step, every stage's hooks
/// run, in stage order.
class PipelineStepHooks : public parallel::TrainStepHooks {
 public:
  explicit PipelineStepHooks(std::vector<parallel::StepHookList> stages) : stages_(std::move(stages)) {}
  std::string name() const override { return "PP"; }
  void after_last_backward() override;
  void after_optimizer_step() override;

 private:
  std::vector<parallel::StepHookList> stages_;
};

}  // namespace titan::pp
