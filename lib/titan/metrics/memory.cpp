#include "titan/metrics/memory.hpp"

#include <fstream>
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

MemoryStats memory_stats(const c10::Device& device) {
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
#ifdef TITAN_HAS_CUDA
  if (device.is_cuda()) detail::cuda_reset_peak_memory(device.has_index() ? device.index() : 0);
#else
  (void)device;
#endif
}

std::string device_name(const c10::Device& device) {
#ifdef TITAN_HAS_CUDA
  if (device.is_cuda()) return detail::cuda_device_name(device.has_index() ? device.index() : 0);
#endif
  if (device.is_cpu()) return cpu_model_name();
  return device.str();
}

}  // namespace titan::metrics
