#include "titan/verify/tp_technique.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <map>
#include <string>

#include "titan/parallel/tensor_parallel/parallelize_module.hpp"

namespace titan::verify {

NamedTensors gather_tp_full(torch::nn::Module& model, bool grads, c10::Device comm_device) {
  const NamedTensors local = grads ? snapshot_grads(model) : snapshot_params(model);
  std::map<std::string, at::Tensor> by_name(local.begin(), local.end());
  std::map<std::string, at::Tensor> full = tp::gather_tp_tensors(by_name, tp::tp_parameters(model), comm_device);
  // Back into registration order, which compare() matches name by name.
  NamedTensors out;
  for (const auto& [name, t] : local) out.emplace_back(name, full.at(name));
  return out;
}

Technique tp_technique(torch::nn::Module& model, c10::Device comm_device) {
  Technique t;
  t.full_grads = [&model, comm_device] { return gather_tp_full(model, /*grads=*/true, comm_device); };
  t.full_params = [&model, comm_device] { return gather_tp_full(model, /*grads=*/false, comm_device); };
  return t;
}

}  // namespace titan::verify
