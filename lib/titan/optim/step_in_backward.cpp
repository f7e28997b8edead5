#include "titan/optim/step_in_backward.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>
#include <unordered_set>
#include <utility>

#include "titan/optim/grad_clip.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::optim {

void step_one_parameter(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  // Every group is narrowed to `param` (or to nothing) for one step() and
  // given its parameters back after: the optimizer's own update, state and
  // options, without a second implementation of it to keep equal.
  auto& groups = optimizer.param_groups();
  std::vector<std::vector<at::Tensor>> kept;
  kept.reserve(groups.size());
  bool found = false;
  for (auto& group : groups) {
    kept.push_back(std::move(group.params()));
    std::vector<at::Tensor> only;
    for (const at::Tensor& p : kept.back())
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) only.push_back(p), found = true;
    group.params() = std::move(only);
  }
  auto give_back = [&] {
    for (size_t i = 0; i < groups.size(); ++i) groups[i].params() = std::move(kept[i]);
  };
  try {
    TITAN_INTERNAL_ASSERT(found, "step_one_parameter: the parameter is not one of the optimizer's");
    optimizer.step();
  } catch (...) {
    give_back();
    throw;
  }
  give_back();
}

struct StepInBackward::State {
  std::mutex mu;  // hooks run on autograd's threads (one per device)
  torch::optim::Optimizer* optimizer = nullptr;
  std::unordered_set<const c10::TensorImpl*> counted;  // what the norm counts
  bool armed = false;
  std::unordered_set<const c10::TensorImpl*> stepped;  // in the armed backward
  // Parameters whose AccumulateGrad is about to run with an undefined
  // gradient (seen by UndefinedGradientMark).
  std::unordered_set<const c10::TensorImpl*> arrived_undefined;
  at::Tensor partial;  // Σ|g|² of the counted parameters stepped so far, float64

  void on_final_gradient(const at::Tensor& param) {
    std::lock_guard<std::mutex> lock(mu);
    // AccumulateGrad calls the hook even when the gradient it got was
    // undefined (nothing added): FSDP's shards get one such call in every
    // backward, before FSDP adds the reduced gradient and calls again.
    if (arrived_undefined.erase(param.unsafeGetTensorImpl()) > 0) return;
    if (!armed || !param.grad().defined()) return;
    TITAN_INTERNAL_ASSERT(stepped.insert(param.unsafeGetTensorImpl()).second,
                          "StepInBackward: a parameter's gradient was final twice in one step");
    if (counted.count(param.unsafeGetTensorImpl())) {
      const at::Tensor p = grad_norm_partial({param}, 2.0);
      partial = partial.defined() ? partial + p : p;
    }
    step_one_parameter(*optimizer, param);
    // Freed now: the point of stepping early (torchtitan's hook calls
    // zero_grad() on the parameter's optimizer the same way).
    param.mutable_grad() = at::Tensor();
  }
};

namespace {

// torch's post-accumulate-grad hook (what Tensor.register_post_accumulate_
// grad_hook installs from Python): called by AccumulateGrad once the
// backward's gradient is in .grad, and by FSDP on a shard once its reduced
// gradient is.
class FinalGradientHook : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit FinalGradientHook(std::weak_ptr<StepInBackward::State> state) : state_(std::move(state)) {}
  void operator()(const torch::autograd::Variable& param) override {
    if (auto s = state_.lock()) s->on_final_gradient(param);
  }

 private:
  std::weak_ptr<StepInBackward::State> state_;
};

// A tensor pre-hook: autograd calls it with the gradient about to reach
// the parameter's AccumulateGrad, so it can tell the hook above that this
// time nothing will be added.
class UndefinedGradientMark : public torch::autograd::FunctionPreHook {
 public:
  UndefinedGradientMark(std::weak_ptr<StepInBackward::State> state, const c10::TensorImpl* param)
      : state_(std::move(state)), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    if (auto s = state_.lock()) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (!grads.empty() && !grads.front().defined()) s->arrived_undefined.insert(param_);
      else s->arrived_undefined.erase(param_);
    }
    return grads;
  }

 private:
  std::weak_ptr<StepInBackward::State> state_;
  const c10::TensorImpl* param_;  // a key only
};

}  // namespace

StepInBackward::StepInBackward(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                               const std::vector<at::Tensor>& norm_params)
    : state_(std::make_shared<State>()), params_(params) {
  state_->optimizer = &optimizer;
  for (const at::Tensor& p : norm_params.empty() ? params : norm_params)
    state_->counted.insert(p.unsafeGetTensorImpl());
  for (const at::Tensor& p : params_) {
    if (!p.requires_grad()) continue;
    TITAN_INTERNAL_ASSERT(!torch::autograd::impl::post_acc_grad_hooks(p),
                          "StepInBackward: a parameter already has a post-accumulate-grad hook");
    torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<FinalGradientHook>(state_));
    torch::autograd::impl::add_hook(p, std::make_unique<UndefinedGradientMark>(state_, p.unsafeGetTensorImpl()));
  }
}

// The post-accumulate-grad hooks go; the pre-hooks stay (a tensor's
// pre-hooks can only be cleared all together), inert once the state is gone.
StepInBackward::~StepInBackward() {
  for (const at::Tensor& p : params_)
    if (p.requires_grad()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void StepInBackward::arm(bool last) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->armed && last) state_->stepped.clear();
  state_->armed = last;
}

at::Tensor StepInBackward::finish(const std::vector<const dist::ProcessGroup*>& groups) {
  at::Tensor partial;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->armed = false;
    partial = std::move(state_->partial);
    state_->partial = at::Tensor();
  }
  // The parameters backward did not step (no gradient in the last
  // micro-batch) count with what they accumulated.
  std::vector<at::Tensor> left;
  for (const at::Tensor& p : params_)
    if (p.grad().defined() && state_->counted.count(p.unsafeGetTensorImpl())) left.push_back(p);
  const at::Tensor rest = grad_norm_partial(left, 2.0);  // 0 when none is left
  partial = partial.defined() ? partial.to(rest.device()) + rest : rest;
  return total_grad_norm_from_partial(partial, 2.0, groups);
}

int64_t StepInBackward::stepped_in_backward() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<int64_t>(state_->stepped.size());
}

}  // namespace titan::optim
