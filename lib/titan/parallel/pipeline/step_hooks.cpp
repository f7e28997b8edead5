#include "titan/parallel/pipeline/step_hooks.hpp"

namespace titan::pp {

void PipelineStepHooks::after_last_backward() {
  for (const parallel::StepHookList& stage : stages_) stage.after_last_backward();
}

void PipelineStepHooks::after_optimizer_step() {
  for (const parallel::StepHookList& stage : stages_) stage.after_optimizer_step();
}

}  // namespace titan::pp
