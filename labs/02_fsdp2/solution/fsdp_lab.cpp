// Lab 02 — the three steps of FSDP, then the (given) wiring.
#include "fsdp_lab.hpp"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "titan/ops/forward_hooks.hpp"
#include "titan/util/error.hpp"

namespace lab02 {

// ============================================================ your part

at::Tensor unshard(const ShardedParam& p, const titan::dist::ProcessGroup& group) {
  // Every rank must send the same number of rows: pad the shard to padded_rows.
  std::vector<int64_t> padded_shape = p.shape;
  padded_shape[0] = p.padded_rows;
  at::Tensor padded = at::zeros(padded_shape, p.shard.options());
  if (p.shard.size(0) > 0) padded.narrow(0, 0, p.shard.size(0)).copy_(p.shard.detach());
  // Rank-major concatenation along dim 0, then drop the padding at the end.
  return group.all_gather(padded, 0).narrow(0, 0, p.shape[0]).contiguous();
}

void reshard(const at::Tensor& full) {
  // Zero bytes, same StorageImpl: tensors that alias it (autograd's saved
  // copy) stay valid objects, and get their bytes back before backward.
  c10::StorageImpl* s = full.storage().unsafeGetStorageImpl();
  s->set_nbytes(0);
  s->set_data_ptr_noswap(s->allocator()->allocate(0));
}

at::Tensor reduce_scatter_grad(const ShardedParam& p, const at::Tensor& full_grad,
                               const titan::dist::ProcessGroup& group) {
  // Pad to world·padded_rows rows so that chunk r is exactly rank r's rows.
  std::vector<int64_t> padded_shape = p.shape;
  padded_shape[0] = p.padded_rows * group.size();
  at::Tensor padded = at::zeros(padded_shape, full_grad.options());
  padded.narrow(0, 0, p.shape[0]).copy_(full_grad);
  // Avg: each rank's loss is the mean over its slice of the batch.
  at::Tensor mine = group.reduce_scatter(padded, 0, titan::dist::ReduceOp::Avg);
  return mine.narrow(0, 0, p.shard.size(0)).contiguous();
}

// ===================================================== given: the wiring
// (the library's lib/titan/parallel/fsdp does the same with prefetch, one
// flat all-gather per unit, mixed precision and offload)

namespace {

using torch::autograd::variable_list;

struct Unit;

// grad_fn of the full parameters: runs when the unit's backward is done.
struct UnshardBackward : torch::autograd::Node {
  std::shared_ptr<Unit> unit;
  variable_list apply(variable_list&& grads) override;
};

// Identity on the unit's output: runs before the unit's backward.
struct PreBackward : torch::autograd::Node {
  std::shared_ptr<Unit> unit;
  variable_list apply(variable_list&& grads) override;
};

struct Unit : titan::ops::ForwardHook, std::enable_shared_from_this<Unit> {
  std::vector<ShardedParam> params;
  std::shared_ptr<titan::dist::ProcessGroup> group;
  std::vector<at::Tensor> full;

  at::Tensor pre_forward(const at::Tensor& input) override {
    full.clear();
    for (const auto& p : params) full.push_back(unshard(p, *group).detach());
    if (at::GradMode::is_enabled()) {
      auto node = std::shared_ptr<UnshardBackward>(new UnshardBackward(), torch::autograd::deleteNode);
      node->unit = shared_from_this();
      std::vector<at::Tensor> shards;
      for (const auto& p : params) shards.push_back(p.shard);
      node->set_next_edges(torch::autograd::collect_next_edges(shards));
      torch::autograd::set_history(full, node);
    }
    for (size_t i = 0; i < params.size(); ++i) params[i].owner->replace_parameter(params[i].name, full[i]);
    return input;
  }

  at::Tensor post_forward(const at::Tensor& output) override {
    for (auto& p : params) p.owner->replace_parameter(p.name, p.shard);
    for (const auto& t : full) reshard(t);
    if (!at::GradMode::is_enabled() || !output.requires_grad()) return output;
    auto node = std::shared_ptr<PreBackward>(new PreBackward(), torch::autograd::deleteNode);
    node->unit = shared_from_this();
    node->set_next_edges(torch::autograd::collect_next_edges(output));
    at::Tensor out = output.detach();
    torch::autograd::set_history(out, node);
    return out;
  }

