#pragma once
/// @file
/// @brief Activation checkpointing: run a module's forward without keeping
/// its intermediate activations and recompute them inside backward — the
/// C++ counterpart of torch.utils.checkpoint (LibTorch has none) and of
/// torchtitan's apply_ac modes.
///
/// What is kept per checkpointed block: its input (one [batch, seq, dim]
/// tensor) and the RNG state. What backward does: run the block's forward
/// again with gradients on (its FSDP all-gather and TP collectives run
/// again too, and are counted again in the CommLog), then its backward
/// from the gradient that reached the block's output. Cost: one more
/// forward per checkpointed block, i.e. about a third more compute for
/// full AC (backward ≈ 2 forwards).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "titan/ops/forward_hooks.hpp"

namespace titan::ac {

/// @brief fn(input) whose intermediates are not kept: run under no-grad
/// now, and again (with the RNG state of now) when the result's gradient
/// arrives, then backpropagated through. Gradients reach `input` and every
/// parameter fn uses, as without checkpointing. Without grad mode it is
/// just fn(input). `fn` must stay valid until backward.
at::Tensor checkpoint(std::function<at::Tensor(const at::Tensor&)> fn, const at::Tensor& input);

/// @brief Makes `module`'s whole forward (its hooks included, so FSDP
/// gathers the weights again for the recompute) checkpointed.
void checkpoint_module(ops::HookableModule& module);

/// @brief Per-op selective checkpointing of `module` (torchtitan's
/// selective_ac_option = "op"): like checkpoint_module, but the outputs of
/// its matmuls — every ops::Linear inside it (a block's wq, wk, wv, wo, w1,
/// w2, w3) — are kept from the forward and reused by the recompute, which
/// then redoes only the cheap parts: norms, RoPE, attention's softmax
/// product, SiLU and the products and sums around them. (torchtitan's op
/// policy also keeps the attention kernel's outputs and recomputes every
/// other matmul; titan keeps all matmuls and recomputes attention, whose
/// backward inputs are device-specific kernels' internals.) A float8
/// Linear's output is kept the same way (float8's hook recomputes only its
/// casts of x and W, which its backward needs: torchtitan's policy keeps
/// `_scaled_mm`'s output too). Under async TP the rings' outputs are kept:
/// an all-gather → matmul site reads its Linears' kept outputs ahead
/// (kept_matmul_output) and its recompute only gathers; a matmul →
/// reduce-scatter Linear hands its kept, reduce-scattered output back with
/// the ring's backward.
///
/// `force_recompute_fqns` is torchtitan's
/// per_op_sac_force_recompute_mm_shapes_by_fqns: every Linear under
/// `module` whose name (`base_fqn` + "." + its name in module, e.g.
/// "layers.0.feed_forward.w1") contains one of these strings gives its
/// weight shape, and every matmul of the module with a weight of such a
/// shape is recomputed rather than kept (matched by shape, as torchtitan's
/// policy does: layers of equal shape go too; under TP the local shapes).
/// A name that matches a module other than a Linear is a one-line error.
void checkpoint_module_selective_op(ops::HookableModule& module,
                                    const std::vector<std::string>& force_recompute_fqns = {},
                                    const std::string& base_fqn = "");

/// @brief An output kept by per-op activation checkpointing, and the hook
/// that computed it in the first pass (null: the Linear's own matmul).
struct KeptMatmulOutput {
  at::Tensor output;
  const ops::ForwardHook* computed_by = nullptr;
};

/// @brief Inside the recompute of a per-op checkpointed module: what the
/// `ahead`-th next Linear call will be handed (0: the next one); nullopt
/// elsewhere, or past the kept outputs. For a hook that computes several
/// Linears' outputs before they run (async TP's all-gather → matmul site),
/// which must check `computed_by` to know the entries are its Linears'.
std::optional<KeptMatmulOutput> kept_matmul_output(size_t ahead);

/// @brief [activation_checkpoint] mode, with selective_ac_option folded in.
enum class AcMode {
  None,            ///< mode = "none": every block keeps what autograd saves
  Full,            ///< mode = "full": every block recomputed in backward
  SelectiveEveryN, ///< mode = "selective", option N: every N-th block recomputed
  SelectivePerOp,  ///< mode = "selective", option "op": every block, matmul outputs kept
};

/// @brief What activation checkpointing a job asks for, read from the
/// config once: everything that decides which blocks are wrapped, how, and
/// what a recompute costs (the trainer, the estimate and the communication
/// count all take it from here).
struct AcPolicy {
  AcMode mode = AcMode::None;
  int64_t every = 0;  ///< SelectiveEveryN: N

  /// @brief Reads [activation_checkpoint] mode and selective_ac_option.
  /// Throws a one-line titan::Error for another mode, or a selective option
  /// that is neither an integer > 0 nor "op".
  static AcPolicy from_config(const std::string& mode, const std::string& selective_ac_option);

  /// @brief Per-op SAC: checkpointed blocks keep their matmul outputs, so a
  /// recompute runs everything but the block's GEMMs.
  bool per_op() const { return mode == AcMode::SelectivePerOp; }

  /// @brief Which of `n_blocks` blocks torchtitan's apply_ac wraps: none,
  /// all (full, per op), or every N-th (the N-th, 2N-th, ... counted from
  /// 1, as torchtitan's ac_freq).
  std::vector<bool> blocks(int64_t n_blocks) const;

  /// @brief "full AC (6 of 6 blocks)" / "selective AC every 2 block(s) (3 of 6 blocks)" / "".
  std::string describe(int64_t wrapped, int64_t n_blocks) const;

  /// @brief The config's words: "none", "full", "selective (op)", "selective (2)".
  std::string config_words() const;
};

}  // namespace titan::ac
