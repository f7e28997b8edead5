#pragma once
/// @file
/// @brief The peak FLOP/s one rank's MFU divides by, resolved once for a
/// job: given by the caller, the datasheet figure of the GPU for the dtype
/// the matmuls run in (peak_flops.hpp), or on CPUs a timed GEMM
/// (cpu_peak.hpp) measured by one rank per node while the others wait and
/// scaled to the rank's share of the cores.

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <optional>
#include <string>

namespace titan::dist {
struct LaunchEnv;
class ProcessGroup;
}  // namespace titan::dist

namespace titan::metrics {

/// @brief A rank's peak and where it came from.
struct RankPeak {
  /// FLOP/s; 0 = no MFU.
  double flops = 0;
  /// For the banner, e.g. "NVIDIA H200 bf16 dense" or "measured CPU GEMM
  /// peak, 2 threads, cached".
  std::string source;
  /// The calibration cache entry behind `flops` (CPU runs, on the rank
  /// that measured), so that a run which beats the peak can invalidate
  /// it; empty otherwise.
  std::string cache_path, cache_key;
};

/// @brief What resolve_rank_peak needs to know about the job.
struct RankPeakInputs {
  /// The caller's figure (TrainerOptions::peak_flops); wins when set.
  std::optional<double> given;
  c10::Device device{c10::kCPU};
  /// The dtype the matmuls run in (compute_dtype_for_peak).
  at::ScalarType compute_dtype = at::kFloat;
  /// Ranks on this node: emulated CPU ranks share its cores.
  int local_rank = 0;
  int local_world_size = 1;
  /// The job's world group, or null on one process. On CPUs the
  /// calibration is then collective: local rank 0 of each node measures
  /// between two barriers, and every rank gets the job-wide maximum.
  std::shared_ptr<dist::ProcessGroup> group;
};

/// @brief Resolves the peak (collective on CPUs when `in.group` is set).
/// Call it after every rank joined the job and before anything of the job
/// computes (data loading, the model): a calibration that shares the cores
/// with the job's own work measures too low.
RankPeak resolve_rank_peak(const RankPeakInputs& in);

/// @brief The warning for a logged MFU above 100 %, which means the peak is
/// wrong (a calibration the cache's checks did not catch): invalidates the
/// cache entry behind `peak` so that the next run measures again. The
/// figure itself stays as measured (a clamped 100 % would hide a wrong
/// denominator).
std::string mfu_over_peak_warning(const RankPeak& peak, double mfu_pct, double achieved_flops);

}  // namespace titan::metrics
