#include "titan/ops/forward_hooks.hpp"

#include <c10/util/SmallVector.h>

#include "titan/util/error.hpp"

namespace titan::ops {

void HookableModule::add_forward_hook(std::shared_ptr<ForwardHook> hook) {
  hooks_.push_back(std::move(hook));
}

void HookableModule::add_forward_hook_first(std::shared_ptr<ForwardHook> hook) {
  hooks_.insert(hooks_.begin(), std::move(hook));
}

void HookableModule::replace_forward_hook(const ForwardHook* old_hook, std::shared_ptr<ForwardHook> hook) {
  for (auto& h : hooks_)
    if (h.get() == old_hook) {
      h = std::move(hook);
      return;
    }
  TITAN_CHECK(false, "replace_forward_hook: module ", name(), " has no such hook");
}

namespace {
thread_local bool t_in_recompute = false;
thread_local bool t_in_checkpointed_forward = false;
}  // namespace

bool in_recompute() { return t_in_recompute; }

RecomputeScope::RecomputeScope() : previous_(t_in_recompute) { t_in_recompute = true; }
RecomputeScope::~RecomputeScope() { t_in_recompute = previous_; }

bool in_checkpointed_forward() { return t_in_checkpointed_forward; }

CheckpointedForwardScope::CheckpointedForwardScope() : previous_(t_in_checkpointed_forward) {
  t_in_checkpointed_forward = true;
}
CheckpointedForwardScope::~CheckpointedForwardScope() { t_in_checkpointed_forward = previous_; }

at::Tensor HookableModule::call_with_hooks(const at::Tensor& input,
                                           const std::function<at::Tensor(const at::Tensor&)>& body) {
  if (wrapper_) {
    // The wrapper may run it again in backward: it holds the module and a
    // copy of the body.
    auto self = std::static_pointer_cast<HookableModule>(shared_from_this());
    return wrapper_(input, [self, body](const at::Tensor& x) { return self->run_hooks(x, body); });
  }
  return run_hooks(input, body);
}

at::Tensor HookableModule::run_hooks(const at::Tensor& input,
                                     const std::function<at::Tensor(const at::Tensor&)>& body) {
  // Fast path: an unwrapped model pays one empty-vector check per call.
  if (hooks_.empty()) return body(input);
  // One HookCall per hook for this call only (see HookCall).
  c10::SmallVector<HookCall, 4> calls(hooks_.size());
  at::Tensor x = input;
  for (size_t i = 0; i < hooks_.size(); ++i) x = hooks_[i]->pre_forward(x, calls[i]);
  at::Tensor y;
  for (size_t i = 0; i < hooks_.size() && !y.defined(); ++i)
    if ((y = hooks_[i]->forward_override(x, calls[i])).defined()) calls[i].replaced_body = true;
  if (!y.defined()) y = body(x);
  for (size_t i = 0; i < hooks_.size(); ++i) y = hooks_[i]->post_forward(y, calls[i]);
  return y;
}

}  // namespace titan::ops
