#pragma once
/// @file
/// @brief The forward hooks behind the tensor-parallel styles (internal to
/// lib/titan/parallel/tensor_parallel: styles.cpp attaches them, async_tp.cpp
/// switches them to the overlapped algorithms). What each moves is in
/// style_hooks.cpp; the styles' layout table is in styles.hpp.
///
/// A hook keeps per-call state between its pre_forward and post_forward
/// (the embedding's id mask, the sequence-parallel weight it swapped in,
/// whether async TP already ran the module): one forward at a time per
/// module, which titan's train step guarantees.

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>

#include "titan/ops/param_module.hpp"
#include "titan/parallel/tensor_parallel/layouts.hpp"
#include "titan/parallel/tensor_parallel/styles.hpp"

namespace titan::ops {
class LinearImpl;
}

namespace titan::tp::detail {

using MeshPtr = std::shared_ptr<const dist::DeviceMesh>;

/// The layout an input really has: its tag when a style before handed it
/// on as a DTensor, else what the plan says it is.
Placement arriving_layout(const at::Tensor& x, const Placement& declared, bool* tagged = nullptr);

/// `y` as the next module receives it: tagged with `layout` unless the
/// style hands on plain local tensors (use_local_output).
at::Tensor hand_on(at::Tensor y, const Placement& layout, bool use_local_output);

/// Colwise: compute on the whole input with this rank's output features.
class ColwiseHook : public TpHook {
 public:
  ColwiseParallel cfg;
  int64_t out_features = 0;  ///< global size of the output's last dim
  bool embedding = false;
  ops::LinearImpl* linear = nullptr;  ///< the module (Linear case)
  /// Async TP: the output the module's PrepareModuleInput already computed
  /// (fused with the all-gather); consumed by the next forward.
  at::Tensor precomputed;
  at::Tensor forward_override(const at::Tensor& x) override;
  at::Tensor pre_forward(const at::Tensor& x) override;
  at::Tensor post_forward(const at::Tensor& y) override;
};

/// Rowwise: compute on this rank's input features; the outputs add up.
class RowwiseHook : public TpHook {
 public:
  RowwiseParallel cfg;
  bool embedding = false;
  ops::LinearImpl* linear = nullptr;  ///< the module (Linear case)
  /// Async TP: forward_override runs the overlapped matmul → reduce-scatter
  /// (set by enable_async_tp); post_forward then has nothing left to move.
  std::function<at::Tensor(const at::Tensor&)> fused;
  int64_t vocab_offset = 0, vocab_local = 0;  ///< embedding: this rank's rows
  at::Tensor forward_override(const at::Tensor& x) override;
  at::Tensor pre_forward(const at::Tensor& x) override;
  at::Tensor post_forward(const at::Tensor& y) override;

 private:
  bool overridden_ = false;  ///< this call ran `fused`
  at::Tensor mask_;          ///< embedding: which ids this rank's rows hold (pre → post)
};

/// SequenceParallel: the norm sees this rank's tokens; its weight's
/// gradient from those tokens is a share of the whole, summed over TP.
class SequenceParallelHook : public TpHook {
 public:
  SequenceParallel cfg;
  ops::ParamModule* owner = nullptr;
  at::Tensor pre_forward(const at::Tensor& x) override;
  at::Tensor post_forward(const at::Tensor& y) override;

 private:
  at::Tensor saved_;  ///< the weight registered outside forward (a full FSDP param, or the leaf)
};

/// PrepareModuleInput: the module's input moved to the layout its body wants.
class PrepareInputHook : public TpHook {
 public:
  PrepareModuleInput cfg;
  /// Async TP: replaces the all-gather by the fused all-gather → matmuls of
  /// the consumers (set by enable_async_tp); returns what the module's body
  /// should see (the gathered input, Replicate).
  std::function<at::Tensor(const at::Tensor&)> fused;
  at::Tensor pre_forward(const at::Tensor& x) override;
};

/// PrepareModuleOutput: the module's output moved to the layout its consumers want.
class PrepareOutputHook : public TpHook {
 public:
  PrepareModuleOutput cfg;
  at::Tensor post_forward(const at::Tensor& y) override;
};

}  // namespace titan::tp::detail
