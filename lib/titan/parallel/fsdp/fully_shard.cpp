// fully_shard(): which parameters a unit takes, how they are cut, how units
// are linked for prefetch; and the full state dict gathered for export.

#include "titan/parallel/fsdp/fully_shard.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <unordered_map>

#include "titan/dist/world.hpp"
#include "titan/parallel/fsdp/fsdp_unit.hpp"
#include "titan/util/error.hpp"

namespace titan::fsdp {
namespace {

bool has_prefix(const std::string& s, const std::string& prefix) {
  return s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 && s[prefix.size()] == '.';
}

// Every unit at or below `module`, with its module's name relative to it
// ("" for module itself), in module (= forward) order.
std::vector<std::pair<std::string, std::shared_ptr<FsdpUnit>>> units_under(torch::nn::Module& module) {
  std::vector<std::pair<std::string, std::shared_ptr<FsdpUnit>>> out;
  if (auto u = unit_of(module)) out.emplace_back("", u);
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    if (auto u = unit_of(*item.value())) out.emplace_back(item.key(), u);
  return out;
}

// The unit owning a registered tensor (the shards), by TensorImpl.
std::unordered_map<const c10::TensorImpl*, std::pair<FsdpUnit*, size_t>> shard_index(torch::nn::Module& module) {
  std::unordered_map<const c10::TensorImpl*, std::pair<FsdpUnit*, size_t>> index;
  for (auto& [prefix, unit] : units_under(module))
    for (size_t j = 0; j < unit->params().size(); ++j)
      index[unit->params()[j].shard.unsafeGetTensorImpl()] = {unit.get(), j};
  return index;
}

// The distinct comm contexts (one per root) of the units at or below
// `module`, in the order the units are found. (const_cast: LibTorch's
// named_modules is not const.)
std::vector<CommContext*> comm_contexts_under(const torch::nn::Module& module) {
  std::vector<CommContext*> contexts;
  for (auto& [prefix, u] : units_under(const_cast<torch::nn::Module&>(module))) {
    CommContext* c = u->comm_context().get();
    if (std::find(contexts.begin(), contexts.end(), c) == contexts.end()) contexts.push_back(c);
  }
  return contexts;
}

}  // namespace

std::shared_ptr<FsdpUnit> unit_of(const torch::nn::Module& module) {
  auto* hookable = dynamic_cast<const ops::HookableModule*>(&module);
  if (!hookable) return nullptr;
  for (const auto& h : hookable->forward_hooks())
    if (auto u = std::dynamic_pointer_cast<FsdpUnit>(h)) return u;
  return nullptr;
}

bool is_fully_sharded(const torch::nn::Module& module) { return unit_of(module) != nullptr; }

int64_t gradient_reductions_in_flight(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const CommContext* c : comm_contexts_under(module)) n += c->in_flight();
  return n;
}

std::vector<FsdpEvent> fsdp_events(const torch::nn::Module& module) {
  std::vector<FsdpEvent> all;
  for (const CommContext* c : comm_contexts_under(module)) {
    auto events = c->events();
    all.insert(all.end(), events.begin(), events.end());
  }
  return all;
}

void clear_fsdp_events(const torch::nn::Module& module) {
  for (CommContext* c : comm_contexts_under(module)) c->clear_events();
}

void set_requires_gradient_sync(torch::nn::Module& module, bool requires_gradient_sync) {
  const auto units = units_under(module);
  TITAN_CHECK(!units.empty(), "set_requires_gradient_sync: no fully_shard-ed module at or below ", module.name());
  for (const auto& item : units) item.second->set_requires_gradient_sync(requires_gradient_sync);
}

