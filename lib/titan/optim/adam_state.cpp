#include "titan/optim/adam_state.hpp"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include "titan/util/error.hpp"

namespace titan::optim {

namespace {

bool owns(const torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return true;
  return false;
}

// The state object of `param`, created as LibTorch's step() would create
// it (zeros shaped like the parameter, step 0).
template <typename State>
State& state_of(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  void* key = param.unsafeGetTensorImpl();
  auto& states = optimizer.state();
  auto it = states.find(key);
  if (it == states.end()) {
    TITAN_CHECK(owns(optimizer, param), "optimizer state: the tensor is not one of the optimizer's parameters");
    auto s = std::make_unique<State>();
    s->step(0);
    s->exp_avg(at::zeros_like(param.detach(), at::MemoryFormat::Preserve));
    s->exp_avg_sq(at::zeros_like(param.detach(), at::MemoryFormat::Preserve));
    it = states.emplace(key, std::move(s)).first;
  }
  auto* s = dynamic_cast<State*>(it->second.get());
  TITAN_CHECK(s != nullptr, "optimizer state: unexpected state type");
  return *s;
}

}  // namespace

AdamMoments adam_state(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    auto& s = state_of<torch::optim::AdamWParamState>(optimizer, param);
    return {s.exp_avg(), s.exp_avg_sq(), s.step()};
  }
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    auto& s = state_of<torch::optim::AdamParamState>(optimizer, param);
    return {s.exp_avg(), s.exp_avg_sq(), s.step()};
  }
  throw Error("optimizer state: only Adam and AdamW can be checkpointed");
}

void set_adam_step(torch::optim::Optimizer& optimizer, const at::Tensor& param, int64_t step) {
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    state_of<torch::optim::AdamWParamState>(optimizer, param).step(step);
    return;
  }
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    state_of<torch::optim::AdamParamState>(optimizer, param).step(step);
    return;
  }
  throw Error("optimizer state: only Adam and AdamW can be checkpointed");
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  auto bytes = [](const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; };
  int64_t total = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state.get()))
      total += bytes(s->exp_avg()) + bytes(s->exp_avg_sq()) + bytes(s->max_exp_avg_sq());
    else if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(state.get()))
      total += bytes(a->exp_avg()) + bytes(a->exp_avg_sq()) + bytes(a->max_exp_avg_sq());
  }
  return total;
}

}  // namespace titan::optim
