// The optimizer step inside backward ([optimizer] early_step_in_backward)
// against the ordinary step after backward: the same updates, bit for bit,
// with gradient accumulation, a parameter that the last micro-batch leaves
// without a gradient, and one that two paths of the graph reach; the
// gradients freed as they are applied; the norm the hooks measured against
// the norm of the gradients the ordinary step saw.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "titan/optim/grad_clip.hpp"
#include "titan/optim/optimizer.hpp"
#include "titan/optim/step_in_backward.hpp"

namespace {

struct Params {
  at::Tensor w1, b1, w2, only_first;  // only_first: used by micro-batch 0 only
  std::vector<at::Tensor> all() const { return {w1, b1, w2, only_first}; }
};

Params make_params() {
  torch::manual_seed(0);
  Params p;
  p.w1 = torch::randn({16, 8}).requires_grad_(true);
  p.b1 = torch::randn({16}).requires_grad_(true);
  p.w2 = torch::randn({4, 16}).requires_grad_(true);
  p.only_first = torch::randn({4}).requires_grad_(true);
  return p;
}

// One micro-batch's loss; w1 is reached by two paths (the hidden layer and
// a side term), so its AccumulateGrad sums both before its hook runs.
at::Tensor loss_of(const Params& p, const at::Tensor& x, int micro_batch) {
  at::Tensor h = at::tanh(x.matmul(p.w1.t()) + p.b1);
  at::Tensor loss = h.matmul(p.w2.t()).pow(2).mean() + 0.1 * x.matmul(p.w1.t()).sin().mean();
  if (micro_batch == 0) loss = loss + (p.only_first * p.only_first).sum();
  return loss;
}

struct Trained {
  Params params;
  std::vector<double> norms;
  std::vector<int64_t> stepped;          // parameters stepped inside backward, per step
  std::vector<int64_t> grads_held_after;  // gradients still held after backward, per step
};

Trained train(const titan::optim::OptimizerOptions& options, bool early) {
  Trained t;
  t.params = make_params();
  auto optimizer = titan::optim::build_optimizer(t.params.all(), options);
  std::unique_ptr<titan::optim::StepInBackward> sib;
  if (early) sib = std::make_unique<titan::optim::StepInBackward>(*optimizer, t.params.all(), std::vector<at::Tensor>{});
  torch::manual_seed(1);
  for (int step = 0; step < 4; ++step) {
    optimizer->zero_grad(/*set_to_none=*/true);
    for (int mb = 0; mb < 2; ++mb) {
      const at::Tensor x = torch::randn({5, 8});
      if (sib) sib->arm(mb == 1);
      loss_of(t.params, x, mb).backward();
    }
    int64_t held = 0;
    for (const at::Tensor& p : t.params.all()) held += p.grad().defined() ? 1 : 0;
    t.grads_held_after.push_back(held);
    if (sib) {
      t.norms.push_back(sib->finish({}).item<double>());
      t.stepped.push_back(sib->stepped_in_backward());
    } else {
      t.norms.push_back(titan::optim::total_grad_norm(t.params.all(), 2.0, {}));
    }
    optimizer->step();  // early: only what backward left (only_first)
  }
  return t;
}

void expect_same_training(const titan::optim::OptimizerOptions& options, const std::string& what) {
  const Trained after = train(options, false);
  const Trained inside = train(options, true);
  const auto a = after.params.all(), b = inside.params.all();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  double worst_norm = 0;
  for (size_t s = 0; s < after.norms.size(); ++s)
    worst_norm = std::max(worst_norm, std::abs(inside.norms[s] - after.norms[s]) / after.norms[s]);
  std::printf("%s: max |dweight| step in backward vs after %.3g; grad norms rel. diff %.3g (%.6f vs %.6f at step 1)\n",
              what.c_str(), worst, worst_norm, inside.norms[0], after.norms[0]);
  EXPECT_EQ(worst, 0.0) << what;
  // The same squares summed in another order (the hooks' arrival order):
  // measured 0 (fused AdamW and Adam); a wrong or missing term is >= 1e-3.
  EXPECT_LT(worst_norm, 1e-13) << what;
  for (size_t s = 0; s < after.norms.size(); ++s) {
    // w1, b1, w2 stepped inside; only_first (no gradient in micro-batch 1)
    // kept its micro-batch-0 gradient for the ordinary step.
    EXPECT_EQ(inside.stepped[s], 3) << what << " step " << s;
    EXPECT_EQ(inside.grads_held_after[s], 1) << what << " step " << s;
    EXPECT_EQ(after.grads_held_after[s], 4) << what << " step " << s;
  }
}

TEST(StepInBackward, TrainsBitForBitLikeTheStepAfterBackward) {
  titan::optim::OptimizerOptions fused;
  fused.lr = 1e-2;
  fused.fused = true;
  expect_same_training(fused, "fused AdamW");
  titan::optim::OptimizerOptions adam = fused;
  adam.name = "Adam";
  adam.fused = false;
  expect_same_training(adam, "Adam (torch::optim's for-loop)");
}

// One parameter's update is the full step's for it, and leaves every other
// gradient (and parameter) alone.
TEST(StepInBackward, StepOneParameterTouchesOnlyThatParameter) {
  Params a = make_params(), b = make_params();
  titan::optim::OptimizerOptions o;
  o.fused = true;
  auto full = titan::optim::build_optimizer(a.all(), o);
  auto one = titan::optim::build_optimizer(b.all(), o);
  torch::manual_seed(2);
  for (size_t i = 0; i < a.all().size(); ++i) {
    const at::Tensor g = torch::randn_like(a.all()[i]);
    a.all()[i].mutable_grad() = g.clone();
    b.all()[i].mutable_grad() = g.clone();
  }
  full->step();
  titan::optim::step_one_parameter(*one, b.w2);
  EXPECT_TRUE(at::equal(a.w2, b.w2));
  EXPECT_FALSE(at::equal(a.w1, b.w1));
  EXPECT_TRUE(at::equal(b.w1, make_params().w1));  // not stepped
  EXPECT_TRUE(b.w1.grad().defined());
  EXPECT_EQ(one->state().size(), 1u);
  EXPECT_EQ(one->param_groups().front().params().size(), 4u);  // the groups are given back whole
}

// Unarmed (the micro-batches before the last), the hooks change nothing:
// the gradients accumulate and no parameter moves.
TEST(StepInBackward, UnarmedBackwardOnlyAccumulates) {
  Params p = make_params(), start = make_params();
  titan::optim::OptimizerOptions o;
  auto optimizer = titan::optim::build_optimizer(p.all(), o);
  titan::optim::StepInBackward sib(*optimizer, p.all(), {});
  sib.arm(false);
  loss_of(p, torch::randn({5, 8}), 0).backward();
  for (size_t i = 0; i < p.all().size(); ++i) {
    EXPECT_TRUE(p.all()[i].grad().defined()) << i;
    EXPECT_TRUE(at::equal(p.all()[i], start.all()[i])) << i;
  }
  EXPECT_EQ(sib.stepped_in_backward(), 0);
}

}  // namespace
