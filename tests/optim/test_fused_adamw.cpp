// FusedAdamW (ATen's fused kernel) against LibTorch's for-loop AdamW: the
// same updates up to fp32 rounding order, the same state layout.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "titan/optim/fused_adamw.hpp"
#include "titan/optim/lr_schedule.hpp"
#include "titan/optim/optimizer.hpp"

namespace {

TEST(FusedAdamW, MatchesForLoopAdamWOverSteps) {
  torch::manual_seed(0);
  std::vector<at::Tensor> a = {torch::randn({64, 32}), torch::randn({32}), torch::randn({7, 3, 5})};
  std::vector<at::Tensor> b;
  for (auto& t : a) {
    t.requires_grad_(true);
    b.push_back(t.detach().clone().requires_grad_(true));
  }
  titan::optim::OptimizerOptions o;
  o.lr = 1e-2;
  auto loop = titan::optim::build_optimizer(a, o);
  o.fused = true;
  auto fused = titan::optim::build_optimizer(b, o);
  ASSERT_NE(dynamic_cast<titan::optim::FusedAdamW*>(fused.get()), nullptr);
  titan::optim::LRScheduleOptions so;
  so.steps = 6, so.warmup_steps = 2;
  titan::optim::LRScheduler sa(*loop, titan::optim::LRSchedule(so)), sb(*fused, titan::optim::LRSchedule(so));
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      at::Tensor g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    loop->step(), fused->step();
    sa.step(), sb.step();
    for (size_t i = 0; i < a.size(); ++i) {
      double diff = (a[i] - b[i]).abs().max().item<double>();
      EXPECT_LT(diff, 1e-6) << "step " << step << " param " << i;
    }
  }
  // The state is torch::optim's: step counts and moments line up.
  auto& st = static_cast<torch::optim::AdamWParamState&>(
      *fused->state().at(b[0].unsafeGetTensorImpl()));
  auto& lt = static_cast<torch::optim::AdamWParamState&>(
      *loop->state().at(a[0].unsafeGetTensorImpl()));
  EXPECT_EQ(st.step(), 6);
  EXPECT_LT((st.exp_avg_sq() - lt.exp_avg_sq()).abs().max().item<double>(), 1e-6);
}

}  // namespace
