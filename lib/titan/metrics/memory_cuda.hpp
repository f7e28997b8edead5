#pragma once
/// @file
/// @brief The CUDA half of memory.hpp, defined in memory_cuda.cpp, which is
/// built only when TITAN_HAS_CUDA (so CPU builds need no CUDA headers).

#include <string>
#include <utility>

#include "titan/metrics/memory.hpp"

namespace titan::metrics::detail {

#ifdef TITAN_HAS_CUDA
/// Caching-allocator peaks and device capacity of GPU `index`.
MemoryStats cuda_memory_stats(int index);
/// Resets the allocator's peak counters of GPU `index`.
void cuda_reset_peak_memory(int index);
/// CUDA's name for GPU `index` (cudaDeviceProp::name).
std::string cuda_device_name(int index);
/// Compute capability {major, minor} of GPU `index`.
std::pair<int, int> cuda_compute_capability(int index);
#endif

}  // namespace titan::metrics::detail
