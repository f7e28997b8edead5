// The CUDA half of memory_snapshot.hpp (built only with TITAN_HAS_CUDA):
// torch's C++ entry points of torch.cuda.memory._record_memory_history and
// _snapshot(), the ones torchtitan's MemoryProfiler calls from Python.
#include <torch/csrc/cuda/memory_snapshot.h>

#include "titan/profiling/memory_snapshot.hpp"

namespace titan::profiling::detail {

void cuda_start_memory_history(const std::string& stacks) {
  // torchtitan records up to 100,000 allocator events (MEMORY_SNAPSHOT_MAX_ENTRIES),
  // with context "all" (alloc and free events and the allocator's state).
  // The stacks are cuda_history_stacks's: "python", frames of an interpreter
  // titan does not have, so none and no per-event unwinding, unless C++
  // stacks were asked for.
  torch::cuda::_record_memory_history(std::string("all"), std::string("all"), stacks, 100000);
}

std::string cuda_memory_snapshot_pickle() { return torch::cuda::_memory_snapshot_pickled(); }

}  // namespace titan::profiling::detail
