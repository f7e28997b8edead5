#include "titan/optim/fused_adamw.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "titan/util/error.hpp"

namespace titan::optim {

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options)
    : torch::optim::AdamW(std::move(params), options) {
  TITAN_CHECK(!options.amsgrad(), "FusedAdamW: amsgrad is not supported");
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // The state key torch::optim uses, so that state_dict() sees ours.
      void* key = p.unsafeGetTensorImpl();
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(s)).first;
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      s.step(s.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      // The kernel reads the (already incremented) step count from a tensor
      // on the parameter's device, as torch.optim's fused path keeps it.
      steps.push_back(at::full({}, static_cast<double>(s.step()), p.options().dtype(at::kFloat)));
    }
    if (params.empty()) continue;
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                      std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  return loss;
}

}  // namespace titan::optim
