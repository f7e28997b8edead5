// The LR multipliers at every step of small runs, worked out by hand from
// torchtitan's rule (v0.2 linear_warmup_stable_decay, see docs/optim.md):
//   W = min(warmup, steps), D = round(steps·ratio) (or steps − W), S = steps + 1 − W − D,
//   k < W: (k+1)/W;  k < W+S: 1;  else p = (k+1−W−S)/D, m + (1−m)·f(p).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "titan/optim/lr_schedule.hpp"
#include "titan/config/job_config.hpp"
#include "titan/optim/optimizer.hpp"
#include "titan/train/builders.hpp"
#include "titan/util/error.hpp"

using titan::optim::LRSchedule;
using titan::optim::LRScheduleOptions;

namespace {

LRScheduleOptions make(int64_t steps, int64_t warmup, std::optional<double> ratio = std::nullopt,
                       std::string type = "linear", double min_lr = 0.0) {
  LRScheduleOptions o;
  o.steps = steps;
  o.warmup_steps = warmup;
  o.decay_ratio = ratio;
  o.decay_type = type;
  o.min_lr_factor = min_lr;
  return o;
}

void expect_table(const LRSchedule& s, const std::vector<double>& table) {
  for (size_t k = 0; k < table.size(); ++k)
    EXPECT_NEAR(s.multiplier(static_cast<int64_t>(k)), table[k], 1e-12) << "k=" << k;
}

}  // namespace

TEST(LRSchedule, WarmupThenLinearDecay) {
  // steps 10, warmup 2: D = 8, S = 1; the last step sits at 1/8, not 0.
  LRSchedule s(make(10, 2));
  EXPECT_EQ(s.warmup_steps(), 2);
  EXPECT_EQ(s.decay_steps(), 8);
  EXPECT_EQ(s.stable_steps(), 1);
  expect_table(s, {0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125});
}

TEST(LRSchedule, WarmupStableDecayWithFloor) {
  // steps 10, warmup 2, decay_ratio 0.4: D = 4, S = 5; floor 0.1:
  // m + (1 − m)(1 − p) for p = 1/4, 2/4, 3/4 → 0.775, 0.55, 0.325.
  LRSchedule s(make(10, 2, 0.4, "linear", 0.1));
  EXPECT_EQ(s.decay_steps(), 4);
  EXPECT_EQ(s.stable_steps(), 5);
  expect_table(s, {0.5, 1, 1, 1, 1, 1, 1, 0.775, 0.55, 0.325});
}

TEST(LRSchedule, CosineWithoutWarmup) {
  // steps 5, no warm-up: D = 5, S = 1; ½(1 + cos πp) for p = 0.2 … 0.8.
  LRSchedule s(make(5, 0, std::nullopt, "cosine"));
  expect_table(s, {1.0, 0.9045084971874737, 0.6545084971874737, 0.3454915028125263,
                   0.0954915028125263});
}

TEST(LRSchedule, SqrtDecay) {
  // steps 4, warmup 1: D = 3, S = 1; 1 − √p for p = 1/3, 2/3.
  LRSchedule s(make(4, 1, std::nullopt, "sqrt"));
  expect_table(s, {1.0, 1.0, 1.0 - std::sqrt(1.0 / 3), 1.0 - std::sqrt(2.0 / 3)});
}

TEST(LRSchedule, WarmupLongerThanRunIsClamped) {
  // torchtitan's default warmup (200) on a 3-step run: W = 3, D = 0.
  LRSchedule s(make(3, 200));
  EXPECT_EQ(s.warmup_steps(), 3);
  EXPECT_EQ(s.decay_steps(), 0);
  expect_table(s, {1.0 / 3, 2.0 / 3, 1.0});
  EXPECT_DOUBLE_EQ(s.multiplier(50), 1.0);  // past the run, no decay phase: peak
}

TEST(LRSchedule, DecayRatioTooLargeIsClamped) {
  // steps 10, warmup 8, ratio 0.5 → D = 5, clamped to 10 − 8 = 2, S = 1.
  LRSchedule s(make(10, 8, 0.5));
  EXPECT_EQ(s.decay_steps(), 2);
  expect_table(s, {0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.0, 0.5});
  EXPECT_DOUBLE_EQ(s.multiplier(100), 0.0);  // past the run: the floor
}

TEST(LRSchedule, BadOptionsAreOneLineErrors) {
  EXPECT_THROW(LRSchedule(make(0, 1)), titan::Error);
  EXPECT_THROW(LRSchedule(make(10, -1)), titan::Error);
  EXPECT_THROW(LRSchedule(make(10, 1, 1.5)), titan::Error);
  EXPECT_THROW(LRSchedule(make(10, 1, std::nullopt, "linear", 2.0)), titan::Error);
  try {
    LRSchedule(make(10, 1, std::nullopt, "exponential"));
    FAIL();
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cosine"), std::string::npos) << e.what();
  }
}

TEST(LRScheduler, AppliesToEveryParamGroupLikeLambdaLR) {
  torch::Tensor a = torch::zeros({2}).requires_grad_();
  torch::Tensor b = torch::zeros({2}).requires_grad_();
  titan::optim::OptimizerOptions oo;
  oo.lr = 1e-3;
  auto opt = titan::optim::build_optimizer({a}, oo);
  // A second group with its own peak LR keeps its own base.
  opt->add_param_group(torch::optim::OptimizerParamGroup(
      {b}, std::make_unique<torch::optim::AdamWOptions>(2e-3)));
  titan::optim::LRScheduler sched(*opt, LRSchedule(make(10, 2)));
  // Construction sets step 1's LR (k = 0), as LambdaLR's constructor does.
  EXPECT_EQ(sched.last_step(), 0);
  EXPECT_DOUBLE_EQ(titan::optim::learning_rates(*opt)[0], 0.5e-3);
  EXPECT_DOUBLE_EQ(titan::optim::learning_rates(*opt)[1], 1.0e-3);
  sched.step();
  EXPECT_DOUBLE_EQ(sched.current_lr(), 1e-3);
  sched.set_last_step(9);  // resume at the last step
  EXPECT_DOUBLE_EQ(titan::optim::learning_rates(*opt)[0], 0.125e-3);
  EXPECT_DOUBLE_EQ(titan::optim::learning_rates(*opt)[1], 0.25e-3);
}

TEST(LRScheduler, TotalStepsDecouplesTheScheduleFromTheRun) {
  // torchtitan's [lr_scheduler] total_steps: a 5-step run on the curve of a
  // 10-step one (warm-up 2), whose step-5 LR is 0.625, not the run's end.
  torch::Tensor a = torch::zeros({2}).requires_grad_();
  titan::optim::OptimizerOptions oo;
  oo.lr = 1e-3;
  auto opt = titan::optim::build_optimizer({a}, oo);
  titan::config::JobConfig cfg;
  cfg.training.steps = 5;
  cfg.lr_scheduler.warmup_steps = 2;
  cfg.lr_scheduler.total_steps = 10;
  auto sched = titan::train::build_lr_scheduler(*opt, cfg);
  EXPECT_EQ(sched->schedule().total_steps(), 10);
  expect_table(sched->schedule(), {0.5, 1.0, 1.0, 0.875, 0.75, 0.625});
  cfg.lr_scheduler.total_steps = -1;  // the run's own length
  EXPECT_EQ(titan::train::build_lr_scheduler(*opt, cfg)->schedule().total_steps(), 5);
}
