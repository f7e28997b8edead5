#pragma once
/// @file
/// @brief Range and value checks of a JobConfig, and the data-parallel batch
/// arithmetic that follows from it.

#include <cstdint>

#include "titan/config/job_config.hpp"

namespace titan::config {

/// @brief Checks every value: positive sizes and rates, parallel degrees
/// >= 1 (data_parallel_shard_degree also -1), enumerated values among their
/// choices, finite floats. Throws titan::Error with one line naming the
/// option, its value, what is allowed and where the value came from.
void validate(const JobConfig& cfg);

/// @brief How one optimizer step is made of micro-batches.
struct BatchPlan {
  int64_t local_batch = 0;         ///< samples per micro-batch per rank ([training] batch_size)
  int64_t global_batch = 0;        ///< samples per optimizer step over all ranks
  int64_t accumulation_steps = 0;  ///< micro-batches per rank per step
  int64_t dp_degree = 0;           ///< data-parallel ranks (replicate × shard)
};

/// @brief Derives the batch plan for `dp_degree` data-parallel ranks:
/// global = batch_size × dp × accumulation, where whichever of
/// global_batch_size and gradient_accumulation_steps is set determines the
/// other (neither: accumulation 1). Throws titan::Error when global is not a
/// multiple of batch_size × dp or the two disagree.
BatchPlan plan_batches(const JobConfig& cfg, int64_t dp_degree);

}  // namespace titan::config
