#pragma once
/// @file
/// @brief A measured peak for CPUs: CPUs have no datasheet number that the
/// GEMMs LibTorch runs can actually reach (it depends on the BLAS, the
/// vector units, the thread count and the clocks), so CPU MFU divides by
/// the best FLOP/s of a timed square GEMM instead, cached per machine.
///
/// ## Why the figure must be measured alone
///
/// MFU = achieved / peak, so a peak measured too low gives MFU above 100 %.
/// The way to get one is to calibrate while something else computes on the
/// same cores: four emulated ranks on two cores that all calibrate at once
/// each see about half a core, and a cache that keeps that figure poisons
/// every later run (it once logged "mfu: 118%"). So:
///
/// 1. **One calibration at a time per machine.** cpu_peak_flops() holds an
///    exclusive flock(2) on `<cache>.lock` while it reads, measures and
///    writes, so concurrent jobs (and ranks) queue instead of competing; the
///    ones that queue find the fresh entry and do not measure.
/// 2. **Nothing of the job computes meanwhile.** The trainer calibrates
///    on one rank per node (local rank 0) between two barriers, before it
///    builds data loaders or the model; the other ranks wait in the barrier
///    (a blocking wait, no CPU) and receive the figure through a collective,
///    so they never measure and never need the cache.
/// 3. **Contention is detected, and a contended figure is never cached.**
///    Each timed round also reads the process's CPU time: a round in which
///    the measuring threads got less than `min_cpu_share` of
///    wall time × threads (they were preempted by another process) is not
///    "clean". A calibration without a majority of clean rounds is retried;
///    if it stays contended it is used for this run only (CpuPeak::clean
///    false, and the trainer says so), corrected to the rate per CPU-second
///    the threads got, and not written.
/// 4. **The cache is keyed and validated.** The key holds the CPU model, the
///    online core count, the thread count, the dtype, n and the LibTorch
///    version; an entry is re-measured when the file's schema is older (v1
///    files kept contended figures), the entry is older than
///    `max_age_days`, was measured with a smaller budget than asked, was
///    invalidated (invalidate_cpu_peak: a run achieved more than it), or is
///    inconsistent with its neighbours (more threads show a higher rate per
///    thread: the figure for fewer threads was measured under contention). A fresh clean figure drops the
///    neighbours it disagrees with, so two entries never keep each other
///    stale.
///
/// The measurement itself takes the best of many rounds (each >= ~50 ms,
/// at least `min_seconds` in all, after a warm-up) of a 1024³ GEMM, which is
/// at the BLAS's steady state and larger than the training GEMMs of the
/// small models run on CPUs, so those cannot legitimately beat it.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace titan::metrics {

/// @brief How to calibrate.
struct CpuCalibrationOptions {
  /// n of the n×n·n×n GEMM (2·n³ FLOPs). 1024–2048 reach the BLAS's steady
  /// state on desktop and server CPUs; tests use smaller ones.
  int64_t size = 1024;
  /// At least this many timed rounds; the best one counts (the peak, not
  /// the average).
  int repeats = 5;
  /// And at least this long in timed rounds in all (more rounds give
  /// turbo, the scheduler and page faults time to settle and the best round
  /// more chances); tests use a few milliseconds.
  double min_seconds = 0.5;
  /// Threads to measure with; 0 = at::get_num_threads(), the count the
  /// training process uses. Restored afterwards.
  int threads = 0;
  /// GEMM dtype: the run's compute dtype (fp32 for CPU training).
  at::ScalarType dtype = at::kFloat;
  /// JSON cache file; empty = default_cpu_peak_cache_path().
  std::string cache_path;
  /// Read and write the cache (false: always measure, write nothing).
  bool use_cache = true;
  /// A round is clean when the process got at least this share of
  /// wall time × threads of CPU time (1.0 = never preempted).
  double min_cpu_share = 0.9;
  /// Measurements tried before a contended figure is accepted (uncached;
  /// then the best round's FLOPs per CPU-second × threads is used, an
  /// estimate of the uncontended rate, so the figure is not the low one).
  int attempts = 3;
  /// Cached entries older than this are re-measured (<= 0: no limit).
  double max_age_days = 30;
};

