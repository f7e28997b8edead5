#pragma once
/// @file
/// @brief Gradient clipping by global norm that stays right when gradients
/// are sharded over ranks (FSDP, TP): each rank reduces its local shards to
/// one partial (Σ|g|^p, or max|g| for the inf norm), the partials are
/// all-reduced over the shard group(s), and only then is the root taken.

#include <ATen/core/Tensor.h>

#include <limits>
#include <vector>

namespace titan::dist {
class ProcessGroup;
}

namespace titan::optim {

/// The inf norm's norm_type, spelled as in torch (float('inf')).
constexpr double kInfNorm = std::numeric_limits<double>::infinity();

/// @brief This rank's share of the global gradient norm of `params`: a
/// float64 scalar holding Σ_i ‖g_i‖_p^p over the local gradients (or
/// max_i ‖g_i‖_∞ when norm_type is inf). Parameters without a gradient are
/// skipped; no gradient at all gives 0. Per-tensor norms are taken in fp32
/// (bf16 gradients included) and combined in fp64.
///
/// Summing these partials over ranks that hold disjoint shards gives the
/// partial of the full gradient, which is why the root comes last. A
/// parameter replicated over a group (a TP norm weight) must count once:
/// leave it out of the partial on all but one rank of that group.
at::Tensor grad_norm_partial(const std::vector<at::Tensor>& params, double norm_type = 2.0);

/// @brief The global gradient norm: grad_norm_partial, all-reduced (Sum, or
/// Max for inf) over each group in `groups` in turn, then the p-th root.
/// Every member of every group must call it (it is a collective).
double total_grad_norm(const std::vector<at::Tensor>& params, double norm_type,
                       const std::vector<const dist::ProcessGroup*>& groups);

/// @brief total_grad_norm as a float64 0-dim tensor left where the
/// gradients are: no host-device sync (the trainer brings it to the host
/// together with the loss, in the step's one copy). Same value, bit for bit,
/// for norm_type 2 and inf.
at::Tensor total_grad_norm_tensor(const std::vector<at::Tensor>& params, double norm_type,
                                  const std::vector<const dist::ProcessGroup*>& groups);
/// @brief The global norm from this rank's partial (grad_norm_partial, or
/// a sum of them over disjoint sets of parameters): all-reduced over each of
/// `groups` as total_grad_norm_tensor does, then the p-th root. Collective.
at::Tensor total_grad_norm_from_partial(const at::Tensor& partial, double norm_type,
                                        const std::vector<const dist::ProcessGroup*>& groups);
/// @brief scale_grads with the norm as a 0-dim tensor (total_grad_norm_tensor):
/// the coefficient is computed and applied on the device, in the same
/// float32 arithmetic, so the gradients come out as the double overload's
/// (bit for bit for fp32 gradients); NaN/inf norms leave them untouched.
void scale_grads(const std::vector<at::Tensor>& params, double max_norm, const at::Tensor& total_norm);
/// @brief Scales every gradient by min(1, max_norm / (total_norm + 1e-6)),
/// torch.nn.utils.clip_grads_with_norm_'s rule. Does nothing when
/// total_norm is NaN or inf (the trainer decides whether to skip the step or
/// stop) — unlike torch, which would fill the gradients with NaN or zeros.
void scale_grads(const std::vector<at::Tensor>& params, double max_norm, double total_norm);

/// @brief Clips the gradients of `params` to global norm `max_norm` and
/// returns the total norm before clipping (NaN/inf returned as is, gradients
/// left untouched). With `group`, `params` hold this rank's shards and the
/// norm is that of the full, unsharded gradient. Matches
/// torch::nn::utils::clip_grad_norm_ for finite norms on one process.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm,
                      double norm_type = 2.0, const dist::ProcessGroup* group = nullptr);

/// @brief clip_grad_norm over several shard groups (e.g. FSDP's and TP's
/// when a gradient is sharded over both mesh dimensions).
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type,
                      const std::vector<const dist::ProcessGroup*>& groups);

}  // namespace titan::optim
