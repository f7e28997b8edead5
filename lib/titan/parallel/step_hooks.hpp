#pragma once
/// @file
/// @brief The train step's contract with the parallelisms applied to a
/// model: the named moments of a step at which a technique acts
/// (TrainStepHooks), and how the full weights are gathered back from what
/// each rank holds (FullStateDict).
///
/// A step, and who acts where:
///
///     for each micro-batch:
///       forward, loss
///       before_micro_batch_backward(last)   DDP: no_sync on all but the last
///                                           FSDP under PP: sum unsharded, reduce-scatter once
///       backward
///     after_last_backward()                 DDP: wait for the buckets' all-reduces
///     clip the gradients, optimizer step
///     after_optimizer_step()                float8: the next all-gathers' scales
///
/// Each technique that needs a phase implements TrainStepHooks under its
/// own name (parallel::DdpStepHooks, fsdp::FsdpStepHooks,
/// float8::Float8StepHooks, pp::PipelineStepHooks); the model's
/// parallelize function collects them in a StepHookList, in the order it
/// applied the techniques, and the train step calls the list. Like FSDP2's
/// and DDP's own hooks, none of them changes the step's arithmetic: they
/// only decide when the gradients travel.

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace titan::parallel {

/// @brief What one parallelism does at the train step's phases. Every
/// phase defaults to nothing; a technique overrides the ones it needs.
class TrainStepHooks {
 public:
  virtual ~TrainStepHooks() = default;
  /// The technique's short name ("DDP", "FSDP", "float8", "PP").
  virtual std::string name() const = 0;
  /// Before each micro-batch's backward; `last` is true for the step's
  /// last micro-batch (the one whose backward should synchronise).
  virtual void before_micro_batch_backward(bool last) { (void)last; }
  /// After the step's last backward, before the gradients are clipped:
  /// waits for gradient communication still in flight.
  virtual void after_last_backward() {}
  /// After every optimizer step (torchtitan's post-optimizer hook).
  virtual void after_optimizer_step() {}
};

/// @brief The hooks of every parallelism applied to one model, called in
/// the order they were added (the order the techniques were applied).
class StepHookList {
 public:
  void add(std::shared_ptr<TrainStepHooks> hooks);
  /// Appends every hook of `other`, in its order.
  void add_all(const StepHookList& other);
  void before_micro_batch_backward(bool last) const;
  void after_last_backward() const;
  void after_optimizer_step() const;
  bool empty() const { return hooks_.empty(); }
  /// The hooks' names in call order, e.g. {"float8", "FSDP"}.
  std::vector<std::string> names() const;

 private:
  std::vector<std::shared_ptr<TrainStepHooks>> hooks_;
};

/// @brief Gathers the full, unsharded weights of a model from what this
/// rank holds, under the model's parameter names. Each layout that splits
/// the weights wraps the gather of the layout below it (TP's gathers
/// FSDP's output; PP's gathers its stages'), so the chain reads like the
/// order the techniques were applied in.
class FullStateDict {
 public:
  virtual ~FullStateDict() = default;
  /// Collective when the weights are split: every rank of the job calls
  /// it. Results are fresh tensors, safe to keep and modify.
  virtual std::map<std::string, at::Tensor> gather() = 0;
};

/// @brief The weights of a module that holds them whole (one rank, DDP):
/// a detached copy of each parameter.
class WholeModuleStateDict : public FullStateDict {
 public:
  /// `module` must outlive this object (the model's parallelize function
  /// keeps both with the model).
  explicit WholeModuleStateDict(std::shared_ptr<torch::nn::Module> module);
  std::map<std::string, at::Tensor> gather() override;

 private:
  std::shared_ptr<torch::nn::Module> module_;
};

}  // namespace titan::parallel
