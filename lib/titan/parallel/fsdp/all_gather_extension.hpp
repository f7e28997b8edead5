#pragma once
/// @file
/// @brief AllGatherExtension: a parameter that FSDP all-gathers in a form of
/// its own instead of its values in param_dtype — the C++ counterpart of
/// the fsdp_pre_all_gather / fsdp_post_all_gather methods that FSDP2 calls
/// on a tensor subclass (torchao's float8 weights use them to travel as
/// 1-byte float8 with a scale).
///
/// How FSDP uses one: fully_shard() looks for an extension among the
/// forward hooks of the module that owns a parameter (convert the model
/// before sharding it, as torchtitan does). Then, for every all-gather of
/// the unit, pre_all_gather() turns this rank's shard into the elements to
/// send (any dtype: a unit whose parameters travel in different dtypes is
/// gathered as one byte buffer, as FSDP2 does); the gathered full tensor is
/// what the unit keeps, frees after forward and refills for backward. The
/// module's parameter during the forward is a stand-in: a tensor of the
/// parameter's shape in param_dtype, with one element of storage, whose
/// only job is to carry the gradient (in param_dtype) back to the shard.
/// post_all_gather() tells the extension which gathered tensor stands
/// behind which stand-in, so the code that uses the parameter (the float8
/// matmul) reads the gathered data instead. Gradients are reduce-scattered
/// as for any other parameter.

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

namespace titan::dist {
class ProcessGroup;
}

namespace titan::fsdp {

/// @brief Hooks a parameter's all-gather (see the file comment).
class AllGatherExtension {
 public:
  virtual ~AllGatherExtension() = default;
  /// Name of the owning module's parameter this extension is for ("weight").
  virtual std::string param_name() const = 0;
  /// Element type of what travels (e.g. float8_e4m3fn).
  virtual at::ScalarType all_gather_dtype() const = 0;
  /// fully_shard adopted the extension: `shard_group` is the group the
  /// parameter is sharded (and gathered) over.
  virtual void on_fully_shard(std::shared_ptr<dist::ProcessGroup> shard_group) = 0;
  /// This rank's elements to send: `shard` (the stored tensor, e.g. fp32;
  /// it may have no rows) turned into all_gather_dtype(), same shape.
  /// Every rank of the shard group calls it for the same parameters in the
  /// same order, so it may run collectives over that group.
  virtual at::Tensor pre_all_gather(const at::Tensor& shard) = 0;
  /// The unit installs its gathered parameters for a forward: `gathered`
  /// (all_gather_dtype(), the global shape; FSDP's storage, valid whenever
  /// the unit computes) stands behind `stand_in`, the tensor the module
  /// holds as its parameter meanwhile.
  virtual void post_all_gather(const at::Tensor& gathered, const at::Tensor& stand_in) = 0;
};

}  // namespace titan::fsdp
