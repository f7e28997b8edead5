#pragma once
/// @file
/// @brief Seeding and deterministic kernels: the same config must give the
/// same losses, so that a change in a loss curve means a change in the code.

#include <c10/core/Device.h>

#include <cstdint>

namespace titan::train {

/// @brief Seeds torch's CPU and CUDA generators with `seed` (model init and
/// any random op draw from them) and, with `deterministic`, asks ATen for
/// deterministic algorithms (an op that has none stops the job, or with
/// `warn_only` warns) and turns off cuDNN benchmarking and TF32 so that GPU
/// runs repeat too.
///
/// On the CPU, runs with the same seed and thread count are bit-identical
/// even without `deterministic`: LibTorch's CPU kernels reduce in a fixed
/// order for a fixed thread count.
void set_determinism(int64_t seed, bool deterministic, bool warn_only, const c10::Device& device);

/// @brief Turns TF32 off for cuBLAS's and cuDNN's fp32 GEMMs (a no-op for
/// CPU kernels): what deterministic runs and `titan verify`'s fp32
/// comparisons need, whatever the environment asked.
void use_full_fp32_matmuls();

}  // namespace titan::train
