#include "titan/metrics/memory.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "titan/metrics/cpu_peak.hpp"
#include "titan/metrics/memory_cuda.hpp"

namespace titan::metrics {

namespace {

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

MemoryStats cpu_memory_stats() {
  MemoryStats s;
  s.kind = "cpu";
  const std::string status = slurp("/proc/self/status");
  const int64_t rss = detail::proc_status_kb(status, "VmRSS");
  const int64_t hwm = detail::proc_status_kb(status, "VmHWM");
  const int64_t total = detail::proc_status_kb(slurp("/proc/meminfo"), "MemTotal");
  s.current_bytes = rss > 0 ? rss * 1024 : 0;
  s.peak_bytes = hwm > 0 ? hwm * 1024 : s.current_bytes;
  s.max_allocated_bytes = s.max_reserved_bytes = s.peak_bytes;
  s.capacity_bytes = total > 0 ? total * 1024 : 0;
  return s;
}

}  // namespace

namespace detail {

int64_t proc_status_kb(const std::string& text, const std::string& field) {
  std::istringstream in(text);
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream v(line.substr(prefix.size()));
    int64_t kb = -1;
    if (v >> kb) return kb;
    return -1;
  }
  return -1;
}

}  // namespace detail

namespace {

// The CUDA peaks the log's window had reached when a phase reset the
// allocator's, per device index; cleared by the log's own reset.
struct KeptPeaks {
  int64_t allocated = 0, reserved = 0;
};
std::mutex kept_mu;
std::map<int, KeptPeaks> kept_peaks;

int index_of(const c10::Device& device) { return device.has_index() ? device.index() : 0; }

}  // namespace

MemoryStats memory_stats(const c10::Device& device) {
  MemoryStats s = allocator_memory_stats(device);
  if (device.is_cuda()) {
    std::lock_guard<std::mutex> lock(kept_mu);
    auto it = kept_peaks.find(index_of(device));
    if (it != kept_peaks.end()) {
      s.max_allocated_bytes = std::max(s.max_allocated_bytes, it->second.allocated);
      s.max_reserved_bytes = std::max(s.max_reserved_bytes, it->second.reserved);
      s.peak_bytes = s.max_reserved_bytes;
      if (s.capacity_bytes > 0) s.peak_pct = 100.0 * static_cast<double>(s.peak_bytes) / s.capacity_bytes;
    }
  }
  return s;
}

void reset_phase_peak_memory(const c10::Device& device) {
  if (!device.is_cuda()) return;
  const MemoryStats now = memory_stats(device);  // the log's window so far
  {
    std::lock_guard<std::mutex> lock(kept_mu);
    kept_peaks[index_of(device)] = {now.max_allocated_bytes, now.max_reserved_bytes};
  }
#ifdef TITAN_HAS_CUDA
  detail::cuda_reset_peak_memory(index_of(device));
#endif
}

MemoryStats allocator_memory_stats(const c10::Device& device) {
  MemoryStats s;
#ifdef TITAN_HAS_CUDA
  if (device.is_cuda()) {
    s = detail::cuda_memory_stats(device.has_index() ? device.index() : 0);
  } else {
    s = cpu_memory_stats();
  }
#else
  (void)device;
  s = cpu_memory_stats();
#endif
  if (s.capacity_bytes > 0) s.peak_pct = 100.0 * static_cast<double>(s.peak_bytes) / s.capacity_bytes;
  return s;
}

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) {
    std::lock_guard<std::mutex> lock(kept_mu);
    kept_peaks.erase(index_of(device));
  }
#ifdef TITAN_HAS_CUDA
  if (device.is_cuda()) detail::cuda_reset_peak_memory(device.has_index() ? device.index() : 0);
#else
  (void)device;
#endif
}

int64_t host_available_bytes() {
  const int64_t kb = detail::proc_status_kb(slurp("/proc/meminfo"), "MemAvailable");
  return kb > 0 ? kb * 1024 : 0;
}

std::pair<int, int> compute_capability(const c10::Device& device) {
#ifdef TITAN_HAS_CUDA
  if (device.is_cuda()) return detail::cuda_compute_capability(device.has_index() ? device.index() : 0);
#endif
  (void)device;
  return {0, 0};
}

std::string device_name(const c10::Device& device) {
#ifdef TITAN_HAS_CUDA
  if (device.is_cuda()) return detail::cuda_device_name(device.has_index() ? device.index() : 0);
#endif
  if (device.is_cpu()) return cpu_model_name();
  return device.str();
}

}  // namespace titan::metrics