void fully_shard(torch::nn::Module& module, const dist::DeviceMesh& mesh, const FullyShardOptions& options) {
  auto* hookable = dynamic_cast<ops::HookableModule*>(&module);
  TITAN_CHECK(hookable != nullptr, "fully_shard: module ", module.name(),
              " cannot be wrapped (it is not a titan HookableModule such as Transformer or TransformerBlock)");
  TITAN_CHECK(!is_fully_sharded(module), "fully_shard: module ", module.name(), " is already sharded");
  TITAN_CHECK(mesh.ndim() == 1 || mesh.ndim() == 2, "fully_shard: the mesh must be 1-D (FSDP) or 2-D "
              "(HSDP: replicate x shard), got ", mesh.describe());
  // A sub-mesh (e.g. mesh["dp_shard"] of a dp × tp mesh) is fine: FSDP then
  // shards over that dimension only. The DeviceMesh itself already checked
  // that its grid matches the job.
  const dist::World& world = dist::world();
  const int shard_dim = mesh.ndim() - 1;
  const int64_t n = mesh.size(shard_dim);
  const int64_t my = mesh.coordinate()[shard_dim];

  // Submodules that are units of their own keep their parameters.
  auto children = units_under(module);
  std::vector<std::string> child_prefixes;
  for (auto& [prefix, u] : children) child_prefixes.push_back(prefix);
  auto modules = module.named_modules("", /*include_self=*/true);

  const at::Device compute = world.device();
  const bool offload = options.offload_policy && options.offload_policy->offload_params;
  const at::Device shard_device = offload ? at::Device(at::kCPU) : compute;

  std::vector<FsdpParam> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& fqn = item.key();
    bool owned_below = false;
    for (const auto& prefix : child_prefixes) owned_below = owned_below || has_prefix(fqn, prefix);
    if (owned_below) continue;
    const auto dot = fqn.rfind('.');
    const std::string owner_name = dot == std::string::npos ? "" : fqn.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
    auto* found = modules.find(owner_name);
    auto* owner = found ? dynamic_cast<ops::ParamModule*>(found->get()) : nullptr;
    TITAN_CHECK(owner != nullptr, "fully_shard: parameter ", fqn,
                " belongs to a module that cannot swap its parameters (not a titan ParamModule)");
    const at::Tensor& full = item.value();
    TITAN_CHECK(full.dim() >= 1, "fully_shard: parameter ", fqn, " is a scalar; FSDP shards dim 0");

    FsdpParam p;
    p.owner = owner;
    p.name = leaf;
    p.fqn = fqn;
    p.shape = full.sizes().vec();
    p.rows = full.size(0);
    p.padded_rows = (p.rows + n - 1) / n;
    p.row_numel = p.rows == 0 ? 0 : full.numel() / p.rows;
    auto [rows, offset] = shard_size_and_offset(p.rows, n, my);
    p.local_rows = rows;
    p.requires_grad = full.requires_grad();
    // A parameter that travels in a form of its own (float8 weights): its
    // module carries the extension among its forward hooks.
    for (const auto& h : owner->forward_hooks())
      if (auto ext = std::dynamic_pointer_cast<AllGatherExtension>(h); ext && ext->param_name() == leaf)
        p.extension = ext;
    auto shard_opts = full.options().device(shard_device);
    std::vector<int64_t> local_shape = p.shape;
    local_shape[0] = rows;
    {
      at::NoGradGuard no_grad;
      // A fresh tensor, so the full one's memory goes once the module lets go.
      p.shard = at::empty(local_shape, shard_opts);
      if (!full.is_meta() && rows > 0) p.shard.copy_(full.narrow(0, offset, rows));
    }
    p.shard.set_requires_grad(p.requires_grad);
    params.push_back(std::move(p));
  }

  auto unit = std::make_shared<FsdpUnit>("root", std::move(params), mesh, options, compute);
  for (const FsdpParam& p : unit->params())
    if (p.extension) p.extension->on_fully_shard(mesh.group(shard_dim));
  unit->install_shards();
  hookable->add_forward_hook(unit);

  // Link the units below for prefetch: forward in module order, backward in
  // reverse; this unit is their root until a parent claims it, and they
  // share its comm context (their reductions queue in one issue order).
  std::vector<FsdpUnit*> chain;
  for (auto& [prefix, u] : children) {
    u->is_root = false;
    u->set_comm_context(unit->comm_context());
    u->set_name(prefix);
    chain.push_back(u.get());
  }
  if (!chain.empty()) {
    unit->next_forward = chain.front();
    unit->next_backward = chain.back();
    for (size_t i = 0; i < chain.size(); ++i) {
      chain[i]->next_forward = i + 1 < chain.size() ? chain[i + 1] : nullptr;
      chain[i]->next_backward = i > 0 ? chain[i - 1] : nullptr;
    }
  }
}

