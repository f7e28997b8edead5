#include "titan/checkpoint/sharded_state.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>

#include "titan/dist/device_mesh.hpp"
#include "titan/dtensor/dtensor.hpp"
#include "titan/dtensor/placement.hpp"
#include "titan/optim/adam_state.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/parallel/tensor_parallel/parallelize_module.hpp"
#include "titan/util/error.hpp"

namespace titan::checkpoint {

ShardedState model_shards(const std::vector<torch::nn::Module*>& parts, const dist::DeviceMesh* job_mesh) {
  ShardedState out;
  for (torch::nn::Module* part : parts) {
    const std::map<std::string, DTensor> fsdp = fsdp::sharded_parameters(*part);
    const std::map<std::string, tp::TpParameterInfo> tp = tp::tp_parameters(*part);
    for (const auto& item : part->named_parameters(true)) {
      TensorShard s;
      s.fqn = item.key();
      s.local = item.value();
      s.global_shape = item.value().sizes().vec();
      s.offsets.assign(s.global_shape.size(), 0);
      bool tp_sharded = false, fsdp_sharded = false;
      // TP first: the TP-local weight is a box of the global one ...
      auto t = tp.find(s.fqn);
      if (t != tp.end() && t->second.placement.is_shard()) {
        tp_sharded = true;
        s.global_shape = t->second.global_shape;
        const dist::DeviceMesh& tp_mesh = *t->second.mesh;  // 1-D
        const int64_t d = t->second.placement.dim;
        s.offsets[static_cast<size_t>(d)] =
            shard_size_and_offset(s.global_shape[static_cast<size_t>(d)], tp_mesh.size(0), tp_mesh.coordinate()[0]).second;
      }
      // ... and FSDP's rows are a box of the TP-local weight.
      auto f = fsdp.find(s.fqn);
      if (f != fsdp.end()) {
        fsdp_sharded = true;
        if (!tp_sharded) s.global_shape = f->second.shape();
        const std::vector<int64_t> rows = f->second.local_offset();
        for (size_t d = 0; d < rows.size(); ++d) s.offsets[d] += rows[d];
      }
      TITAN_CHECK(s.local.dim() == static_cast<int64_t>(s.global_shape.size()), "checkpoint: ", s.fqn,
                  " has a ", s.local.dim(), "-D local piece of a ", s.global_shape.size(), "-D tensor");
      if (job_mesh) {
        for (int d = 0; d < job_mesh->ndim(); ++d) {
          const std::string& name = job_mesh->names()[static_cast<size_t>(d)];
          if (name == "pp") continue;  // each pipeline rank holds other layers
          if (name == "tp" && tp_sharded) continue;
          // FSDP shards over dp_shard, and under context parallelism over
          // dp_shard x cp together (dp_shard_cp).
          if ((name == "dp_shard" || name == "cp") && fsdp_sharded) continue;
          if (job_mesh->coordinate()[static_cast<size_t>(d)] != 0) s.primary = false;
        }
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::string optimizer_state_name(const std::string& fqn, const std::string& moment) {
  return "optimizer.state." + fqn + "." + moment;
}

ShardedState optimizer_shards(torch::optim::Optimizer& optimizer, const ShardedState& model) {
  ShardedState out;
  for (const TensorShard& m : model) {
    const optim::AdamMoments st = optim::adam_state(optimizer, m.local);
    for (const auto& [moment, tensor] : {std::pair<const char*, at::Tensor>{"exp_avg", st.exp_avg},
                                         std::pair<const char*, at::Tensor>{"exp_avg_sq", st.exp_avg_sq}}) {
      TensorShard s = m;
      s.fqn = optimizer_state_name(m.fqn, moment);
      s.local = tensor;
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace titan::checkpoint
