// What each tensor-parallel style does to a module: which dim of the
// weight it cuts, and the hook that moves activations between layouts.
#include "titan/parallel/tensor_parallel/styles.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "titan/ops/linear.hpp"
#include "titan/ops/param_module.hpp"
#include "titan/parallel/tensor_parallel/layouts.hpp"
#include "titan/util/error.hpp"

namespace titan::tp {
namespace {

using MeshPtr = std::shared_ptr<const dist::DeviceMesh>;

ops::HookableModule& hookable(torch::nn::Module& m, const std::string& fqn, const char* style) {
  auto* h = dynamic_cast<ops::HookableModule*>(&m);
  TITAN_CHECK(h != nullptr, style, ": module '", fqn, "' cannot take hooks (not a titan HookableModule)");
  return *h;
}

// Cuts the module's registered `name` along `dim` and registers this rank's
// piece (a fresh leaf, so the full tensor's memory goes). Meta stays meta.
TpParam shard_parameter(ops::ParamModule& owner, const std::string& name, int64_t dim, const MeshPtr& mesh,
                        const std::string& fqn) {
  at::Tensor full = owner.named_parameters(/*recurse=*/false)[name];
  TITAN_CHECK(full.dim() > dim, "tensor parallel: ", fqn, ".", name, " has ", full.dim(), " dims, cannot shard dim ",
              dim);
  auto [len, off] = shard_size_and_offset(full.size(dim), mesh->size(0), mesh->coordinate()[0]);
  TITAN_CHECK(len > 0, "tensor parallel: ", fqn, ".", name, " dim ", dim, " of size ", full.size(dim),
              " leaves rank ", mesh->coordinate()[0], " of ", mesh->size(0), " with nothing");
  at::Tensor local;
  {
    at::NoGradGuard no_grad;
    if (full.is_meta()) {
      std::vector<int64_t> shape = full.sizes().vec();
      shape[dim] = len;
      local = at::empty(shape, full.options());
    } else {
      local = full.detach().narrow(dim, off, len).clone(at::MemoryFormat::Contiguous);
    }
  }
  TpParam p{name, Placement::shard(dim), full.sizes().vec()};
  owner.replace_parameter(name, local);
  return p;
}

TpParam replicated_parameter(ops::ParamModule& owner, const std::string& name) {
  at::Tensor full = owner.named_parameters(false)[name];
  return TpParam{name, Placement::replicate(), full.sizes().vec()};
}

// The layout an input really has: its tag when a style before handed it on
// as a DTensor, else what the plan says it is.
Placement arriving_layout(const at::Tensor& x, const Placement& declared, bool* tagged = nullptr) {
  auto t = tagged_layout(x);
  if (tagged) *tagged = t.has_value();
  return t ? *t : declared;
}

at::Tensor hand_on(at::Tensor y, const Placement& layout, bool use_local_output) {
  if (!use_local_output) tag_layout(y, normalized(layout, y.dim()));
  return y;
}

// Colwise: compute on the whole input with this rank's output features.
class ColwiseHook : public TpHook {
 public:
  ColwiseParallel cfg;
  int64_t out_features = 0;  // global size of the output's last dim
  bool embedding = false;
  at::Tensor pre_forward(const at::Tensor& x) override {
    if (embedding) return x;  // token ids are replicated by nature
    bool tagged = false;
    const Placement from = normalized(arriving_layout(x, cfg.input_layouts, &tagged), x.dim());
    // A tagged Replicate input was prepared by PrepareModuleInput, which
    // already owns the reduction of its Partial gradient.
    if (tagged && from.is_replicate()) return x;
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
  at::Tensor pre_forward(const at::Tensor& x) override {
    const Placement from = normalized(arriving_layout(x, cfg.input_layouts), x.dim());
    const Placement to = normalized(cfg.desired_input_layouts, x.dim());
    std::optional<Placement> grad;
    if (!cfg.use_local_output && to.is_replicate()) grad = Placement::partial();
    at::Tensor out = redistribute_activation(x, mesh, from, to, grad);
    // Even a pass-through must be a tensor of its own to carry the tag
    // without tagging the caller's tensor.
    if (!cfg.use_local_output && out.unsafeGetTensorImpl() == x.unsafeGetTensorImpl()) out = x.alias();
    return hand_on(out, to, cfg.use_local_output);
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

template <typename Hook>
std::shared_ptr<Hook> make_hook(const char* style, const MeshPtr& mesh) {
  TITAN_CHECK(mesh && mesh->ndim() == 1, style, ": the TP mesh must be 1-D");
  auto h = std::make_shared<Hook>();
  h->style = style;
  h->mesh = mesh;
  return h;
}

std::string layouts(const Placement& in, const Placement& out, bool local) {
  return "(input " + in.str() + ", output " + out.str() + (local ? "" : ", DTensor output") + ")";
}

}  // namespace

void ColwiseParallel::apply(torch::nn::Module& module, const std::string& fqn, const MeshPtr& mesh) const {
  auto hook = make_hook<ColwiseHook>("ColwiseParallel", mesh);
  hook->cfg = *this;
  if (auto* lin = dynamic_cast<ops::LinearImpl*>(&module)) {
    hook->out_features = lin->weight.size(0);
    hook->params.push_back(shard_parameter(*lin, "weight", 0, mesh, fqn));
  } else if (auto* emb = dynamic_cast<ops::EmbeddingImpl*>(&module)) {
    hook->embedding = true;
    hook->out_features = emb->weight.size(1);
    hook->params.push_back(shard_parameter(*emb, "weight", 1, mesh, fqn));
  } else {
    throw Error("ColwiseParallel: module '" + fqn + "' is neither a Linear nor an Embedding");
  }
  hookable(module, fqn, "ColwiseParallel").add_forward_hook(hook);
}

std::string ColwiseParallel::describe() const {
  return "ColwiseParallel" + layouts(input_layouts, output_layouts, use_local_output);
}

void RowwiseParallel::apply(torch::nn::Module& module, const std::string& fqn, const MeshPtr& mesh) const {
  auto hook = make_hook<RowwiseHook>("RowwiseParallel", mesh);
  hook->cfg = *this;
  if (auto* lin = dynamic_cast<ops::LinearImpl*>(&module)) {
    hook->params.push_back(shard_parameter(*lin, "weight", 1, mesh, fqn));
  } else if (auto* emb = dynamic_cast<ops::EmbeddingImpl*>(&module)) {
    hook->embedding = true;
    auto [len, off] = shard_size_and_offset(emb->weight.size(0), mesh->size(0), mesh->coordinate()[0]);
    hook->vocab_offset = off;
    hook->vocab_local = len;
    hook->params.push_back(shard_parameter(*emb, "weight", 0, mesh, fqn));
  } else {
    throw Error("RowwiseParallel: module '" + fqn + "' is neither a Linear nor an Embedding");
  }
  hookable(module, fqn, "RowwiseParallel").add_forward_hook(hook);
}

std::string RowwiseParallel::describe() const {
  return "RowwiseParallel" + layouts(input_layouts, output_layouts, use_local_output);
}

void SequenceParallel::apply(torch::nn::Module& module, const std::string& fqn, const MeshPtr& mesh) const {
  auto hook = make_hook<SequenceParallelHook>("SequenceParallel", mesh);
  hook->cfg = *this;
  auto* owner = dynamic_cast<ops::ParamModule*>(&module);
  TITAN_CHECK(owner != nullptr && owner->named_parameters(false).contains("weight"), "SequenceParallel: module '",
              fqn, "' is not a titan module with a 'weight' (RMSNorm)");
  hook->owner = owner;
  hook->params.push_back(replicated_parameter(*owner, "weight"));
  owner->add_forward_hook(hook);
}

std::string SequenceParallel::describe() const {
  return "SequenceParallel(Shard(" + std::to_string(sequence_dim) + "))";
}

void PrepareModuleInput::apply(torch::nn::Module& module, const std::string& fqn, const MeshPtr& mesh) const {
  auto hook = make_hook<PrepareInputHook>("PrepareModuleInput", mesh);
  hook->cfg = *this;
  hookable(module, fqn, "PrepareModuleInput").add_forward_hook(hook);
}

std::string PrepareModuleInput::describe() const {
  return "PrepareModuleInput(" + input_layouts.str() + " -> " + desired_input_layouts.str() + ")";
}

void PrepareModuleOutput::apply(torch::nn::Module& module, const std::string& fqn, const MeshPtr& mesh) const {
  auto hook = make_hook<PrepareOutputHook>("PrepareModuleOutput", mesh);
  hook->cfg = *this;
  hookable(module, fqn, "PrepareModuleOutput").add_forward_hook(hook);
}

std::string PrepareModuleOutput::describe() const {
  return "PrepareModuleOutput(" + output_layouts.str() + " -> " + desired_output_layouts.str() + ")";
}

}  // namespace titan::tp