  // Gather again into the storage the graph saved (through a fresh alias so
  // the saved tensors' version counters do not move).
  void refill() {
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor data = unshard(params[i], *group);
      c10::StorageImpl* s = full[i].storage().unsafeGetStorageImpl();
      const size_t nbytes = static_cast<size_t>(full[i].numel()) * full[i].element_size();
      if (s->nbytes() != nbytes) {
        s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
        s->set_nbytes(nbytes);
      }
      at::from_blob(s->mutable_data(), full[i].sizes(), full[i].options()).copy_(data);
    }
  }
};

variable_list UnshardBackward::apply(variable_list&& grads) {
  variable_list out;
  for (size_t i = 0; i < unit->params.size(); ++i) {
    at::Tensor g = grads[i].defined() ? grads[i] : at::zeros_like(unit->full[i]);
    out.push_back(reduce_scatter_grad(unit->params[i], g, *unit->group));
  }
  for (const auto& t : unit->full) reshard(t);
  return out;
}

variable_list PreBackward::apply(variable_list&& grads) {
  unit->refill();
  return std::move(grads);
}

std::shared_ptr<Unit> unit_of(torch::nn::Module& m) {
  auto* h = dynamic_cast<titan::ops::HookableModule*>(&m);
  if (!h) return nullptr;
  for (const auto& hook : h->forward_hooks())
    if (auto u = std::dynamic_pointer_cast<Unit>(hook)) return u;
  return nullptr;
}

}  // namespace

int64_t unsharded_bytes(torch::nn::Module& module) {
  int64_t total = 0;
  auto count = [&](torch::nn::Module& m) {
    if (auto u = unit_of(m))
      for (const auto& t : u->full) total += static_cast<int64_t>(t.storage().nbytes());
  };
  count(module);
  for (const auto& item : module.named_modules("", false)) count(*item.value());
  return total;
}

void fully_shard(torch::nn::Module& module, const titan::dist::DeviceMesh& mesh) {
  auto* hookable = dynamic_cast<titan::ops::HookableModule*>(&module);
  TITAN_CHECK(hookable && !unit_of(module), "lab02::fully_shard: module cannot be (re)sharded");
  TITAN_CHECK(mesh.ndim() == 1, "lab02::fully_shard: the lab uses a 1-D mesh");
  auto unit = std::make_shared<Unit>();
  unit->group = mesh.group(0);
  const int64_t n = unit->group->size(), r = unit->group->rank();
  std::vector<std::string> inner;
  for (const auto& item : module.named_modules("", false))
    if (unit_of(*item.value())) inner.push_back(item.key() + ".");
  auto modules = module.named_modules("", true);
  for (const auto& item : module.named_parameters(true)) {
    const std::string& fqn = item.key();
    bool skip = false;
    for (const auto& pre : inner) skip = skip || fqn.rfind(pre, 0) == 0;
    if (skip) continue;
    auto dot = fqn.rfind('.');
    std::string owner = dot == std::string::npos ? "" : fqn.substr(0, dot);
    ShardedParam p;
    p.owner = dynamic_cast<titan::ops::ParamModule*>(modules[owner].get());
    TITAN_CHECK(p.owner, "lab02::fully_shard: ", fqn, " is not in a ParamModule");
    p.name = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
    p.shape = item.value().sizes().vec();
    p.padded_rows = (p.shape[0] + n - 1) / n;
    const int64_t begin = std::min(r * p.padded_rows, p.shape[0]);
    const int64_t rows = std::min(p.padded_rows, p.shape[0] - begin);
    {
      at::NoGradGuard no_grad;
      p.shard = item.value().narrow(0, begin, rows).clone();
    }
    p.shard.set_requires_grad(true);
    p.owner->replace_parameter(p.name, p.shard);
    unit->params.push_back(std::move(p));
  }
  hookable->add_forward_hook(unit);
}

}  // namespace lab02
