#include "titan/verify/fsdp_technique.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <utility>

#include "titan/dist/world.hpp"
#include "titan/dtensor/dtensor.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"

namespace titan::verify {

NamedTensors gather_full(torch::nn::Module& model, bool grads) {
  at::NoGradGuard no_grad;
  const std::map<std::string, DTensor> sharded = fsdp::sharded_parameters(model);
  // With CPU offload the shards live on the CPU, but NCCL only gathers GPU
  // tensors: gather where the job computes.
  const c10::Device device = dist::world().device();
  NamedTensors out;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const at::Tensor& param = item.value();
    at::Tensor local = grads ? param.grad() : param;
    // A rank whose shard got no gradient must still join the gather.
    if (!local.defined()) local = at::zeros_like(param);
    at::Tensor full = local.detach();
    auto it = sharded.find(item.key());
    if (it != sharded.end()) {
      const DTensor& shard = it->second;
      full = DTensor(full.to(device), shard.mesh_ptr(), shard.placements(), shard.shape()).full_tensor();
    }
    out.emplace_back(item.key(), full.to(at::kCPU).clone());
  }
  return out;
}

Technique fsdp_technique(torch::nn::Module& model, std::shared_ptr<dist::ProcessGroup> dp_group) {
  Technique t;
  t.full_grads = [&model] { return gather_full(model, /*grads=*/true); };
  t.full_params = [&model] { return gather_full(model, /*grads=*/false); };
  // Every rank trained on an equal slice of the global batch.
  t.global_losses = average_over(std::move(dp_group));
  return t;
}

}  // namespace titan::verify
