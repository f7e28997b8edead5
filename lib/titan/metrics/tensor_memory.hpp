#pragma once
/// @file
/// @brief Bytes held by live tensors, exactly, on the CPU as on CUDA: what
/// a lesson needs to show that one layout keeps fewer activations than
/// another (chapter 04: sequence parallelism).
///
/// memory.hpp reads the process's resident set, which also holds the
/// allocator's cached pages, libraries and thread stacks; differences of a
/// few hundred KiB between two runs drown in it. CUDA has exact counters
/// (the caching allocator's allocated bytes); the CPU has none, so
/// track_cpu_tensor_memory() puts a counting wrapper in front of c10's CPU
/// allocator. Every CPU tensor allocated after that call is counted until
/// it is freed; tensors that already existed are not (their storage keeps
/// the allocator it was made with), which is what a difference between two
/// readings wants.

#include <c10/core/Device.h>

#include <cstdint>

namespace titan::metrics {

/// @brief A reading of tensor memory on one device.
struct TensorMemory {
  int64_t current_bytes = 0;  ///< held by live tensors now
  int64_t peak_bytes = 0;     ///< the most held at once since the last reset_tensor_memory_peak()
};

/// @brief Starts counting CPU tensor allocations (idempotent; call it before
/// the tensors you want to see are made). Not needed for CUDA.
void track_cpu_tensor_memory();

/// @brief Tensor memory on `device`: CUDA's caching-allocator "allocated"
/// counters, or on the CPU the counter of track_cpu_tensor_memory() (which
/// this call starts if nobody did, so the first CPU reading is 0).
TensorMemory tensor_memory(const c10::Device& device);

/// @brief Starts a new peak window on `device`: the peak becomes the
/// current value.
void reset_tensor_memory_peak(const c10::Device& device);

}  // namespace titan::metrics
