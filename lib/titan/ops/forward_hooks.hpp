#pragma once
/// @file
/// @brief Forward pre/post hooks for titan's model modules, the C++ stand-in
/// for Python's `register_forward_pre_hook` / `register_forward_hook`.
///
/// LibTorch's Module has no hooks: forward() is an ordinary member function
/// that nobody can intercept from outside. Techniques that must act around a
/// module's forward — FSDP gathers a unit's parameters before it and frees
/// them after it — therefore need the model's cooperation. Modules that want
/// to be wrappable derive from HookableModule and run their body through
/// call_with_hooks(); everything else about them stays a plain Module
/// (parameter names, state dicts and optimizers are unaffected).

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <vector>

namespace titan::ops {

/// @brief What one forward call hands from a hook's pre_forward to its
/// post_forward. A Python hook keeps such things in a closure or on the
/// tensor (DTensor's MaskPartial carries the embedding's id mask); here the
/// module keeps one HookCall per hook on its stack for the length of the
/// call, so that the hook object itself holds no per-call state and a
/// recompute inside backward (activation checkpointing) gets its own.
struct HookCall {
  at::Tensor saved;            ///< what post_forward needs from pre_forward (a mask, a weight swapped out)
  bool replaced_body = false;  ///< this hook's forward_override ran instead of the module's body
};

/// @brief Code that runs around one module's forward; each method may
/// replace the tensor it gets (e.g. cast it, or wrap it in an autograd node).
///
/// A hook overrides the one-argument methods; a hook whose post_forward
/// needs something its pre_forward computed overrides the versions that
/// take the call's HookCall instead (the module calls those; by default
/// they call the one-argument ones).
class ForwardHook {
 public:
  virtual ~ForwardHook() = default;
  /// Runs before the module's forward with its (first) input; returns the input to use.
  virtual at::Tensor pre_forward(const at::Tensor& input) { return input; }
  /// Runs after the module's forward with its output; returns the output to hand back.
  virtual at::Tensor post_forward(const at::Tensor& output) { return output; }
  /// Runs between pre_forward and the body: a defined result *replaces*
  /// the module's own computation (float8 swaps the matmul for a scaled
  /// one; async TP a matmul and its collective for one overlapped ring,
  /// what torch's compiler pass does to the graph). The first hook that
  /// returns a defined tensor wins. Undefined (the default) runs the body.
  virtual at::Tensor forward_override(const at::Tensor& input) {
    (void)input;
    return {};
  }

  /// For per-op activation checkpointing's recompute: the op of
  /// forward_override with its output `kept` from the first pass — returns
  /// `kept` with the op's backward attached, computing nothing forward.
  /// Undefined (the default): the hook has no such op (or cannot reuse it).
  virtual at::Tensor reuse_output(const at::Tensor& input, const at::Tensor& kept) {
    (void)input;
    (void)kept;
    return {};
  }

  /// @name The same three with this call's HookCall
  /// @{
  virtual at::Tensor pre_forward(const at::Tensor& input, HookCall& call) {
    (void)call;
    return pre_forward(input);
  }
  virtual at::Tensor forward_override(const at::Tensor& input, HookCall& call) {
    (void)call;
    return forward_override(input);
  }
  virtual at::Tensor post_forward(const at::Tensor& output, HookCall& call) {
    (void)call;
    return post_forward(output);
  }
  /// @}
};

/// @brief Runs a module's whole forward (hooks included) given as `run`,
/// e.g. without keeping its intermediates (activation checkpointing). It
/// may call `run` again later, inside backward: `run` owns what it needs.
using ForwardWrapper =
    std::function<at::Tensor(const at::Tensor& input, std::function<at::Tensor(const at::Tensor&)> run)>;

/// @brief True while a wrapped forward runs again inside backward (the
/// recompute of activation checkpointing), on this thread. FSDP keeps the
/// gathered weights then, since the block's backward follows at once.
bool in_recompute();

/// @brief Marks the current thread as recomputing while it lives.
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool previous_;
};

/// @brief True while a wrapped forward runs the first time without keeping
/// its intermediates (activation checkpointing's no-grad pass), on this
/// thread: backward will run it again (in_recompute()). FSDP gathers such a
/// unit's weights ahead of its recompute.
bool in_checkpointed_forward();

/// @brief Marks the current thread as running a checkpointed forward's
/// first pass while it lives.
class CheckpointedForwardScope {
 public:
  CheckpointedForwardScope();
  ~CheckpointedForwardScope();
  CheckpointedForwardScope(const CheckpointedForwardScope&) = delete;
  CheckpointedForwardScope& operator=(const CheckpointedForwardScope&) = delete;

 private:
  bool previous_;
};

/// @brief A Module whose forward runs registered ForwardHooks around it.
class HookableModule : public torch::nn::Module {
 public:
  /// Appends `hook`: pre hooks run in registration order, post hooks too.
  void add_forward_hook(std::shared_ptr<ForwardHook> hook);
  /// Puts `hook` before the others: its forward_override is asked first
  /// (per-op activation checkpointing's cache, which hands a kept output
  /// back before float8's hook would compute it again).
  void add_forward_hook_first(std::shared_ptr<ForwardHook> hook);
  /// Puts `hook` where `old_hook` was (same place in the order), e.g. a
  /// style's hook switched to its async-TP version. Throws titan::Error
  /// when `old_hook` is not registered here.
  void replace_forward_hook(const ForwardHook* old_hook, std::shared_ptr<ForwardHook> hook);
  /// The hooks registered so far (FSDP finds its state here).
  const std::vector<std::shared_ptr<ForwardHook>>& forward_hooks() const { return hooks_; }
  /// Wraps the whole forward, hooks included — as torch's
  /// checkpoint_wrapper wraps a module that fully_shard then sees from
  /// outside. Empty (the default) = no wrapper.
  void set_forward_wrapper(ForwardWrapper wrapper) { wrapper_ = std::move(wrapper); }
  bool has_forward_wrapper() const { return static_cast<bool>(wrapper_); }

 protected:
  /// Runs every pre hook on `input`, then `body`, then every post hook on
  /// its result (all of it through the wrapper, when one is set: then
  /// `body` may run again later and must not refer to the caller's locals).
  /// Subclasses implement forward() as a call to this.
  at::Tensor call_with_hooks(const at::Tensor& input,
                             const std::function<at::Tensor(const at::Tensor&)>& body);

 private:
  at::Tensor run_hooks(const at::Tensor& input, const std::function<at::Tensor(const at::Tensor&)>& body);

  std::vector<std::shared_ptr<ForwardHook>> hooks_;
  ForwardWrapper wrapper_;
};

}  // namespace titan::ops
