#pragma once
/// @file
/// @brief What a fake rank ([comm] mode = "fake_backend") measured, and the
/// report it prints at the end: its memory beside `titan estimate`'s for
/// the same rank, its step time of compute alone, and the communication it
/// skipped in a step.

#include <cstdint>
#include <string>
#include <vector>

#include "titan/dist/comm_log.hpp"
#include "titan/estimate/memory_estimate.hpp"

namespace titan::train {

/// @brief One fake rank's run, as the trainer measured it.
struct FakeRankRun {
  int rank = 0;        ///< the rank played
  int world_size = 1;  ///< of the job played
  int pp_rank = 0;     ///< its pipeline rank (0 without PP)
  int64_t parameters = 0;       ///< bytes of the parameter shards it trains
  int64_t optimizer_state = 0;  ///< bytes of their AdamW moments
  /// The most bytes live tensors held during a step (steps after the
  /// first: the optimizer's state exists; step 1 when it is the only one).
  int64_t step_peak = 0;
  std::vector<int64_t> peak_steps;  ///< the steps step_peak covers
  /// The allocator's or the process's peak ("CUDA max reserved" or "CPU
  /// resident peak") and which.
  int64_t process_peak = 0;
  std::string process_peak_source;
  std::vector<double> step_seconds;  ///< of the steps step_peak covers
  /// Every collective and P2P op of the last step: what a real rank
  /// would have sent.
  std::vector<dist::CommRecord> last_step_comm;
};

/// @brief The closing report of a fake rank: its step peak against the
/// estimate's for its pipeline rank (the ratio printed), parameters and
/// optimizer state against the estimate's (these are exact in a real run
/// too), the median step time (compute only: nothing was waited for) and
/// the last step's skipped communication, per op and group.
std::string fake_rank_report(const FakeRankRun& run, const estimate::JobEstimate& estimate);

/// @brief The line the banner prints for a fake rank: which rank of which
/// world, and that its loss is not a result.
std::string fake_rank_banner_line(int rank, int world_size);

}  // namespace titan::train
