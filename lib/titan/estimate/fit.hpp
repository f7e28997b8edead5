#pragma once
/// @file
/// @brief Does a job fit the accelerator's memory, and if not, what layout
/// would: `titan estimate`'s last lines.
///
/// A job's per-rank state (fp32 weights, their gradients, AdamW's two
/// moments: 16 bytes a parameter) divides by the number of ranks it is
/// sharded over, whatever the mix of FSDP, TP and PP; activations divide by
/// TP and CP and multiply by the pipeline's micro-batches in flight. So a
/// config that is over budget is first tried with other degrees on the same
/// world size (other TP and PP degrees, full activation checkpointing),
/// and only when none fits, on twice, four times, ... the ranks (what the
/// 405B config at 64 ranks needs: 128).
#include <cstdint>
#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/estimate/memory_estimate.hpp"

namespace titan::estimate {

/// @brief H100's and H200-class budgets are quoted in GB; the estimate
/// counts GiB, as torchtitan's estimation.py does. 80 is the H100's.
inline constexpr double kDefaultDeviceMemoryGiB = 80.0;

/// @brief What fit_advice found.
struct FitAdvice {
  double budget_gib = kDefaultDeviceMemoryGiB;
  std::vector<int> over_budget_pp_ranks;  ///< pipeline ranks whose peak is above the budget (empty: it fits)
  double worst_peak_gib = 0;              ///< the job's highest per-rank peak, as written
  /// A layout that fits, as overrides of the config ("" when it fits as
  /// written or nothing was found), the world size it needs, its peak.
  std::string overrides;
  int64_t world_size = 0;
  double peak_gib = 0;
  bool found = false;
  /// What the named layout costs besides memory, when it changes FSDP's
  /// reduction or resharding under PP (more collectives per step); "" else.
  std::string cost;
};

/// @brief Checks `e` (the estimate of `cfg` on `world_size` ranks) against
/// `budget_gib` per rank and, when some rank is over, searches layouts that
/// fit: tensor_parallel_degree in {1, 2, 4, 8} (no more than a node),
/// pipeline_parallel_degree in {1, 2, 4, 8, 16}, the config's activation
/// checkpointing and then full, the rest FSDP, and under PP x FSDP
/// fsdp_reduce_scatter_per_microbatch alone and with
/// fsdp_reshard_after_forward "always"; on `world_size`, then up to
/// 64 times as many ranks. Of the layouts that fit on the fewest ranks, the
/// one closest to the config is taken: the fewest changed keys, then the
/// least PP, then the least TP.
FitAdvice fit_advice(const config::JobConfig& cfg, int64_t world_size, const JobEstimate& e, double budget_gib);

/// @brief The advice as lines for `titan estimate` ("fits in 80 GiB per
/// rank" or the ranks over it and the layout that would fit).
std::string format_fit_advice(const FitAdvice& a, int64_t world_size);

}  // namespace titan::estimate
