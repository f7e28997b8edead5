#pragma once
/// @file
/// @brief Float8 training of linear layers with dynamic tensorwise scaling
/// (torchao's Float8Linear as torchtitan's `[float8] enable_float8_linear`
/// uses it): every forward the input and the weight are scaled so that
/// their largest magnitude maps to float8 e4m3's largest value (448), cast
/// to e4m3, and multiplied by at::_scaled_mm; in backward the output
/// gradient is scaled and cast to e5m2 (largest 57344: more range, less
/// precision, for gradients) and both gradient GEMMs run in float8 too.
/// The weights, their gradients and the optimizer stay in their own dtype
/// (fp32 master weights, or FSDP's bf16 copies): only the GEMM operands are
/// float8.
///
/// at::_scaled_mm runs on Hopper's float8 tensor cores on CUDA; on the CPU
/// titan computes what ATen 2.11's emulated kernel computes
/// (`_scaled_mm_out_cpu_emulated`: the float8 operands upcast and
/// multiplied in fp32) on every CPU, also where ATen would call oneDNN's
/// float8 matmul instead (CPUs with AMX-INT8), so CPU runs see exactly
/// float8's rounding of the operands, the same bits on any CPU, but not its
/// speed.
///
/// Also here: torchao's rowwise recipe (Recipe::Rowwise) and its FSDP
/// float8 all-gather (Float8Options::fsdp_float8_all_gather and
/// precompute_float8_dynamic_scale_for_fsdp); docs/float8.md has both.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/dtensor/placement.hpp"

namespace torch::nn {
class Module;
}
namespace titan::dist {
class ProcessGroup;
}
namespace titan::ops {
class LinearImpl;
}

namespace titan::float8 {

/// @brief A tensor cast to float8 with its scale: data ≈ x · scale.
struct Scaled {
  at::Tensor data;   ///< float8 (e4m3fn or e5m2), same shape as x
  at::Tensor scale;  ///< fp32 scalar: float8 max / amax(x)
};

/// @brief Tensorwise dynamic scaling: scale = max(dtype) / amax(|x|)
/// (amax clamped below at 1e-12, so a zero tensor gets a finite scale),
/// data = clamp(x · scale, ±max(dtype)) cast to `dtype`. With
/// `amax_group`, x is this rank's piece of a tensor split over the group
/// (or a copy of it): amax is the max over the group (one all-reduce), so
/// every piece gets the scale the whole tensor would.
Scaled scale_tensorwise(const at::Tensor& x, at::ScalarType dtype, const dist::ProcessGroup* amax_group = nullptr);

/// @brief y = x Wᵀ with float8 operands (autograd-aware): x [..., in] in
/// any float dtype, w [out, in]; y has x's dtype. Backward: grad_x =
/// g·W and grad_W = gᵀ·x with g in e5m2 and x, W in e4m3 (the forward's
/// casts, kept for backward instead of x itself).
/// With `amax_group` (the TP group of a sharded Linear) the three amaxes
/// (x, W, grad) are taken over the group, so the TP pieces quantise as the
/// unsharded layer would (torchao does this for DTensor weights).
at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& w, const dist::ProcessGroup* amax_group = nullptr);

/// @brief a · b on float8 operands with their quantising scales (the kernel
/// applies the inverses), in `out` dtype: at::_scaled_mm on CUDA, its
/// arithmetic by hand on the CPU (float8_linear's GEMMs, also async TP's
/// chunked ones). a [M, K] row-major, b [K, N] column-major. `fast_accum`:
/// torchao's choice, true for the forward GEMM, false for the two backward
/// ones (CUDA only; the CPU has one exact fp32 way).
at::Tensor scaled_mm(const Scaled& a, const Scaled& b_colmajor, at::ScalarType out, bool fast_accum);

