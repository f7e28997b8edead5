#pragma once
/// @file
/// @brief Kineto traces of training steps on torchtitan's schedule: every
/// `profile_freq` steps, `warmup` steps with the profiler prepared, then
/// `active` steps recorded and written as one Chrome / Perfetto JSON trace
/// per rank, `<folder>/iteration_<step>/rank<r>_trace.json`.
///
/// The trace holds every ATen op (CPU; CUDA kernels on a GPU) and the named
/// ranges titan marks with TITAN_PROFILE_RANGE: the step's data loading,
/// forward, backward, gradient clipping and optimizer, FSDP's all-gathers
/// and reduce-scatters per unit, and every collective of titan's process
/// groups. Open it in https://ui.perfetto.dev or chrome://tracing.

#include <ATen/record_function.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/util/range.hpp"

namespace titan::profiling {

/// @brief torchtitan's profiling schedule ([profiling] profile_freq,
/// profiler_warmup, profiler_active): in every window of `freq` steps the
/// first freq − warmup − active wait, then `warmup` steps run with the
/// profiler prepared, then `active` steps are recorded. Steps are 1-based:
/// with freq 10, warmup 3, active 1, step 10 is recorded (steps 7-9 warm up).
struct ProfileSchedule {
  int64_t freq = 10;
  int64_t warmup = 3;
  int64_t active = 1;

  /// Throws titan::Error unless freq > 0, warmup >= 0, active >= 1 and
  /// warmup + active <= freq.
  void validate() const;
  /// Step `step` is recorded.
  bool is_active(int64_t step) const;
  /// Step `step` is the first of its window's warm-up (or of its active
  /// steps when warmup = 0).
  bool starts_warmup(int64_t step) const;
  /// The last recorded step of its window: the trace is written after it.
  bool ends_window(int64_t step) const;
};

/// @brief Runs the Kineto profiler over the steps the schedule picks.
///
/// Call step_begin(s) before and step_end(s) after training step s. Only
/// one TraceProfiler may be alive in a process (Kineto is process-wide).
class TraceProfiler {
 public:
  /// `folder`: where iteration_N/ folders go; `rank`: the trace's file
  /// name; `cuda`: record CUDA kernels too; `log` prints a line (may be empty).
  TraceProfiler(ProfileSchedule schedule, std::string folder, int rank, bool cuda,
                std::function<void(const std::string&)> log = {});
  ~TraceProfiler();
  TraceProfiler(const TraceProfiler&) = delete;
  TraceProfiler& operator=(const TraceProfiler&) = delete;

  void step_begin(int64_t step);
  void step_end(int64_t step);

  /// The trace files written so far on this rank.
  const std::vector<std::string>& traces() const { return traces_; }

 private:
  ProfileSchedule schedule_;
  std::string folder_;
  int rank_;
  bool cuda_;
  std::function<void(const std::string&)> log_;
  bool prepared_ = false, recording_ = false;
  std::unique_ptr<at::RecordFunction> step_range_;  ///< "ProfilerStep#N" around a recorded step
  std::vector<std::string> traces_;
};

}  // namespace titan::profiling
