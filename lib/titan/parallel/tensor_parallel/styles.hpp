#pragma once
/// @file
/// @brief The tensor-parallel styles of torch.distributed.tensor.parallel,
/// for titan's modules: ColwiseParallel, RowwiseParallel, SequenceParallel,
/// PrepareModuleInput and PrepareModuleOutput.
///
/// A style shards a module's weight over the 1-D TP mesh (the registered
/// parameter becomes this rank's piece) and attaches a ForwardHook that
/// moves the module's input and output between layouts:
///
/// | style            | weight          | input → compute            | output                      |
/// | ---------------- | --------------- | -------------------------- | --------------------------- |
/// | Colwise (Linear) | Shard(0) rows   | input_layouts → Replicate  | Shard(-1) → output_layouts  |
/// | Rowwise (Linear) | Shard(1) cols   | input_layouts → Shard(-1)  | Partial → output_layouts    |
/// | Rowwise (Embed.) | Shard(0) vocab  | ids (Replicate), masked    | Partial → output_layouts    |
/// | Colwise (Embed.) | Shard(1) dim    | ids (Replicate)            | Shard(-1) → output_layouts  |
/// | SequenceParallel | Replicate       | Shard(1) (norm per token)  | Shard(1)                    |
///
/// Gradients follow from the layouts (DTensor::redistribute's rule), plus
/// one fact plain tensors cannot carry: a Replicate activation that sharded
/// weights consume gets a Partial gradient. Colwise declares it when it
/// makes its input Replicate; PrepareModuleInput(use_local_output = false)
/// declares it for the module's children, which then take the prepared
/// (tagged) input as it is — one collective for wq, wk and wv together, as
/// with torch's DTensor. SequenceParallel's weight sees only this rank's
/// tokens, so its gradient is Partial too and is all-reduced over TP.

#include <memory>
#include <string>
#include <vector>

#include "titan/dist/device_mesh.hpp"
#include "titan/dtensor/placement.hpp"
#include "titan/ops/forward_hooks.hpp"

namespace torch::nn {
class Module;
}

namespace titan::tp {

/// @brief A TP-sharded parameter: where it lies on the TP mesh.
struct TpParam {
  std::string name;                   ///< parameter name in its module ("weight")
  Placement placement;                ///< Shard(d) or Replicate on the TP mesh
  std::vector<int64_t> global_shape;  ///< the unsharded shape
};

/// @brief The hook a style attaches to a module; also the record of what
/// the style did to the module's parameters.
class TpHook : public ops::ForwardHook {
 public:
  std::string style;                            ///< "ColwiseParallel", ...
  std::string fqn;                              ///< the module's path in the plan
  std::shared_ptr<const dist::DeviceMesh> mesh; ///< the 1-D TP mesh
  std::vector<TpParam> params;                  ///< parameters the style placed
};

/// @brief How a module is parallelised (torch's ParallelStyle).
class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  /// Shards `module`'s parameters over `mesh` and attaches the hook.
  /// `fqn` names the module in errors. Throws titan::Error for a module the
  /// style does not fit.
  virtual void apply(torch::nn::Module& module, const std::string& fqn,
                     const std::shared_ptr<const dist::DeviceMesh>& mesh) const = 0;
  /// "ColwiseParallel(input Replicate(), output Shard(-1))" style text.
  virtual std::string describe() const = 0;
};

/// @brief Shards a Linear's output features (weight rows) or an Embedding's
/// embedding dim; the output is sharded on its last dim.
struct ColwiseParallel : ParallelStyle {
  Placement input_layouts = Placement::replicate();  ///< how the input arrives
  Placement output_layouts = Placement::shard(-1);   ///< how the output leaves
  bool use_local_output = true;                      ///< false: tag the output as a DTensor
  void apply(torch::nn::Module& module, const std::string& fqn,
             const std::shared_ptr<const dist::DeviceMesh>& mesh) const override;
  std::string describe() const override;
};

/// @brief Shards a Linear's input features (weight columns) or an
/// Embedding's vocabulary (weight rows); the output is a Partial sum.
struct RowwiseParallel : ParallelStyle {
  Placement input_layouts = Placement::shard(-1);     ///< how the input arrives
  Placement output_layouts = Placement::replicate();  ///< how the output leaves
  bool use_local_output = true;                       ///< false: tag the output as a DTensor
  void apply(torch::nn::Module& module, const std::string& fqn,
             const std::shared_ptr<const dist::DeviceMesh>& mesh) const override;
  std::string describe() const override;
};

/// @brief Runs a per-token module (RMSNorm) on this rank's slice of the
/// sequence: input and output Shard(sequence_dim), weight replicated with
/// its gradient all-reduced over TP.
struct SequenceParallel : ParallelStyle {
  int64_t sequence_dim = 1;     ///< the activation dim that is sharded
  bool use_local_output = false; ///< false (torch's default): tag the output Shard(sequence_dim)
  void apply(torch::nn::Module& module, const std::string& fqn,
             const std::shared_ptr<const dist::DeviceMesh>& mesh) const override;
  std::string describe() const override;
};

/// @brief Moves a module's (first) input from input_layouts to
/// desired_input_layouts before its forward; no parameters change.
struct PrepareModuleInput : ParallelStyle {
  Placement input_layouts = Placement::shard(1);              ///< how the input arrives
  Placement desired_input_layouts = Placement::replicate();   ///< what the module's body gets
  /// false (torch's default): the children see a DTensor (tagged), and a
  /// Replicate result's gradient is taken as Partial (the children are
  /// sharded and each produces its share), so it is reduced here once.
  bool use_local_output = false;
  void apply(torch::nn::Module& module, const std::string& fqn,
             const std::shared_ptr<const dist::DeviceMesh>& mesh) const override;
  std::string describe() const override;
};

/// @brief Moves a module's output from output_layouts to
/// desired_output_layouts after its forward; no parameters change.
struct PrepareModuleOutput : ParallelStyle {
  Placement output_layouts = Placement::shard(1);             ///< how the output leaves the body
  Placement desired_output_layouts = Placement::replicate();  ///< what the caller gets
  bool use_local_output = true;                               ///< false: tag the result
  void apply(torch::nn::Module& module, const std::string& fqn,
             const std::shared_ptr<const dist::DeviceMesh>& mesh) const override;
  std::string describe() const override;
};

}  // namespace titan::tp