/// @brief Whether float8 GEMMs on CUDA are emulated: computed as on the CPU
/// (the float8 operands upcast, each times its dequantising scale, one
/// fp32 matmul) instead of by at::_scaled_mm on float8 tensor cores, which
/// need compute capability 8.9 (Ada, Hopper) or later. torchao's
/// Float8LinearConfig.emulate, for testing float8's numerics on older GPUs;
/// same values as the CPU path, none of the speed. Process-wide, like
/// LibTorch's TF32 switch (convert_to_float8_training sets it from
/// Float8Options::emulate); off by default. The CPU always emulates.
void set_emulated_gemms(bool on);
/// @brief The current set_emulated_gemms setting.
bool emulated_gemms();

/// @brief Why float8 training cannot run on a GPU of compute capability
/// `major`.`minor` named `device_name`, or "" when it can: _scaled_mm needs
/// 8.9 or later unless the GEMMs are emulated (torchtitan refuses the same
/// way before converting the model).
std::string float8_gpu_error(const std::string& device_name, int major, int minor, bool emulate);

/// @brief `m` [K, N] with the same values laid out column-major (the
/// layout scaled_mm's second operand needs).
at::Tensor column_major(const at::Tensor& m);

/// @brief A float8 Linear as code that runs its GEMMs itself sees it
/// (async TP's ring): the group its amaxes are taken over and its weight in
/// e4m3 with its scale, as its own forward would cast it.
struct Float8LinearOperands {
  const dist::ProcessGroup* amax_group = nullptr;  ///< the TP group, or null
  /// FSDP's gathered float8 weight when the float8 all-gather brought it,
  /// else the weight cast now (amax over amax_group).
  Scaled weight;
};

/// @brief nullopt for a Linear that convert_to_float8_training did not
/// convert; titan::Error for one converted with the rowwise recipe. Call it
/// where the Linear's forward would run: it may take an amax over the group.
std::optional<Float8LinearOperands> float8_operands(ops::LinearImpl& linear);

/// @brief How the float8 operands are scaled (torchao's recipe_name).
enum class Recipe {
  /// One scale per tensor; e4m3 forward, e5m2 output gradient (torchao's default).
  Tensorwise,
  /// torchao's "rowwise": one scale per row of each GEMM operand along the
  /// contraction dimension (x per token, W per output feature in forward;
  /// re-cast from the high-precision x and W in backward along the
  /// backward GEMMs' contraction dimensions), scales rounded down to a power
  /// of two, e4m3 for everything, the output gradient included.
  Rowwise,
};

/// @brief The recipe called `name` ("tensorwise", "rowwise"); titan::Error
/// naming the valid ones for any other (torchao's "rowwise_with_gw_hp"
/// is not built).
Recipe recipe_from_name(const std::string& name);
/// The recipe's config name: "tensorwise" or "rowwise".
std::string to_string(Recipe recipe);

/// @brief Axiswise dynamic scaling: one scale per slice of x along `dim`
/// (scale = max(dtype) / amax over `dim`, rounded down to a power of two,
/// kept as a size-1 dimension: [rows, 1] for dim 1 of a matrix), data =
/// clamp(x · scale, ±max(dtype)) cast to `dtype`.
/// With `amax_group`, the amaxes are the max over the group (x is a TP
/// piece cut along `dim`: each slice is scaled as the whole slice).
Scaled scale_axiswise(const at::Tensor& x, at::ScalarType dtype, int64_t dim,
                      const dist::ProcessGroup* amax_group = nullptr);

/// @brief float8_linear with the rowwise recipe (x [..., in], w [out, in],
/// autograd-aware). The GEMMs run through at::_scaled_mm with per-row
/// scales on CUDA; ATen 2.11's CPU _scaled_mm takes only per-tensor scales,
/// so on the CPU they are emulated: the float8 operands upcast, multiplied
/// in fp32, and the result multiplied by the row and column dequantising
/// scales (powers of two: exact), which is the kernel's arithmetic.
at::Tensor float8_linear_rowwise(const at::Tensor& x, const at::Tensor& w);

/// @brief Empty when a float8 Linear can take an input of `input_shape`
/// ([..., in]) on CUDA; otherwise the one-line error it raises there.
/// cuBLASLt's float8 GEMMs need every dimension to be a multiple of 16, and
/// the token count (the product of the leading dimensions) is the forward's
/// M and grad_W's K. For [batch, seq, in] the message names the nearest
/// batch x seq that fit (one of the two changed).
std::string float8_token_count_error(at::IntArrayRef input_shape);

