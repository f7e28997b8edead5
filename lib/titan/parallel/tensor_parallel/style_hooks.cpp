// What each tensor-parallel style's hook moves before and after its
// module's forward (the table in styles.hpp), and the one gradient fact a
// plain tensor cannot carry: a Replicate activation that sharded weights
// consume gets a Partial gradient, all-reduced on the way back.
#include "titan/parallel/tensor_parallel/style_hooks.hpp"

namespace titan::tp::detail {

Placement arriving_layout(const at::Tensor& x, const Placement& declared, bool* tagged) {
  auto t = tagged_layout(x);
  if (tagged) *tagged = t.has_value();
  return t ? *t : declared;
}

at::Tensor hand_on(at::Tensor y, const Placement& layout, bool use_local_output) {
  if (!use_local_output) tag_layout(y, normalized(layout, y.dim()));
  return y;
}

// ------------------------------------------------------------------ Colwise

at::Tensor ColwiseHook::pre_forward(const at::Tensor& x) {
  if (embedding) return x;  // token ids are replicated by nature
  const Placement from = normalized(arriving_layout(x, cfg.input_layouts), x.dim());
  // A Replicate input prepared by PrepareModuleInput: it already owns the
  // reduction of the Partial gradient its sharded consumers produce. Any
  // other Replicate input (a Rowwise output handed on as a DTensor, say)
  // still needs it here.
  if (from.is_replicate() && tag_reduces_partial_gradient(x)) return x;
  return redistribute_activation(x, mesh, from, Placement::replicate(), Placement::partial());
}

at::Tensor ColwiseHook::post_forward(const at::Tensor& y) {
  std::vector<int64_t> global = y.sizes().vec();
  global.back() = out_features;
  at::Tensor out = redistribute_activation(y, mesh, Placement::shard(-1), cfg.output_layouts, std::nullopt, global);
  return hand_on(out, cfg.output_layouts, cfg.use_local_output);
}

// ------------------------------------------------------------------ Rowwise

at::Tensor RowwiseHook::pre_forward(const at::Tensor& x, ops::HookCall& call) {
  if (embedding) {
    // Ids outside this rank's rows look up row 0 and are zeroed after.
    call.saved = (x >= vocab_offset) & (x < vocab_offset + vocab_local);
    return (x - vocab_offset).masked_fill(~call.saved, 0);
  }
  const Placement from = normalized(arriving_layout(x, cfg.input_layouts), x.dim());
  return redistribute_activation(x, mesh, from, Placement::shard(-1));
}

at::Tensor RowwiseHook::post_forward(const at::Tensor& y, ops::HookCall& call) {
  at::Tensor partial = embedding ? y * call.saved.unsqueeze(-1).to(y.scalar_type()) : y;
  at::Tensor out = redistribute_activation(partial, mesh, Placement::partial(), cfg.output_layouts);
  return hand_on(out, cfg.output_layouts, cfg.use_local_output);
}

// --------------------------------------------------------- SequenceParallel

at::Tensor SequenceParallelHook::pre_forward(const at::Tensor& x, ops::HookCall& call) {
  const Placement from = normalized(arriving_layout(x, Placement::shard(cfg.sequence_dim)), x.dim());
  at::Tensor in = redistribute_activation(x, mesh, from, Placement::shard(cfg.sequence_dim));
  // During forward the weight is swapped for a view whose gradient is
  // all-reduced over TP (each rank's tokens give a share of it).
  call.saved = owner->named_parameters(false)["weight"];
  if (call.saved.requires_grad() && at::GradMode::is_enabled())
    owner->replace_parameter("weight", redistribute_activation(call.saved, mesh, Placement::replicate(),
                                                               Placement::replicate(), Placement::partial()));
  return in;
}

at::Tensor SequenceParallelHook::post_forward(const at::Tensor& y, ops::HookCall& call) {
  owner->replace_parameter("weight", call.saved);
  return hand_on(y, Placement::shard(cfg.sequence_dim), cfg.use_local_output);
}

// ------------------------------------------------------ PrepareModuleInput

at::Tensor PrepareInputHook::pre_forward(const at::Tensor& x) {
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

// ----------------------------------------------------- PrepareModuleOutput

at::Tensor PrepareOutputHook::post_forward(const at::Tensor& y) {
  const Placement from = normalized(arriving_layout(y, cfg.output_layouts), y.dim());
  at::Tensor out = redistribute_activation(y, mesh, from, cfg.desired_output_layouts);
  return hand_on(out, cfg.desired_output_layouts, cfg.use_local_output);
}

}  // namespace titan::tp::detail
