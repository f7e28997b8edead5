#include "titan/parallel/step_hooks.hpp"

#include <torch/nn/module.h>

#include "titan/util/internal_assert.hpp"

namespace titan::parallel {

void StepHookList::add(std::shared_ptr<TrainStepHooks> hooks) {
  TITAN_INTERNAL_ASSERT(hooks != nullptr, "StepHookList::add: null hooks");
  hooks_.push_back(std::move(hooks));
}

void StepHookList::add_all(const StepHookList& other) {
  for (const auto& h : other.hooks_) hooks_.push_back(h);
}

void StepHookList::before_micro_batch_backward(bool last) const {
  for (const auto& h : hooks_) h->before_micro_batch_backward(last);
}

void StepHookList::after_last_backward() const {
  for (const auto& h : hooks_) h->after_last_backward();
}

void StepHookList::after_optimizer_step() const {
  for (const auto& h : hooks_) h->after_optimizer_step();
}

std::vector<std::string> StepHookList::names() const {
  std::vector<std::string> out;
  for (const auto& h : hooks_) out.push_back(h->name());
  return out;
}

WholeModuleStateDict::WholeModuleStateDict(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {
  TITAN_INTERNAL_ASSERT(module_ != nullptr, "WholeModuleStateDict: null module");
}

std::map<std::string, at::Tensor> WholeModuleStateDict::gather() {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : module_->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

}  // namespace titan::parallel
