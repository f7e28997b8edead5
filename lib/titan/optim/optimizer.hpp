#pragma once
/// @file
/// @brief The optimizer builder: AdamW (or Adam) with torchtitan's defaults,
/// on LibTorch's own torch::optim implementations.

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

namespace titan::optim {

/// @brief What `[optimizer]` configures. Defaults are torchtitan's
/// (torchtitan/config/job_config.py, class Optimizer): lr 8e-4, betas
/// (0.9, 0.95), eps 1e-8, weight decay 0.1.
struct OptimizerOptions {
  /// "AdamW" (decoupled weight decay) or "Adam" (L2 penalty added to the
  /// gradient), spelled as in torchtitan; the match ignores case.
  std::string name = "AdamW";
  /// Peak learning rate; the LR schedule scales it each step.
  double lr = 8e-4;
  /// Decay rate of the first-moment (mean) estimate.
  double beta1 = 0.9;
  /// Decay rate of the second-moment estimate; 0.95 (not torch's 0.999)
  /// reacts faster to loss spikes, as in Llama and most LLM recipes.
  double beta2 = 0.95;
  /// Added to sqrt(v̂) so that the update stays finite where v̂ ≈ 0.
  double eps = 1e-8;
  /// Applied to every parameter (norm weights and embeddings included), as
  /// torchtitan does: it builds one param group from model.parameters().
  double weight_decay = 0.1;
  /// AdamW only: run the update through ATen's fused kernel (FusedAdamW,
  /// torchtitan's default implementation) instead of the for-loop of
  /// elementwise ops. Same arithmetic up to fp32 rounding order.
  bool fused = false;
};

/// @brief The canonical spelling ("AdamW" or "Adam") of an optimizer name,
/// matched case-insensitively; throws titan::Error naming the supported ones.
std::string canonical_optimizer_name(const std::string& name);

/// @brief Builds the optimizer over `params` (one param group, so one LR
/// schedule and one weight decay apply to all, as in torchtitan).
///
/// AdamW: p ← p·(1 − lr·wd), then the Adam update; Adam: g ← g + wd·p, then
/// the Adam update (PyTorch's torch.optim.Adam/AdamW semantics, which
/// LibTorch's torch::optim::Adam/AdamW implement). Bad names or values
/// (lr < 0, betas outside [0, 1), eps < 0, wd < 0) throw titan::Error.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(std::vector<at::Tensor> params,
                                                         const OptimizerOptions& options);

/// @brief Current learning rate of every param group of `optimizer`.
std::vector<double> learning_rates(const torch::optim::Optimizer& optimizer);

}  // namespace titan::optim
