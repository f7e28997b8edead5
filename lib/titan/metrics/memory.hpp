#pragma once
/// @file
/// @brief Memory of the training process for the log: the CPU resident set
/// (/proc/self/status), or the CUDA caching allocator's peaks.

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <utility>

namespace titan::metrics {

/// @brief One reading. Bytes are 0 where a source is missing.
struct MemoryStats {
  /// "cpu" or "cuda".
  std::string kind = "cpu";
  /// What the log line shows: CUDA max reserved (as torchtitan, since that
  /// is what can OOM), or the CPU peak resident set (VmHWM).
  int64_t peak_bytes = 0;
  /// peak_bytes as a percentage of capacity_bytes (0 when unknown).
  double peak_pct = 0;
  /// CUDA: largest allocated since the last reset. CPU: VmHWM.
  int64_t max_allocated_bytes = 0;
  /// CUDA: largest reserved since the last reset. CPU: VmHWM.
  int64_t max_reserved_bytes = 0;
  /// CPU: resident set now (VmRSS). CUDA: allocated now.
  int64_t current_bytes = 0;
  /// CPU: MemTotal. CUDA: the device's global memory.
  int64_t capacity_bytes = 0;
  /// CUDA allocator: cudaMalloc retries after freeing the cache (a sign of
  /// fragmentation) and OOMs; 0 on CPU.
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
};

/// @brief Memory of `device` for this process (CUDA only in CUDA builds;
/// any other device reads the CPU numbers). CUDA peaks are the log's: since
/// the last reset_peak_memory(), across phase resets.
MemoryStats memory_stats(const c10::Device& device);

/// @brief Starts a new peak window for the log: CUDA resets the allocator's
/// peaks (so each log line shows the peak since the previous one, as
/// torchtitan). On CPU VmHWM is the process's lifetime peak and is left alone.
void reset_peak_memory(const c10::Device& device);

/// @brief As memory_stats, but CUDA peaks are the allocator's own: since the
/// last reset of either kind (what a phase's peak reads).
MemoryStats allocator_memory_stats(const c10::Device& device);

/// @brief Starts a new peak window for one phase (a step's forward, say):
/// CUDA resets the allocator's peaks, having kept what they reached for the
/// log's window, so the log still reports its whole interval's peak.
void reset_phase_peak_memory(const c10::Device& device);

/// @brief The host's available memory (MemAvailable of /proc/meminfo) in
/// bytes; 0 where it cannot be read.
int64_t host_available_bytes();

/// @brief The device's name: CUDA's (e.g. "NVIDIA H100 80GB HBM3"), or the
/// CPU model for CPU devices.
std::string device_name(const c10::Device& device);

/// @brief A CUDA device's compute capability {major, minor} (9.0 for
/// Hopper); {0, 0} for other devices.
std::pair<int, int> compute_capability(const c10::Device& device);

namespace detail {
/// Reads "VmRSS", "VmHWM"... (kB) from a `/proc/<pid>/status` text; -1 if absent.
int64_t proc_status_kb(const std::string& status_text, const std::string& field);
}  // namespace detail

}  // namespace titan::metrics
