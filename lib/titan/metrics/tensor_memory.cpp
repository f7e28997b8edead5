#include "titan/metrics/tensor_memory.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "titan/metrics/memory.hpp"

namespace titan::metrics {
namespace {

// A c10 CPU allocator that hands every request to the one it replaced and
// remembers each live block's size. The DataPtr it returns has the data as
// its own context (so raw_allocate/raw_deallocate keep working); the inner
// allocator's deleter and context wait in the table until the block dies.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero bytes: nothing to count or free
    const c10::Device device = inner.device();
    const c10::DeleterFnPtr deleter = inner.get_deleter();
    void* context = inner.release_context();
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[data] = Block{static_cast<int64_t>(n), deleter, context};
      current_ += static_cast<int64_t>(n);
      peak_ = std::max(peak_, current_);
    }
    return {data, data, &CountingCpuAllocator::free_block, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::free_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  TensorMemory reading() {
    std::lock_guard<std::mutex> lock(mu_);
    return {current_, peak_};
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = current_;
  }

  // Set once, never destroyed: tensors are still freed after static
  // destructors have run, and their deleter needs the table.
  static CountingCpuAllocator* instance;

 private:
  struct Block {
    int64_t bytes;
    c10::DeleterFnPtr deleter;
    void* context;
  };

  static void free_block(void* data) {
    CountingCpuAllocator* self = instance;
    Block b{};
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->live_.find(data);
      if (it == self->live_.end()) return;  // cannot happen: only our blocks carry this deleter
      b = it->second;
      self->live_.erase(it);
      self->current_ -= b.bytes;
    }
    if (b.deleter) b.deleter(b.context);
  }

  c10::Allocator* inner_;
  std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

CountingCpuAllocator* CountingCpuAllocator::instance = nullptr;

std::once_flag install_once;

}  // namespace

void track_cpu_tensor_memory() {
  std::call_once(install_once, [] {
    CountingCpuAllocator::instance = new CountingCpuAllocator(c10::GetCPUAllocator());
    // The highest priority, so that no later registration replaces it.
    c10::SetCPUAllocator(CountingCpuAllocator::instance, /*priority=*/255);
  });
}

TensorMemory tensor_memory(const c10::Device& device) {
  if (device.is_cuda()) {
    const MemoryStats s = allocator_memory_stats(device);
    return {s.current_bytes, s.max_allocated_bytes};
  }
  track_cpu_tensor_memory();
  return CountingCpuAllocator::instance->reading();
}

void reset_tensor_memory_peak(const c10::Device& device) {
  if (device.is_cuda()) {
    reset_phase_peak_memory(device);  // the log keeps its interval's peak
    return;
  }
  track_cpu_tensor_memory();
  CountingCpuAllocator::instance->reset_peak();
}

}  // namespace titan::metrics
