#pragma once
/// @file
/// @brief FSDP's part of the train step (parallel/step_hooks.hpp) and its
/// full state dict.

#include <memory>

#include "titan/parallel/step_hooks.hpp"

namespace titan::fsdp {

/// @brief How FSDP meets a step's micro-batches.
///
/// With `reduce_once_per_step` (pipeline parallelism: torch's pipelining
/// drives FSDP2 this way) every micro-batch's backward but the last keeps
/// its gradients unsharded and summed (set_requires_gradient_sync(false)),
/// and the last one reduce-scatters the sum: one reduce-scatter per unit
/// and step. Without it (plain gradient accumulation, as torchtitan's
/// train step) each backward reduce-scatters its own gradients, which
/// never holds a full copy of the model's gradients; the hooks then do
/// nothing, and the reduce-scatters are waited by FSDP's own
/// end-of-backward callback.
class FsdpStepHooks : public parallel::TrainStepHooks {
 public:
  /// `root` is the module fully_shard was last applied to (the model).
  FsdpStepHooks(std::shared_ptr<torch::nn::Module> root, bool reduce_once_per_step);
  std::string name() const override { return "FSDP"; }
  void before_micro_batch_backward(bool last) override;

 private:
  std::shared_ptr<torch::nn::Module> root_;
  bool reduce_once_per_step_;
};

/// @brief The full weights of a fully_shard-ed module, all-gathered one
/// parameter at a time (fsdp::full_state_dict).
class FsdpStateDict : public parallel::FullStateDict {
 public:
  explicit FsdpStateDict(std::shared_ptr<torch::nn::Module> root);
  std::map<std::string, at::Tensor> gather() override;

 private:
  std::shared_ptr<torch::nn::Module> root_;
};

}  // namespace titan::fsdp
