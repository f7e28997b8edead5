#include "titan/ops/forward_hooks.hpp"

namespace titan::ops {

void HookableModule::add_forward_hook(std::shared_ptr<ForwardHook> hook) {
  hooks_.push_back(std::move(hook));
}

at::Tensor HookableModule::call_with_hooks(const at::Tensor& input,
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
