#pragma once
/// @file
/// @brief Weight initialisers LibTorch's C++ API lacks (torch.nn.init.trunc_normal_).

#include <ATen/ATen.h>

namespace titan::ops {

/// @brief Fills `tensor` in place from N(mean, std²) truncated to [a, b]
/// (absolute bounds, like torch.nn.init.trunc_normal_ whose defaults are
/// a = -2, b = 2 — not ±2σ).
///
/// Inverse-CDF sampling, the same steps as PyTorch's Python implementation:
/// draw u ~ U(2Φ(α)-1, 2Φ(β)-1), map through erfinv, scale by std·√2, shift by
/// mean, clamp. Using the same steps and the same generator means the C++ and
/// Python draws are identical for a given seed on the CPU. No autograd
/// recording. On the meta device it only checks the arguments.
void trunc_normal_(at::Tensor& tensor, double mean = 0.0, double std = 1.0, double a = -2.0,
                   double b = 2.0);

}  // namespace titan::ops
