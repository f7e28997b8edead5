// Which data parallelism wraps the model, from the job's degrees.
#include "titan/models/llama3/parallelize.hpp"

#include "titan/config/job_config.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/util/error.hpp"

namespace titan::models::llama3 {

ParallelizedModel parallelize_llama(Transformer& model, const parallel::ParallelDims& dims, dist::DeviceMesh* mesh,
                                    const config::JobConfig& cfg) {
  (void)cfg;
  ParallelizedModel r;
  // The plain model's weights are already whole: a detached copy of each.
  r.full_state_dict = [model]() mutable {
    std::map<std::string, at::Tensor> out;
    for (const auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
    return out;
  };
  if (dims.world_size == 1) {
    r.params = model->parameters();
    return r;
  }
  TITAN_CHECK(mesh != nullptr, "parallelize_llama: ", dims.world_size, " ranks but no device mesh");
  throw Error("parallelize_llama: " + dims.describe() + " is not built yet");
}

}  // namespace titan::models::llama3
