#pragma once
/// @file
/// @brief Root-mean-square layer norm (Zhang & Sennrich 2019), as used by Llama.

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "titan/ops/param_module.hpp"

namespace titan::ops {

/// @brief y = x / sqrt(mean(x², last dim) + eps) * weight, written out op by op.
///
/// The statistics are computed in fp32 whatever the input dtype (bf16 sums of
/// squares lose too much), and the result is cast back to x's dtype before the
/// weight multiplies it. This is the reference the fused op is tested against.
at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps);

/// @brief Normalises the last dimension with a learnt per-channel scale
/// ("weight", initialised to ones), like torch.nn.RMSNorm.
///
/// forward() calls at::rms_norm — the op behind nn.RMSNorm, fused on CUDA — so
/// numerics match torchtitan's model, or titan's fused_rms_norm (the same
/// formula in one pass on the CPU); both equal rms_norm_reference to rounding.
class RMSNormImpl : public ParamModule {
 public:
  /// Registers weight [dim] with `options` (uninitialised; call
  /// reset_parameters()); `fused`: forward() calls fused_rms_norm.
  RMSNormImpl(int64_t dim, double eps, at::TensorOptions options = {}, bool fused = false);
  /// Normalises the last dimension of `x` (size dim).
  at::Tensor forward(const at::Tensor& x);
  /// Sets the weight to ones (nn.RMSNorm's reset_parameters).
  void reset_parameters();

  at::Tensor weight;  ///< [dim]
  int64_t dim;        ///< normalised size
  double eps;         ///< added to the mean square before the rsqrt
  bool fused;         ///< fused_rms_norm (ops/fused) instead of at::rms_norm

 protected:
  /// Re-reads `weight` after replace_parameter() swapped the tensor.
  void rebind_parameters() override { weight = parameters_["weight"]; }
};
TORCH_MODULE(RMSNorm);

}  // namespace titan::ops
