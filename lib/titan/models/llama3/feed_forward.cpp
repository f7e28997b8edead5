#include "titan/models/llama3/feed_forward.hpp"

#include "titan/models/llama3/init_plan.hpp"
#include "titan/ops/fused/fused_ops.hpp"
#include "titan/ops/init.hpp"

namespace titan::models::llama3 {

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden_dim, at::TensorOptions options, bool fused_)
    : fused(fused_) {
  w1 = register_module("w1", ops::Linear(dim, hidden_dim, options));
  w2 = register_module("w2", ops::Linear(hidden_dim, dim, options));
  w3 = register_module("w3", ops::Linear(dim, hidden_dim, options));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  return call_with_hooks(x, [this](const at::Tensor& in) {
    return w2(fused ? ops::swiglu(w1(in), w3(in)) : at::silu(w1(in)) * w3(in));
  });
}

void FeedForwardImpl::init_weights(double init_std) {
  auto own = named_parameters();
  for (const auto& [name, recipe] : feed_forward_init(init_std)) ops::init_(own[name], recipe);
}

}  // namespace titan::models::llama3
