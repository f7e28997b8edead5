#pragma once
/// @file
/// @brief A measured peak for CPUs: CPUs have no datasheet number that the
/// GEMMs LibTorch runs can actually reach (it depends on the BLAS, the
/// vector units, the thread count and the clocks), so CPU MFU divides by
/// the best FLOP/s of a timed square GEMM instead, cached per machine.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace titan::metrics {

/// @brief How to calibrate.
struct CpuCalibrationOptions {
  /// n of the n×n·n×n GEMM (2·n³ FLOPs). 1024–2048 reach the BLAS's steady
  /// state on desktop and server CPUs; tests use smaller ones.
  int64_t size = 1024;
  /// Timed runs; the best one counts (the peak, not the average).
  int repeats = 5;
  /// Threads to measure with; 0 = at::get_num_threads(), the count the
  /// training process uses. Restored afterwards.
  int threads = 0;
  /// GEMM dtype: the run's compute dtype (fp32 for CPU training).
  at::ScalarType dtype = at::kFloat;
  /// JSON cache file; empty = default_cpu_peak_cache_path().
  std::string cache_path;
  /// Read and write the cache (false: always measure, write nothing).
  bool use_cache = true;
};

/// @brief A calibrated CPU peak.
struct CpuPeak {
  /// FLOP/s of the best timed GEMM.
  double flops = 0;
  /// "model name" from /proc/cpuinfo.
  std::string cpu_model;
  int threads = 0;
  /// True when read from the cache instead of measured now.
  bool from_cache = false;
  /// The cache file used (empty when none).
  std::string cache_path;
  /// The cache entry's key: "<cpu model>|threads=<t>|<dtype>|n=<size>".
  std::string key;
};

/// @brief The CPU peak for `options`: from the cache when an entry with the
/// same CPU model, thread count, dtype and size is there, else measured and
/// written to it (atomically; a corrupt or unwritable cache is ignored).
CpuPeak cpu_peak_flops(const CpuCalibrationOptions& options = {});

/// @brief Times `repeats` rounds of an n×n GEMM (after one warm-up) with the
/// current thread count and returns the best FLOP/s (2·n³ per GEMM).
double measure_gemm_flops(int64_t n, int repeats, at::ScalarType dtype = at::kFloat);

/// @brief The CPU's "model name" (/proc/cpuinfo), or "unknown cpu".
std::string cpu_model_name();

/// @brief $TITAN_CACHE_DIR/cpu_peak.json, else $XDG_CACHE_HOME/titan/...,
/// else ~/.cache/titan/cpu_peak.json; empty when no home is known.
std::string default_cpu_peak_cache_path();

}  // namespace titan::metrics
