#include "titan/ops/forward_hooks.hpp"

namespace titan::ops {

void HookableModule::add_forward_hook(std::shared_ptr<ForwardHook> hook) {
  hooks_.push_back(std::move(hook));
}

namespace {
thread_local bool t_in_recompute = false;
}  // namespace

bool in_recompute() { return t_in_recompute; }

RecomputeScope::RecomputeScope() : previous_(t_in_recompute) { t_in_recompute = true; }
RecomputeScope::~RecomputeScope() { t_in_recompute = previous_; }

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
  at::Tensor x = input;
  for (const auto& h : hooks_) x = h->pre_forward(x);
  at::Tensor y;
  for (const auto& h : hooks_)
    if ((y = h->forward_override(x)).defined()) break;
  if (!y.defined()) y = body(x);
  for (const auto& h : hooks_) y = h->post_forward(y);
  return y;
}

}  // namespace titan::ops
