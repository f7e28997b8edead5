// The train step's hook list (parallel/step_hooks.hpp): phases reach every
// technique's hooks in the order they were applied, PP's hooks forward the
// step's phases to each stage's list (and leave the micro-batch phase to
// the stages), and the whole-module gather returns copies.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "titan/parallel/pipeline/step_hooks.hpp"
#include "titan/parallel/step_hooks.hpp"

namespace {

using titan::parallel::StepHookList;
using titan::parallel::TrainStepHooks;

// Appends "<name>.<phase>" to a shared log at each phase.
class Recorder : public TrainStepHooks {
 public:
  Recorder(std::string name, std::vector<std::string>* log) : name_(std::move(name)), log_(log) {}
  std::string name() const override { return name_; }
  void before_micro_batch_backward(bool last) override { log_->push_back(name_ + ".before(" + (last ? "last" : "not last") + ")"); }
  void after_last_backward() override { log_->push_back(name_ + ".after_backward"); }
  void after_optimizer_step() override { log_->push_back(name_ + ".after_optimizer"); }

 private:
  std::string name_;
  std::vector<std::string>* log_;
};

}  // namespace

TEST(StepHooks, ListCallsEveryHookInTheOrderAdded) {
  std::vector<std::string> log;
  StepHookList list;
  EXPECT_TRUE(list.empty());
  list.add(std::make_shared<Recorder>("float8", &log));
  list.add(std::make_shared<Recorder>("FSDP", &log));
  EXPECT_EQ(list.names(), (std::vector<std::string>{"float8", "FSDP"}));
  list.before_micro_batch_backward(false);
  list.before_micro_batch_backward(true);
  list.after_last_backward();
  list.after_optimizer_step();
  const std::vector<std::string> want = {"float8.before(not last)", "FSDP.before(not last)", "float8.before(last)",
                                         "FSDP.before(last)",       "float8.after_backward", "FSDP.after_backward",
                                         "float8.after_optimizer",  "FSDP.after_optimizer"};
  EXPECT_EQ(log, want);
}

TEST(StepHooks, PipelineForwardsStepPhasesToEachStageInStageOrder) {
  std::vector<std::string> log;
  StepHookList stage0, stage1;
  stage0.add(std::make_shared<Recorder>("s0", &log));
  stage1.add(std::make_shared<Recorder>("s1", &log));
  titan::pp::PipelineStepHooks pp({stage0, stage1});
  EXPECT_EQ(pp.name(), "PP");
  // The stages call their own micro-batch hooks (the schedule knows each
  // stage's last micro-batch): the train step's call reaches none of them.
  pp.before_micro_batch_backward(true);
  EXPECT_TRUE(log.empty());
  pp.after_last_backward();
  pp.after_optimizer_step();
  EXPECT_EQ(log, (std::vector<std::string>{"s0.after_backward", "s1.after_backward", "s0.after_optimizer",
                                           "s1.after_optimizer"}));
}

TEST(StepHooks, WholeModuleStateDictReturnsCopies) {
  auto linear = std::make_shared<torch::nn::LinearImpl>(3, 2);
  titan::parallel::WholeModuleStateDict sd(linear);
  auto full = sd.gather();
  ASSERT_EQ(full.size(), 2u);
  EXPECT_TRUE(torch::equal(full.at("weight"), linear->weight));
  full.at("weight").add_(1.0);  // a copy: the module keeps its values
  EXPECT_FALSE(torch::equal(full.at("weight"), linear->weight));
  EXPECT_FALSE(full.at("weight").requires_grad());
}
