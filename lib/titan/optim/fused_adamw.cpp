#include "titan/optim/fused_adamw.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <map>
#include <vector>

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
    std::vector<int64_t> step_counts;
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
      step_counts.push_back(s.step());
    }
    if (params.empty()) continue;
    // The kernel reads each (already incremented) step count from a 0-dim
    // tensor on the parameters' device, as torch.optim's fused path keeps
    // it: made by one fill per distinct count (all share one, but for a
    // parameter that missed steps), not a fill kernel per parameter.
    steps.assign(params.size(), at::Tensor());
    std::map<int64_t, std::vector<size_t>> by_count;
    for (size_t k = 0; k < step_counts.size(); ++k) by_count[step_counts[k]].push_back(k);
    for (const auto& [count, which] : by_count) {
      const std::vector<at::Tensor> filled =
          at::full({static_cast<int64_t>(which.size())}, static_cast<double>(count),
                   params.front().options().dtype(at::kFloat)).unbind(0);
      for (size_t k = 0; k < which.size(); ++k) steps[which[k]] = filled[k];
    }
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                      std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  return loss;
}

}  // namespace titan::optim
