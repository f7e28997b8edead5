#pragma once
/// @file
/// @brief parallelize_module(): applies a tensor-parallel plan (module path
/// → style) to a model, and the queries that later stages need — which
/// parameters are sharded how, and the full tensors gathered back.

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/dist/device_mesh.hpp"
#include "titan/parallel/tensor_parallel/styles.hpp"

namespace torch::nn {
class Module;
}

namespace titan::tp {

/// @brief A plan: module paths relative to the module passed to
/// parallelize_module ("attention.wq", "layers.*.feed_forward.w2"; `*`
/// matches one path segment) and the style each gets, applied in order.
using ParallelizePlan = std::vector<std::pair<std::string, std::shared_ptr<ParallelStyle>>>;

/// @brief Applies `plan` to `module` over the 1-D TP mesh `tp_mesh`.
///
/// Every entry must match at least one module and no module may get two
/// styles (one-line titan::Error otherwise, before any parameter changes).
/// Not collective: sharding is a local slice of the (identical) full
/// weights every rank holds, or a shape on the meta device.
void parallelize_module(torch::nn::Module& module, const dist::DeviceMesh& tp_mesh, const ParallelizePlan& plan);

/// @brief Where a parameter lies on the TP mesh.
struct TpParameterInfo {
  std::shared_ptr<const dist::DeviceMesh> mesh;  ///< the TP mesh
  Placement placement;                           ///< Shard(d) or Replicate
  std::vector<int64_t> global_shape;             ///< the unsharded shape
};

/// @brief Every parameter a style placed, by fully qualified name relative
/// to `module` (parameters no style touched are not listed: they are plain
/// replicated tensors).
std::map<std::string, TpParameterInfo> tp_parameters(torch::nn::Module& module);

/// @brief tp_parameters' placements alone (what float8's rowwise recipe
/// takes: float8::Float8Options::tp_placements).
std::map<std::string, Placement> tp_placements(torch::nn::Module& module);

/// @brief The styles applied under `module`: (module path, style name).
std::vector<std::pair<std::string, std::string>> tp_styles(torch::nn::Module& module);

/// @brief Gathers the TP-sharded entries of `local` (this rank's tensors
/// by name, e.g. a state dict with TP-local weights) into full tensors;
/// entries `tp` does not list pass through. Collective over the TP mesh:
/// every rank calls it with the same names. Results on the CPU.
std::map<std::string, at::Tensor> gather_tp_tensors(const std::map<std::string, at::Tensor>& local,
                                                    const std::map<std::string, TpParameterInfo>& tp,
                                                    at::Device comm_device);

}  // namespace titan::tp