/// @brief What convert_to_float8_training does (torchtitan's
/// [quantize.linear.float8] options).
struct Float8Options {
  /// Layers kept in high precision: a name relative to root, or its last
  /// dotted parts (torchtitan's filter_fqns).
  std::vector<std::string> filter_fqns = {"output"};
  /// The TP group of sharded layers (call after tensor parallelism): the
  /// amaxes are taken over it. Must outlive the model.
  std::shared_ptr<dist::ProcessGroup> tp_group;
  /// torchao's enable_fsdp_float8_all_gather: when fsdp::fully_shard
  /// later shards a converted layer, its weight is cast to float8 e4m3 on
  /// each rank before the all-gather, with the scale of the whole weight
  /// (amax over the shard group), travels as 1 byte per element instead of
  /// param_dtype's 2 or 4, and goes into the matmul as it arrives (no
  /// second cast). Master weights and gradients are unchanged. Without
  /// fully_shard it changes nothing.
  bool fsdp_float8_all_gather = false;
  /// Scaling recipe. Rowwise does not take the float8 all-gather
  /// (titan::Error; torchao's all-gather is tensorwise only). Under TP
  /// (tp_group) rowwise reduces over the group only the amaxes taken along
  /// the dimension TP cut: a Rowwise-parallel layer's forward casts (x per
  /// token and W per output feature, along the split input features), a
  /// Colwise-parallel layer's grad_input casts (the output gradient per
  /// token and W per input feature, along the split output features); the
  /// rest are whole on every rank.
  Recipe recipe = Recipe::Tensorwise;
  /// Rowwise under TP: where TP placed each weight, by name relative to
  /// root (tp::tp_placements(root)), for the dimension it cut. Handed in
  /// rather than looked up so that float8 does not depend on tensor
  /// parallelism (async TP's float8 rings depend on float8).
  std::map<std::string, Placement> tp_placements;
  /// Emulated float8 GEMMs on GPUs (set_emulated_gemms, process-wide).
  bool emulate = false;
};

/// @brief Makes every ops::Linear under `root` compute with float8_linear,
/// except those whose name (relative to root) is in `skip_fqns` or ends
/// with "." + one of them (torchtitan's filter_fqns, default ["output"]),
/// and those with a dimension not divisible by 16 (what float8 tensor
/// cores need; torchtitan skips them too). Returns the names converted.
/// With `tp_group`, the converted layers take their amaxes over it (call
/// after tensor parallelism was applied; the group must outlive the model).
std::vector<std::string> convert_to_float8_training(torch::nn::Module& root, const Float8Options& options);

/// @brief How many Linears under `root` convert_to_float8_training has
/// converted (what the trainer's banner counts over a rank's stages).
int64_t count_float8_linears(torch::nn::Module& root);

/// @brief The same with filter_fqns `skip_fqns` and `tp_group`, the rest default.
std::vector<std::string> convert_to_float8_training(torch::nn::Module& root,
                                                    const std::vector<std::string>& skip_fqns = {"output"},
                                                    std::shared_ptr<dist::ProcessGroup> tp_group = nullptr);

/// @brief torchao's precompute_float8_dynamic_scale_for_fsdp: the float8
/// scales of every layer under `root` that gathers its weight in float8
/// (Float8Options::fsdp_float8_all_gather, after fully_shard), from the
/// global amaxes of the current weights, found with one all-reduce of all
/// those layers' amaxes together (per shard group, and per TP group)
/// instead of one per layer at each all-gather. Call it after every
/// optimizer step, on every rank (torchtitan's post-optimizer hook); the
/// all-gathers use these scales until the next call, so call it again
/// after anything else changes the weights (a checkpoint load after it).
/// Before the first call the layers find their scales per layer. Returns
/// the number of layers updated.
int64_t precompute_float8_dynamic_scale_for_fsdp(torch::nn::Module& root);

}  // namespace titan::float8