std::map<std::string, DTensor> sharded_parameters(torch::nn::Module& module) {
  auto index = shard_index(module);
  std::map<std::string, DTensor> out;
  for (const auto& item : module.named_parameters(true)) {
    auto it = index.find(item.value().unsafeGetTensorImpl());
    if (it == index.end()) continue;
    FsdpUnit* unit = it->second.first;
    const FsdpParam& p = unit->params()[it->second.second];
    out.emplace(item.key(), DTensor(p.shard, unit->mesh(), unit->placements(), p.shape));
  }
  return out;
}

std::map<std::string, at::Tensor> full_state_dict(torch::nn::Module& module, bool rank0_only) {
  auto index = shard_index(module);
  const bool keep = !rank0_only || dist::world().rank() == 0;
  std::map<std::string, at::Tensor> out;
  at::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters(true)) {
    auto it = index.find(item.value().unsafeGetTensorImpl());
    at::Tensor full;
    if (it == index.end()) {
      full = item.value().detach();  // not sharded: every rank has it whole
    } else {
      // One parameter at a time: the peak is one full parameter, not the model.
      FsdpUnit* unit = it->second.first;
      const FsdpParam& p = unit->params()[it->second.second];
      std::vector<int64_t> padded_shape = p.shape;
      padded_shape[0] = p.padded_rows;
      at::Tensor padded = at::zeros(padded_shape, p.shard.options().device(unit->compute_device()));
      if (p.local_rows > 0) padded.narrow(0, 0, p.local_rows).copy_(p.shard.detach());
      full = unit->shard_group().all_gather(padded, 0).narrow(0, 0, p.rows);
    }
    if (keep) out.emplace(item.key(), full.to(at::kCPU).contiguous().clone());
  }
  return out;
}

void load_full_state_dict(torch::nn::Module& module, const std::map<std::string, at::Tensor>& state) {
  auto index = shard_index(module);
  at::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters(true)) {
    auto found = state.find(item.key());
    TITAN_CHECK(found != state.end(), "load_full_state_dict: no tensor for parameter ", item.key());
    const at::Tensor& src = found->second;
    auto it = index.find(item.value().unsafeGetTensorImpl());
    if (it == index.end()) {
      TITAN_CHECK(src.sizes() == item.value().sizes(), "load_full_state_dict: ", item.key(), " has shape ",
                  src.sizes(), ", the model wants ", item.value().sizes());
      item.value().copy_(src);
      continue;
    }
    FsdpUnit* unit = it->second.first;
    const FsdpParam& p = unit->params()[it->second.second];
    TITAN_CHECK(src.sizes().vec() == p.shape, "load_full_state_dict: ", item.key(), " has shape ", src.sizes(),
                ", the model wants ", at::IntArrayRef(p.shape));
    const int shard_dim = unit->mesh()->ndim() - 1;
    auto [rows, offset] = shard_size_and_offset(p.rows, unit->mesh()->size(shard_dim),
                                                unit->mesh()->coordinate()[shard_dim]);
    if (rows > 0) p.shard.copy_(src.narrow(0, offset, rows));
  }
}

}  // namespace titan::fsdp
