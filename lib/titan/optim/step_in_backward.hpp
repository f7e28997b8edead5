#pragma once
/// @file
/// @brief The optimizer step inside backward (torchtitan's `[optimizer]
/// early_step_in_backward`): each parameter is updated as soon as its
/// gradient for the step is final, and its gradient freed at once, so a
/// step never holds the gradients of the whole model (or of this rank's
/// shards) at the same time.
///
/// "Final" is what torch's post-accumulate-grad hook says: autograd's
/// AccumulateGrad calls it after adding a backward's gradient into `.grad`
/// (one call per parameter per backward, however many paths led there; TP's
/// all-reduce of a replicated weight's gradient runs before it, inside the
/// graph), and FSDP calls it on a shard after the reduce-scatter (and HSDP's
/// all-reduce) wrote the shard's gradient, as torch's FSDP2 does. Layouts
/// that reduce a gradient after the hook (DDP's bucket all-reduce, the
/// pipeline's split backward) cannot step early; the trainer refuses them.
///
/// Only the step's last micro-batch steps: the earlier ones accumulate
/// gradients as usual (arm(false)); torchtitan's container stepped on every
/// backward, so gradient accumulation took one optimizer step per
/// micro-batch there. A parameter the last micro-batch gives no gradient
/// (unused there) keeps what it accumulated and is stepped by the ordinary
/// optimizer.step() after backward, in the same update.
///
/// The update of each parameter is the optimizer's own (the same kernel on
/// the same values, the same state), so a run with the early step trains
/// bit for bit like one without — unless gradients are clipped: the norm of
/// all the gradients is known only after the last one is applied, so no
/// clipping happens (torchtitan's neither: its clip sees no gradients
/// left). The norm is still measured, parameter by parameter as they pass.

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

namespace titan::dist {
class ProcessGroup;
}

namespace titan::optim {

/// @brief Hooks `optimizer`'s parameters so that each steps when its
/// gradient is final in an armed backward (the class comment says when).
/// Removes its hooks when destroyed. Not copyable.
class StepInBackward {
 public:
  /// `params`: the parameters to step early (those of `optimizer`, which
  /// must outlive this object). `norm_params`: the ones the gradient norm
  /// counts on this rank (a TP-replicated weight on one rank of its group
  /// only, as clip_gradients' norm_params); empty = all of `params`.
  StepInBackward(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                 const std::vector<at::Tensor>& norm_params);
  ~StepInBackward();
  StepInBackward(const StepInBackward&) = delete;
  StepInBackward& operator=(const StepInBackward&) = delete;

  /// Before each micro-batch's backward: `last` arms the early step (the
  /// step's gradients are final in this backward); otherwise gradients
  /// accumulate as without it. A new step starts with the first call after
  /// finish().
  void arm(bool last);

  /// After the last backward, before optimizer.step() (which updates the
  /// parameters the hooks did not take, with the gradients they kept):
  /// disarms and returns the global 2-norm of the step's gradients as a
  /// float64 0-dim tensor on the gradients' device, from the partials of
  /// every parameter stepped early and of those left, all-reduced over
  /// `groups` (the shard groups, as total_grad_norm_tensor). Collective
  /// over `groups`.
  at::Tensor finish(const std::vector<const dist::ProcessGroup*>& groups);

  /// Parameters stepped inside backward in the current (or last) step.
  int64_t stepped_in_backward() const;

  struct State;  ///< shared with the hooks

 private:
  std::shared_ptr<State> state_;
  std::vector<at::Tensor> params_;
};

/// @brief One optimizer update of `param` alone (a parameter of
/// `optimizer`): the optimizer's own step() over a view of its groups that
/// holds just this parameter, so the arithmetic and the state are those of
/// a full step. Any other parameter's gradient is left untouched.
void step_one_parameter(torch::optim::Optimizer& optimizer, const at::Tensor& param);

}  // namespace titan::optim
