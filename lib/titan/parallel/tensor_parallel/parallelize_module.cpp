#include "titan/parallel/tensor_parallel/parallelize_module.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <set>
#include <sstream>

#include "titan/dtensor/dtensor.hpp"
#include "titan/ops/forward_hooks.hpp"
#include "titan/util/error.hpp"

namespace titan::tp {
namespace {

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

bool matches(const std::string& pattern, const std::string& fqn) {
  const auto p = split(pattern), f = split(fqn);
  if (p.size() != f.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != f[i]) return false;
  return true;
}

std::vector<std::pair<std::string, TpHook*>> hooks_under(torch::nn::Module& module) {
  std::vector<std::pair<std::string, TpHook*>> out;
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    auto* h = dynamic_cast<ops::HookableModule*>(item.value().get());
    if (!h) continue;
    for (const auto& hook : h->forward_hooks())
      if (auto* tp = dynamic_cast<TpHook*>(hook.get())) out.emplace_back(item.key(), tp);
  }
  return out;
}

}  // namespace

void parallelize_module(torch::nn::Module& module, const dist::DeviceMesh& tp_mesh, const ParallelizePlan& plan) {
  TITAN_CHECK(tp_mesh.ndim() == 1, "parallelize_module: the TP mesh must be 1-D, got ", tp_mesh.describe());
  auto mesh = std::make_shared<const dist::DeviceMesh>(tp_mesh);
  auto modules = module.named_modules("", /*include_self=*/true);
  // Resolve the whole plan first, so a bad entry fails before any weight is cut.
  std::vector<std::pair<std::string, const ParallelStyle*>> todo;
  std::set<std::string> taken;
  for (const auto& [pattern, style] : plan) {
    TITAN_CHECK(style != nullptr, "parallelize_module: plan entry '", pattern, "' has no style");
    bool any = false;
    for (const auto& item : modules) {
      if (!matches(pattern, item.key())) continue;
      any = true;
      TITAN_CHECK(taken.insert(item.key()).second, "parallelize_module: module '", item.key(),
                  "' matches two plan entries (the second is '", pattern, "')");
      todo.emplace_back(item.key(), style.get());
    }
    TITAN_CHECK(any, "parallelize_module: plan entry '", pattern, "' matches no module");
  }
  for (const auto& [fqn, style] : todo) style->apply(*modules[fqn], fqn, mesh);
}

std::map<std::string, TpParameterInfo> tp_parameters(torch::nn::Module& module) {
  std::map<std::string, TpParameterInfo> out;
  for (const auto& [path, hook] : hooks_under(module))
    for (const TpParam& p : hook->params)
      out[path.empty() ? p.name : path + "." + p.name] = TpParameterInfo{hook->mesh, p.placement, p.global_shape};
  return out;
}

std::map<std::string, Placement> tp_placements(torch::nn::Module& module) {
  std::map<std::string, Placement> out;
  for (const auto& [name, info] : tp_parameters(module)) out[name] = info.placement;
  return out;
}

std::vector<std::pair<std::string, std::string>> tp_styles(torch::nn::Module& module) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [path, hook] : hooks_under(module)) out.emplace_back(path, hook->style);
  return out;
}

std::map<std::string, at::Tensor> gather_tp_tensors(const std::map<std::string, at::Tensor>& local,
                                                    const std::map<std::string, TpParameterInfo>& tp,
                                                    at::Device comm_device) {
  std::map<std::string, at::Tensor> out;
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : local) {
    auto it = tp.find(name);
    if (it == tp.end() || it->second.placement.is_replicate()) {
      out[name] = t;
      continue;
    }
    const TpParameterInfo& info = it->second;
    at::Tensor full = redistribute_local(t.detach().to(comm_device).contiguous(), *info.mesh, info.global_shape,
                                         {info.placement}, {Placement::replicate()});
    out[name] = full.to(at::kCPU).contiguous();
  }
  return out;
}

}  // namespace titan::tp
