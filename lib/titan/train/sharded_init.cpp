#include "titan/train/sharded_init.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <chrono>
#include <map>

#include "titan/checkpoint/sharded_state.hpp"
#include "titan/models/llama3/init_plan.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::train {

ShardedInitReport init_sharded_weights(const std::vector<torch::nn::Module*>& parts, const dist::DeviceMesh* job_mesh,
                                       const models::llama3::ModelArgs& args, uint64_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  ShardedInitReport report;
  // The boxes this rank holds, by name (one per parameter: replicas hold
  // equal boxes, and each fills its own).
  std::map<std::string, checkpoint::TensorShard> held;
  for (checkpoint::TensorShard& s : checkpoint::model_shards(parts, job_mesh)) {
    TITAN_INTERNAL_ASSERT(!s.local.is_meta(), "sharded init: ", s.fqn, " is still on the meta device");
    const std::string fqn = s.fqn;
    TITAN_INTERNAL_ASSERT(held.emplace(fqn, std::move(s)).second, "sharded init: ", fqn, " held twice");
  }
  // The model's parameters share one dtype ([training] dtype): the whole
  // model's size is counted in it.
  const int64_t element_bytes = held.empty() ? static_cast<int64_t>(sizeof(float))
                                             : static_cast<int64_t>(held.begin()->second.local.element_size());
  ops::RandomStream stream(seed);
  uint64_t first_draw = 0;  // where the whole model's init reaches each parameter
  at::NoGradGuard no_grad;
  for (const models::llama3::ParamInit& p : models::llama3::init_plan(args)) {
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    report.model_bytes += numel * element_bytes;
    auto it = held.find(p.fqn);
    if (it != held.end()) {
      checkpoint::TensorShard& s = it->second;
      TITAN_INTERNAL_ASSERT(s.global_shape == p.shape, "sharded init: ", p.fqn, " is ", at::IntArrayRef(s.global_shape),
                            " here but ", at::IntArrayRef(p.shape), " in the model");
      ops::init_box_(s.local, s.global_shape, s.offsets, p.recipe, first_draw, stream);
      const int64_t bytes = s.local.numel() * static_cast<int64_t>(s.local.element_size());
      report.local_bytes += bytes;
      report.largest_piece_bytes = std::max(report.largest_piece_bytes, bytes);
      ++report.pieces;
      held.erase(it);
    }
    first_draw += ops::init_draws(p.recipe, numel);
  }
  TITAN_INTERNAL_ASSERT(held.empty(), "sharded init: ", held.begin()->first, " is not a parameter of the model");
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace titan::train
