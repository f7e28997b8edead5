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

/// @brief A Module whose forward runs registered ForwardHooks around it.
class HookableModule : public torch::nn::Module {
 public:
  /// Appends `hook`: pre hooks run in registration order, post hooks too.
  void add_forward_hook(std::shared_ptr<ForwardHook> hook);
  /// The hooks registered so far (FSDP finds its state here).
  const std::vector<std::shared_ptr<ForwardHook>>& forward_hooks() const { return hooks_; }

 protected:
  /// Runs every pre hook on `input`, then `body`, then every post hook on
  /// its result. Subclasses implement forward() as a call to this.
  at::Tensor call_with_hooks(const at::Tensor& input,
                             const std::function<at::Tensor(const at::Tensor&)>& body);

 private:
  std::vector<std::shared_ptr<ForwardHook>> hooks_;
};

}  // namespace titan::ops
