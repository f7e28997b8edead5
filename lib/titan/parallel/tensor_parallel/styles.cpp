// What each tensor-parallel style does to a module: which dim of the
// weight it cuts, and the hook that moves activations between layouts.
#include "titan/parallel/tensor_parallel/styles.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "titan/ops/linear.hpp"
#include "titan/ops/param_module.hpp"
#include "titan/parallel/tensor_parallel/layouts.hpp"
#include "titan/parallel/tensor_parallel/style_hooks.hpp"
#include "titan/util/error.hpp"

namespace titan::tp {
namespace {

using namespace detail;

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
  hook->fqn = fqn;
  if (auto* lin = dynamic_cast<ops::LinearImpl*>(&module)) {
    hook->linear = lin;
    hook->out_features = lin->out_features();
    if (lin->tied()) {
      // A tied output's weight is its embedding's, which RowwiseParallel
      // cut on the vocabulary dim: rows [off, off+len) of [vocab, dim],
      // exactly the piece Colwise would cut here. Anything else (the
      // embedding not sharded, or cut some other way) cannot serve both.
      const int64_t len = shard_size_and_offset(lin->out_features(), mesh->size(0), mesh->coordinate()[0]).first;
      TITAN_CHECK(lin->current_weight().size(0) == len, "ColwiseParallel: '", fqn,
                  "' is tied to an embedding whose weight is not sharded on the vocabulary (RowwiseParallel on it "
                  "first); tensor parallelism cannot cut one tied weight two ways");
    } else {
      hook->params.push_back(shard_parameter(*lin, "weight", 0, mesh, fqn));
    }
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
  hook->fqn = fqn;
  if (auto* lin = dynamic_cast<ops::LinearImpl*>(&module)) {
    TITAN_CHECK(!lin->tied(), "RowwiseParallel: '", fqn, "' is tied to an embedding; only ColwiseParallel (the "
                "embedding's vocabulary cut) fits a tied output");
    hook->linear = lin;
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
  hook->fqn = fqn;
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
  hook->fqn = fqn;
  hookable(module, fqn, "PrepareModuleInput").add_forward_hook(hook);
}

std::string PrepareModuleInput::describe() const {
  return "PrepareModuleInput(" + input_layouts.str() + " -> " + desired_input_layouts.str() + ")";
}

void PrepareModuleOutput::apply(torch::nn::Module& module, const std::string& fqn, const MeshPtr& mesh) const {
  auto hook = make_hook<PrepareOutputHook>("PrepareModuleOutput", mesh);
  hook->cfg = *this;
  hook->fqn = fqn;
  hookable(module, fqn, "PrepareModuleOutput").add_forward_hook(hook);
}

std::string PrepareModuleOutput::describe() const {
  return "PrepareModuleOutput(" + output_layouts.str() + " -> " + desired_output_layouts.str() + ")";
}

}  // namespace titan::tp
