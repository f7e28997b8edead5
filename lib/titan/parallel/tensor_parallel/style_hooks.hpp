#pragma once
/// @file
/// @brief The forward hooks behind the tensor-parallel styles (internal to
/// lib/titan/parallel/tensor_parallel: styles.cpp attaches them). What each
/// moves is in style_hooks.cpp; the styles' layout table is in styles.hpp.
///
/// Like torch's styles they are stateless: what a hook sets when the style
/// is applied (its layouts, its module, the embedding's rows) does not
/// change, and what one call's post_forward needs from its pre_forward (the
/// embedding's id mask, the weight sequence parallelism swapped out) goes
/// through that call's ops::HookCall. Async TP's overlapped versions are
/// types of their own (async_tp_hooks.cpp), which enable_async_tp puts in these
/// hooks' places.

#include <ATen/ATen.h>

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
  at::Tensor pre_forward(const at::Tensor& x) override;
  at::Tensor post_forward(const at::Tensor& y) override;
};

/// Rowwise: compute on this rank's input features; the outputs add up.
class RowwiseHook : public TpHook {
 public:
  RowwiseParallel cfg;
  bool embedding = false;
  ops::LinearImpl* linear = nullptr;  ///< the module (Linear case)
  int64_t vocab_offset = 0, vocab_local = 0;  ///< embedding: this rank's rows
  /// Embedding: ids outside this rank's rows look up row 0; the mask of
  /// those that are inside goes to post_forward in `call.saved`.
  at::Tensor pre_forward(const at::Tensor& x, ops::HookCall& call) override;
  at::Tensor post_forward(const at::Tensor& y, ops::HookCall& call) override;
};

/// SequenceParallel: the norm sees this rank's tokens; its weight's
/// gradient from those tokens is a share of the whole, summed over TP.
class SequenceParallelHook : public TpHook {
 public:
  SequenceParallel cfg;
  ops::ParamModule* owner = nullptr;
  /// Swaps the registered weight (a full FSDP parameter, or the leaf) for
  /// a view whose gradient is all-reduced; the weight goes to post_forward
  /// in `call.saved`, which puts it back.
  at::Tensor pre_forward(const at::Tensor& x, ops::HookCall& call) override;
  at::Tensor post_forward(const at::Tensor& y, ops::HookCall& call) override;
};

/// PrepareModuleInput: the module's input moved to the layout its body wants.
class PrepareInputHook : public TpHook {
 public:
  PrepareModuleInput cfg;
  at::Tensor pre_forward(const at::Tensor& x) override;
};

/// PrepareModuleOutput: the module's output moved to the layout its consumers want.
class PrepareOutputHook : public TpHook {
 public:
  PrepareModuleOutput cfg;
  at::Tensor post_forward(const at::Tensor& y) override;
};

}  // namespace titan::tp::detail
