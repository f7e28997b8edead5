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

/// @brief Code that runs around one module's forward; both methods may
/// replace the tensor they get (e.g. cast it, or wrap it in an autograd node).
class ForwardHook {
 public:
  virtual ~ForwardHook() = default;
  /// Runs before the module's forward with its (first) input; returns the input to use.
  virtual at::Tensor pre_forward(const at::Tensor& input) { return input; }
  /// Runs after the module's forward with its output; returns the output to hand back.
  virtual at::Tensor post_forward(const at::Tensor& output) { return output; }
  /// Runs between pre_forward and the body: a defined result *replaces*
  /// the module's own computation (async TP swaps a matmul and its
  /// collective for one overlapped kernel sequence, what torch's compiler
  /// pass does to the graph). Undefined (the default) runs the body.
  virtual at::Tensor forward_override(const at::Tensor& input) {
    (void)input;
    return {};
  }
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

/// @brief A Module whose forward runs registered ForwardHooks around it.
class HookableModule : public torch::nn::Module {
 public:
  /// Appends `hook`: pre hooks run in registration order, post hooks too.
  void add_forward_hook(std::shared_ptr<ForwardHook> hook);
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
