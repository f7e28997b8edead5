#pragma once
/// @file
/// @brief Peak matmul FLOP/s of accelerators, by the device name CUDA reports
/// ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", ...), the denominator
/// of MFU. Dense (no 2:4 sparsity) figures from NVIDIA's datasheets.

#include <c10/core/ScalarType.h>

#include <string>

namespace titan::metrics {

/// @brief A peak and where it came from.
struct PeakFlops {
  /// FLOP/s of one device (one rank).
  double flops = 0;
  /// The table row that matched ("H100 SXM"), or the fallback's.
  std::string matched;
  /// What the number is: "bf16 dense tensor core", "tf32 dense tensor
  /// core" or "fp32 (no tensor cores)".
  std::string precision;
  /// False when the name matched no row and the A100 fallback was used
  /// (torchtitan's choice); the caller should warn with `warning`.
  bool known = true;
  /// A one-line warning for the log when !known; empty otherwise.
  std::string warning;
};

/// @brief Peak FLOP/s of the GPU named `device_name` for matmuls in `dtype`.
///
/// - bf16 / fp16 (the mixed-precision training case): dense tensor-core peak.
/// - fp32 with `tf32` true (the run allows TF32 matmuls, e.g.
///   float32_matmul_precision "high"): dense TF32 tensor-core peak, half the
///   bf16 one on Ampere/Hopper/Blackwell.
/// - fp32 with `tf32` false (LibTorch's default: TF32 off for matmuls): the
///   plain fp32 (CUDA core) peak, since that is what the GEMMs can reach.
/// Unknown names fall back to A100 (as torchtitan does) with known = false.
/// Matching ignores case; the most specific row wins (H100 NVL before H100).
PeakFlops peak_flops_for_device(const std::string& device_name, at::ScalarType dtype,
                                bool tf32 = false);

/// @brief The dtype a training run's matmuls compute in, which is the one
/// its MFU peak must be looked up for (peak_flops_for_device's `dtype`).
///
/// With mixed precision (`mixed_precision`: FSDP, whose weights are
/// all-gathered in [training] mixed_precision_param, or autocast without
/// it, train/autocast.hpp) the matmuls run in that dtype ("bfloat16" by
/// default: the tensor-core peak); otherwise titan trains in fp32 (the
/// fp32 or TF32 peak). Passing fp32 whatever the run measured a bf16 run
/// against H100/H200's 67 TFLOP/s fp32 peak instead of 989: MFU ~15x too
/// high. Unknown names count as fp32 (the config schema admits only
/// "bfloat16" and "float32").
at::ScalarType compute_dtype_for_peak(bool mixed_precision, const std::string& mixed_precision_param);

}  // namespace titan::metrics
