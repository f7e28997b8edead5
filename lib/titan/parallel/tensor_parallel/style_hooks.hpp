#pragma once
/// @file
/// @brief The forward hooks behind the tensor-parallel styles (internal to
/// lib/titan/parallel/tensor_parallel: styles.cpp attaches them, async_tp.cpp
/// switches them to the overlapped algorithms).

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "titan/ops/param_module.hpp"
#include "titan/parallel/tensor_parallel/layouts.hpp"
#include "titan/parallel/tensor_parallel/styles.hpp"

namespace titan::ops {
class LinearImpl;
}

namespace titan::tp::detail {

using MeshPtr = std::shared_ptr<const dist::DeviceMesh>;

// The layout an input really has: its tag when a style before handed it on
// as a DTensor, else what the plan says it is.
inline Placement arriving_layout(const at::Tensor& x, const Placement& declared, bool* tagged = nullptr) {
  auto t = tagged_layout(x);
  if (tagged) *tagged = t.has_value();
  return t ? *t : declared;
}

inline at::Tensor hand_on(at::Tensor y, const Placement& layout, bool use_local_output) {
  if (!use_local_output) tag_layout(y, normalized(layout, y.dim()));
  return y;
}

// Colwise: compute on the whole input with this rank's output features.
class ColwiseHook : public TpHook {
 public:
  ColwiseParallel cfg;
  int64_t out_features = 0;  // global size of the output's last dim
  bool embedding = false;
  ops::LinearImpl* linear = nullptr;  // the module (Linear case)
  /// Async TP: the output the module's PrepareModuleInput already computed
  /// (fused with the all-gather); consumed by the next forward.
  at::Tensor precomputed;
  at::Tensor forward_override(const at::Tensor& x) override {
    (void)x;
    at::Tensor y = precomputed;
    precomputed = at::Tensor();
    return y;
  }
  at::Tensor pre_forward(const at::Tensor& x) override {
    if (embedding) return x;  // token ids are replicated by nature
    const Placement from = normalized(arriving_layout(x, cfg.input_layouts), x.dim());
    // A Replicate input prepared by PrepareModuleInput: it already owns the
    // reduction of the Partial gradient its sharded consumers produce. Any
    // other Replicate input (a Rowwise output handed on as a DTensor, say)
    // still needs it here.
    if (from.is_replicate() && tag_reduces_partial_gradient(x)) return x;
    return redistribute_activation(x, mesh, from, Placement::replicate(), Placement::partial());
  }
  at::Tensor post_forward(const at::Tensor& y) override {
    std::vector<int64_t> global = y.sizes().vec();
    global.back() = out_features;
    at::Tensor out = redistribute_activation(y, mesh, Placement::shard(-1), cfg.output_layouts, std::nullopt, global);
    return hand_on(out, cfg.output_layouts, cfg.use_local_output);
  }
};

// Rowwise: compute on this rank's input features; the outputs add up.
class RowwiseHook : public TpHook {
 public:
  RowwiseParallel cfg;
  bool embedding = false;
  ops::LinearImpl* linear = nullptr;  // the module (Linear case)
  /// Async TP: forward_override runs the overlapped matmul → reduce-scatter
  /// (set by enable_async_tp); post_forward then has nothing left to move.
  std::function<at::Tensor(const at::Tensor&)> fused;
  bool overridden = false;
  at::Tensor forward_override(const at::Tensor& x) override {
    if (!fused) return {};
    overridden = true;
    return fused(x);
  }
  int64_t vocab_offset = 0, vocab_local = 0;
  at::Tensor mask;  // embedding: which ids this rank's rows hold (set by pre, used by post)
  at::Tensor pre_forward(const at::Tensor& x) override {
    if (embedding) {
      // Ids outside this rank's rows look up row 0 and are zeroed after.
      mask = (x >= vocab_offset) & (x < vocab_offset + vocab_local);
      return (x - vocab_offset).masked_fill(~mask, 0);
    }
    const Placement from = normalized(arriving_layout(x, cfg.input_layouts), x.dim());
    return redistribute_activation(x, mesh, from, Placement::shard(-1));
  }
  at::Tensor post_forward(const at::Tensor& y) override {
    if (overridden) {
      overridden = false;
      return hand_on(y, cfg.output_layouts, cfg.use_local_output);
    }
    at::Tensor partial = y;
    if (embedding) {
      partial = y * mask.unsqueeze(-1).to(y.scalar_type());
      mask = at::Tensor();
    }
    at::Tensor out = redistribute_activation(partial, mesh, Placement::partial(), cfg.output_layouts);
    return hand_on(out, cfg.output_layouts, cfg.use_local_output);
  }
};

// SequenceParallel: the norm sees this rank's tokens; its weight's gradient
// from those tokens is a share of the whole, summed over TP.
class SequenceParallelHook : public TpHook {
 public:
  SequenceParallel cfg;
  ops::ParamModule* owner = nullptr;
  at::Tensor saved;  // the weight registered outside forward (a full FSDP param, or the leaf)
  at::Tensor pre_forward(const at::Tensor& x) override {
    const Placement from = normalized(arriving_layout(x, Placement::shard(cfg.sequence_dim)), x.dim());
    at::Tensor in = redistribute_activation(x, mesh, from, Placement::shard(cfg.sequence_dim));
    saved = owner->named_parameters(false)["weight"];
    if (saved.requires_grad() && at::GradMode::is_enabled())
      owner->replace_parameter("weight", redistribute_activation(saved, mesh, Placement::replicate(),
                                                                 Placement::replicate(), Placement::partial()));
    return in;
  }
  at::Tensor post_forward(const at::Tensor& y) override {
    owner->replace_parameter("weight", saved);
    saved = at::Tensor();
    return hand_on(y, Placement::shard(cfg.sequence_dim), cfg.use_local_output);
  }
};

class PrepareInputHook : public TpHook {
 public:
  PrepareModuleInput cfg;
  /// Async TP: replaces the all-gather by the fused all-gather → matmuls of
  /// the consumers (set by enable_async_tp); returns what the module's body
  /// should see (the gathered input, Replicate).
  std::function<at::Tensor(const at::Tensor&)> fused;
  at::Tensor pre_forward(const at::Tensor& x) override {
    if (fused) {
      at::Tensor gathered = fused(x);
      tag_layout(gathered, Placement::replicate(), /*reduces_partial_gradient=*/true);
      return gathered;
    }
    const Placement from = normalized(arriving_layout(x, cfg.input_layouts), x.dim());
    const Placement to = normalized(cfg.desired_input_layouts, x.dim());
    std::optional<Placement> grad;
    if (!cfg.use_local_output && to.is_replicate()) grad = Placement::partial();
    at::Tensor out = redistribute_activation(x, mesh, from, to, grad);
    // Even a pass-through must be a tensor of its own to carry the tag
    // without tagging the caller's tensor.
    if (!cfg.use_local_output && out.unsafeGetTensorImpl() == x.unsafeGetTensorImpl()) out = x.alias();
    if (!cfg.use_local_output) tag_layout(out, to, /*reduces_partial_gradient=*/grad.has_value());
    return out;
  }
};

class PrepareOutputHook : public TpHook {
 public:
  PrepareModuleOutput cfg;
  at::Tensor post_forward(const at::Tensor& y) override {
    const Placement from = normalized(arriving_layout(y, cfg.output_layouts), y.dim());
    at::Tensor out = redistribute_activation(y, mesh, from, cfg.desired_output_layouts);
    return hand_on(out, cfg.desired_output_layouts, cfg.use_local_output);
  }
};


}  // namespace titan::tp::detail
