#pragma once
/// @file
/// @brief `titan predict --search`: the fastest layout of a job that fits
/// on N GPUs of a cluster, by predicting every layout of a grid — TP within
/// a node (1, 2, 4, 8), PP (1 to 32 ranks; 1F1B, interleaved 1F1B and ZBV),
/// CP for sequences of 32k tokens and more, FSDP over the rest or HSDP
/// with a node's worth of shards, AC none / per-op / full, and as much
/// gradient accumulation as the memory needs — at the config's global
/// batch and sequence. Each layout is read as the trainer would read it
/// (models::llama3::plan_layout: one it refuses is skipped) and kept when
/// the memory estimate fits the cluster's GPUs.

#include <cstdint>
#include <string>
#include <vector>

#include "titan/predict/step_prediction.hpp"

namespace titan::config {
struct JobConfig;
}

namespace titan::predict {

/// @brief One layout of the search and its prediction.
struct LayoutCandidate {
  std::string flags;  ///< its command-line overrides, "--training.tensor_parallel_degree 8 ..."
  StepPrediction prediction;
};

/// @brief What the search found.
struct SearchResult {
  int64_t tried = 0;        ///< layouts predicted
  int64_t refused = 0;      ///< layouts the trainer would refuse (skipped)
  int64_t over_memory = 0;  ///< layouts over the GPUs' memory
  std::vector<LayoutCandidate> best;  ///< the fastest, then the runner-up (fewer when fewer fit)
  double seconds = 0;       ///< the search's own wall time
};

/// @brief Searches the layouts of `cfg` (its model, sequence and global
/// batch) on `world` GPUs of `cluster`.
SearchResult search_layouts(const config::JobConfig& cfg, int64_t world, const Cluster& cluster);

/// @brief The winner's prediction, then the runner-up and why it loses
/// (the parts of the step where it spends more).
std::string format_search(const SearchResult& r);

}  // namespace titan::predict
