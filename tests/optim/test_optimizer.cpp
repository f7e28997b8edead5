// AdamW and Adam one and two steps against the update written out by hand
// (Loshchilov & Hutter's decoupled decay; Kingma & Ba's bias-corrected
// moments), in float64 so that the comparison is tight.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "titan/optim/lr_schedule.hpp"
#include "titan/optim/optimizer.hpp"
#include "titan/util/error.hpp"

using titan::optim::build_optimizer;
using titan::optim::OptimizerOptions;

namespace {

// Hand-written reference, element by element.
struct RefAdam {
  double b1, b2, eps, wd;
  bool decoupled;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& p, std::vector<double> g, double lr) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled) {
        p[i] -= lr * wd * p[i];  // AdamW: decay the weight, not the gradient
      } else {
        g[i] += wd * p[i];  // Adam: L2 penalty folded into the gradient
      }
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

std::vector<double> to_vec(const torch::Tensor& t) {
  auto c = t.contiguous().to(torch::kDouble);
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

void run_two_steps(const std::string& name, bool decoupled) {
  OptimizerOptions o;
  o.name = name;
  o.lr = 3e-2;  // large enough that decay and update both show
  const std::vector<double> p0 = {0.5, -1.25, 2.0, 0.0, 3.5};
  const std::vector<std::vector<double>> grads = {{0.1, -0.2, 0.3, 1e-9, -4.0},
                                                  {-0.3, 0.05, 0.3, 0.0, 2.0}};
  torch::Tensor p = torch::tensor(p0, torch::kDouble).requires_grad_();
  auto opt = build_optimizer({p}, o);
  RefAdam ref{0.9, 0.95, 1e-8, 0.1, decoupled};
  std::vector<double> pr = p0;
  for (const auto& g : grads) {
    p.mutable_grad() = torch::tensor(g, torch::kDouble);
    opt->step();
    ref.step(pr, g, o.lr);
    const auto got = to_vec(p.detach());
    for (size_t i = 0; i < pr.size(); ++i) EXPECT_NEAR(got[i], pr[i], 1e-12) << name << " i=" << i;
  }
}

}  // namespace

TEST(Optimizer, AdamWMatchesHandUpdate) { run_two_steps("AdamW", true); }
TEST(Optimizer, AdamMatchesHandUpdate) { run_two_steps("Adam", false); }

TEST(Optimizer, DefaultsAreTorchtitans) {
  OptimizerOptions o;
  EXPECT_EQ(o.name, "AdamW");
  EXPECT_DOUBLE_EQ(o.beta1, 0.9);
  EXPECT_DOUBLE_EQ(o.beta2, 0.95);
  EXPECT_DOUBLE_EQ(o.eps, 1e-8);
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.1);
  torch::Tensor p = torch::zeros({3}, torch::kFloat).requires_grad_();
  auto opt = build_optimizer({p}, o);
  auto& adamw = dynamic_cast<torch::optim::AdamWOptions&>(opt->param_groups()[0].options());
  EXPECT_DOUBLE_EQ(std::get<1>(adamw.betas()), 0.95);
  EXPECT_DOUBLE_EQ(adamw.weight_decay(), 0.1);
  EXPECT_FALSE(adamw.amsgrad());
}

TEST(Optimizer, NamesAndErrors) {
  EXPECT_EQ(titan::optim::canonical_optimizer_name("adamw"), "AdamW");
  EXPECT_EQ(titan::optim::canonical_optimizer_name("Adam"), "Adam");
  torch::Tensor p = torch::zeros({3}).requires_grad_();
  OptimizerOptions o;
  o.name = "SGD";
  try {
    build_optimizer({p}, o);
    FAIL() << "expected titan::Error";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("AdamW"), std::string::npos) << e.what();
  }
  o.name = "AdamW";
  o.lr = -1;
  EXPECT_THROW(build_optimizer({p}, o), titan::Error);
  o.lr = 1e-3;
  o.beta2 = 1.0;
  EXPECT_THROW(build_optimizer({p}, o), titan::Error);
  o.beta2 = 0.95;
  EXPECT_THROW(build_optimizer({}, o), titan::Error);
}

TEST(Optimizer, SchedulerLrDrivesDecoupledDecay) {
  // With a zero gradient Adam's update is 0, so one step leaves exactly
  // p·(1 − lr·wd): this shows the scheduled LR (not the base) is used.
  OptimizerOptions o;
  o.lr = 1e-2;
  torch::Tensor p = torch::full({4}, 2.0, torch::kDouble).requires_grad_();
  auto opt = build_optimizer({p}, o);
  titan::optim::LRScheduleOptions so;
  so.steps = 10;
  so.warmup_steps = 4;  // step 1 runs at lr·1/4
  titan::optim::LRScheduler sched(*opt, titan::optim::LRSchedule(so));
  EXPECT_DOUBLE_EQ(sched.current_lr(), 1e-2 / 4);
  p.mutable_grad() = torch::zeros({4}, torch::kDouble);
  opt->step();
  EXPECT_NEAR(p[0].item<double>(), 2.0 * (1 - 1e-2 / 4 * 0.1), 1e-15);
  sched.step();
  EXPECT_DOUBLE_EQ(sched.current_lr(), 1e-2 / 2);
  EXPECT_EQ(titan::optim::learning_rates(*opt), std::vector<double>{1e-2 / 2});
}
