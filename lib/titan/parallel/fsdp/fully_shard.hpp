#pragma once
/// @file
/// @brief fully_shard(): FSDP2-style per-parameter sharding of a module over
/// a DeviceMesh, with mixed precision, CPU offload and HSDP, plus the
/// gathered full state dict for export.
///
/// Usage, as in torchtitan: shard every transformer block, then the root
/// (which takes the parameters no block owns: embeddings, final norm,
/// output):
///
/// ```
/// for (auto& block : model->blocks()) fsdp::fully_shard(*block, mesh, opts);
/// fsdp::fully_shard(*model, mesh, opts);
/// auto optimizer = torch::optim::AdamW(model->parameters(), ...);  // the shards
/// ```
///
/// After that, model->parameters() yields this rank's shards (Shard(0) over
/// the shard dimension of the mesh, uneven first dims allowed) and forward /
/// backward / optimizer steps work as on one process. The gradient
/// reduce-scatters run asynchronously under the backward, but are all waited
/// before `loss.backward()` returns: shard.grad is complete then, with no
/// call of ours in between. What happens per unit is explained in
/// fsdp_unit.hpp.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/dist/device_mesh.hpp"
#include "titan/dtensor/dtensor.hpp"

namespace torch::nn {
class Module;
}

namespace titan::fsdp {

/// @brief Dtypes of the unsharded parameters and of the gradient reduction
/// (torch.distributed.fsdp.MixedPrecisionPolicy). Unset means "as stored":
/// a module sharded without a policy stays fp32 throughout.
struct MixedPrecisionPolicy {
  /// Dtype the parameters are all-gathered and computed in (e.g. bf16).
  std::optional<at::ScalarType> param_dtype;
  /// Dtype gradients are reduce-scattered in; unset = param_dtype.
  std::optional<at::ScalarType> reduce_dtype;
};

/// @brief Where the sharded parameters, their gradients and hence the
/// optimizer state live (torch.distributed.fsdp.CPUOffloadPolicy).
struct CPUOffloadPolicy {
  /// Keep shards, gradients and optimizer state in CPU memory; they are
  /// copied to the compute device for the all-gather and the gradients are
  /// copied back after the reduce-scatter. On a CPU job the copies are no-ops.
  bool offload_params = true;
};

/// @brief Options of fully_shard().
struct FullyShardOptions {
  MixedPrecisionPolicy mp_policy;                  ///< dtypes; default: stay as stored
  std::optional<CPUOffloadPolicy> offload_policy;  ///< unset: shards on the compute device
  /// Free the unsharded parameters after the unit's forward and all-gather
  /// them again for its backward (ZeRO-3); false keeps them until backward
  /// (ZeRO-2-like: more memory, one all-gather fewer). The root unit never
  /// frees after forward, as in FSDP2: its backward would start at once.
  bool reshard_after_forward = true;
};

/// @brief Shards `module`'s parameters over `mesh` and makes its forward
/// gather them on demand.
///
/// `module` must be a titan HookableModule (Transformer, TransformerBlock).
/// Parameters that belong to a submodule already passed to fully_shard stay
/// with that submodule's unit; the rest join a new unit for `module`. When
/// such submodules exist, `module` becomes their root: it links their
/// prefetch order (forward: module order; backward: the reverse).
///
/// `mesh` is 1-D (FSDP: shard over it; a sub-mesh such as mesh["dp_shard"]
/// of a larger mesh is fine) or 2-D (HSDP: dim 0 replicates, dim 1 shards). Parameters may live on the meta device (the shards are
/// then allocated uninitialised; load them with load_full_state_dict); real
/// parameters are sliced and the full tensors released. Collective over the
/// mesh. A parameter whose owning module carries an AllGatherExtension
/// among its forward hooks (all_gather_extension.hpp: float8 weights)
/// travels in the extension's form. Throws titan::Error for a module that cannot be sharded, a mesh of
/// another dimensionality, or a second call on the same module.
void fully_shard(torch::nn::Module& module, const dist::DeviceMesh& mesh,
                 const FullyShardOptions& options = {});

/// @brief True when fully_shard() was applied to `module` itself.
bool is_fully_sharded(const torch::nn::Module& module);

/// @brief FSDP2's FSDPModule.set_requires_gradient_sync, for every unit at
/// or below `module`. With false, the following backwards reduce nothing:
/// each unit sums its full gradients (in reduce_dtype) and keeps its full
/// parameters for the next micro-batch; the first backward after setting
/// true reduce-scatters the sum, once per unit. torch's pipelining does this
/// around a stage's micro-batches (true for the last one), so that a step
/// costs one all-gather and one reduce-scatter per unit, not one per
/// micro-batch. Throws titan::Error when `module` holds no unit.
void set_requires_gradient_sync(torch::nn::Module& module, bool requires_gradient_sync);

/// @brief The DTensor view of every sharded parameter under `module`, by
/// fully qualified name relative to `module` (local = the registered shard).
std::map<std::string, DTensor> sharded_parameters(torch::nn::Module& module);

/// @brief The full, unsharded state dict of `module` (names as
/// named_parameters(), i.e. torchtitan's), gathered one parameter at a time
/// on the CPU in the parameters' stored dtype. Collective over the mesh;
/// with `rank0_only` the other ranks get an empty map (they still take part).
std::map<std::string, at::Tensor> full_state_dict(torch::nn::Module& module, bool rank0_only = false);

/// @brief Copies full tensors (every rank holds them, e.g. read from a
/// checkpoint) into the shards of a fully_shard-ed `module`: each rank keeps
/// its slice. Throws titan::Error on a missing name or a shape mismatch.
void load_full_state_dict(torch::nn::Module& module, const std::map<std::string, at::Tensor>& state);

/// @brief One thing an FSDP unit did, for timelines and the overlap test.
struct FsdpEvent {
  std::string unit;  ///< "root", "layers.0", ...
  /// "all_gather" (issued → copied out), "forward" (compute, hooks excluded),
  /// "pre_backward" (re-gather + prefetch), "backward" (the unit's backward
  /// compute: pre_backward done → its last parameter gradient produced),
  /// "reduce_scatter" (issued at the end of the unit's backward → waited,
  /// i.e. complete: it runs under the previous unit's backward),
  /// "all_reduce" (HSDP, across replicas: started when the reduce-scatter
  /// was waited → waited). "all_gather_wait", "reduce_scatter_wait",
  /// "all_reduce_wait": the time this rank was blocked waiting for that
  /// collective, i.e. the communication compute did not hide (their sum
  /// over a step is its exposed communication).
  std::string what;
  double start_us = 0;  ///< CommLog clock
  double end_us = 0;
  bool prefetch = false;  ///< all_gather: issued ahead of its unit's need
};

/// @brief The events recorded since the last clear by the roots of the
/// units at or below `module`, in the order they ended. Each root keeps one
/// log for all its units (in its comm context, FSDP2's per-root state), so
/// two models, or two pipeline stages on one rank, do not mix their
/// timelines; asking a block gives its root's whole log.
std::vector<FsdpEvent> fsdp_events(const torch::nn::Module& module);
/// @brief Forgets the events of every root at or below `module`.
void clear_fsdp_events(const torch::nn::Module& module);

/// @brief Bytes of full (unsharded) parameters alive on this rank now, over
/// every unit (all-gather buffers in flight not included).
int64_t unsharded_bytes_now();
/// @brief The largest unsharded_bytes_now() since reset_unsharded_peak().
int64_t unsharded_bytes_peak();
/// @brief Starts a new peak window at the current value.
void reset_unsharded_peak();

}  // namespace titan::fsdp
