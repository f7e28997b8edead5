// CUDA memory readings for memory.hpp; compiled only in CUDA builds.
#include "titan/metrics/memory_cuda.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

namespace titan::metrics::detail {

MemoryStats cuda_memory_stats(int index) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto dev = static_cast<c10::DeviceIndex>(index);
  const alloc::DeviceStats stats = alloc::getDeviceStats(dev);
  // AGGREGATE sums the small (< 1 MiB) and large block pools.
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  MemoryStats s;
  s.kind = "cuda";
  s.max_allocated_bytes = stats.allocated_bytes[agg].peak;
  s.max_reserved_bytes = stats.reserved_bytes[agg].peak;
  s.current_bytes = stats.allocated_bytes[agg].current;
  s.peak_bytes = s.max_reserved_bytes;
  s.num_alloc_retries = stats.num_alloc_retries;
  s.num_ooms = stats.num_ooms;
  s.capacity_bytes = static_cast<int64_t>(at::cuda::getDeviceProperties(dev)->totalGlobalMem);
  return s;
}

void cuda_reset_peak_memory(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

std::string cuda_device_name(int index) {
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))->name;
}

std::pair<int, int> cuda_compute_capability(int index) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
  return {p->major, p->minor};
}

}  // namespace titan::metrics::detail