/// @brief A calibrated CPU peak.
struct CpuPeak {
  /// FLOP/s of the best timed GEMM.
  double flops = 0;
  /// "model name" from /proc/cpuinfo.
  std::string cpu_model;
  int threads = 0;
  /// The library whose GEMM was timed: "onednn" (fp32 under [model]
  /// cpu_matmul's oneDNN) or "aten".
  std::string gemm = "aten";
  /// True when read from the cache instead of measured now.
  bool from_cache = false;
  /// True when measured without contention (always for cached entries:
  /// only clean figures are written). False: this run's figure may be low
  /// and MFU overstated; it was not cached.
  bool clean = true;
  /// CPU time / (wall × threads) of the best round (1 = never preempted).
  double cpu_share = 1;
  /// The cache file used (empty when none).
  std::string cache_path;
  /// The cache entry's key:
  /// "<cpu model>|cores=<c>|threads=<t>|<dtype>[|gemm=<library>]|n=<size>|torch=<version>"
  /// (the library for fp32).
  std::string key;
  /// Why it was measured rather than read ("no entry", "stale: ..."),
  /// empty when read from the cache or when there is no cache.
  std::string remeasure_reason;
};

/// @brief The library whose GEMM a CPU peak in `dtype` times: the one the
/// model's fp32 Linear layers run ("onednn" or "aten",
/// ops/gemm/cpu_matmul.hpp), so that MFU divides by that library's rate;
/// "aten" for other dtypes.
std::string cpu_peak_gemm(at::ScalarType dtype);

/// @brief The CPU peak for `options`: from the cache when a valid entry with
/// the same key is there, else measured (under the cache's lock) and, when
/// the measurement was clean, written to it (atomically; a corrupt or
/// unwritable cache is ignored).
CpuPeak cpu_peak_flops(const CpuCalibrationOptions& options = {});

/// @brief One GEMM measurement.
struct GemmMeasurement {
  double flops = 0;       ///< best round's FLOP/s
  double cpu_share = 0;   ///< best round's CPU time / (wall × threads)
  /// Best of all rounds of FLOPs / (CPU time / threads): the rate the
  /// threads reached while they were running, i.e. corrected for preemption.
  double cpu_flops = 0;
  int rounds = 0;         ///< timed rounds
  int clean_rounds = 0;   ///< rounds with cpu_share >= the threshold
  bool slow = false;      ///< one GEMM took over kSlowGemmSeconds: timed within a budget
};

/// @brief A GEMM slower than this (seconds for one n×n) is timed for about
/// kSlowGemmBudgetSeconds in all, not `repeats` rounds, and not attempted
/// again: bf16 on a CPU without AVX-512 runs ATen's reference path (about
/// 3 s for 1024³ on 2 cores under ONEDNN_MAX_CPU_ISA=AVX2), whose peak
/// matters as little as a job on it would run fast.
inline constexpr double kSlowGemmSeconds = 0.25;
inline constexpr double kSlowGemmBudgetSeconds = 2.0;

/// @brief Times rounds of an n×n GEMM (after a warm-up) with the current
/// thread count until at least `repeats` rounds and `min_seconds` are done;
/// returns the best FLOP/s (2·n³ per GEMM) among the clean rounds (CPU
/// share >= `min_cpu_share`), or among all rounds when none was clean.
GemmMeasurement measure_gemm(int64_t n, int repeats, double min_seconds, at::ScalarType dtype = at::kFloat,
                             double min_cpu_share = 0.9);

/// @brief measure_gemm's best FLOP/s (kept for callers that want a number).
double measure_gemm_flops(int64_t n, int repeats, at::ScalarType dtype = at::kFloat);

/// @brief Marks the cache entry `key` invalid (with `reason`), so that the
/// next cpu_peak_flops() for it re-measures. The trainer calls it when a run
/// achieved more FLOP/s than the peak: proof that the figure was low.
/// Returns false when there was no such entry or the file could not be written.
bool invalidate_cpu_peak(const std::string& cache_path, const std::string& key, const std::string& reason);

/// @brief The CPU's "model name" (/proc/cpuinfo), or "unknown cpu".
std::string cpu_model_name();

/// @brief $TITAN_CPU_PEAK_CACHE (a file path, for tests and for keeping
/// calibrations apart), else $TITAN_CACHE_DIR/cpu_peak.json, else
/// $XDG_CACHE_HOME/titan/cpu_peak.json, else ~/.cache/titan/cpu_peak.json;
/// empty when no home is known.
std::string default_cpu_peak_cache_path();

/// @brief The schema version cpu_peak_flops() writes; files with another
/// one are re-measured entry by entry.
inline constexpr int kCpuPeakCacheVersion = 2;

}  // namespace titan::metrics
