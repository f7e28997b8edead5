#pragma once
/// @file
/// @brief Feature gating: options that parse and validate today but whose
/// feature arrives with a later chapter are refused, never ignored.

#include <string>
#include <vector>

#include "titan/config/job_config.hpp"

namespace titan::config {

/// @brief One feature not built yet, and the option setting that asks for it.
struct FeatureGate {
  std::string option;  ///< canonical "section.key"
  /// "" when `cfg` (trained on `world_size` ranks) does not ask for the
  /// feature; otherwise the offending setting, e.g. "= 4".
  std::string (*asks)(const JobConfig& cfg, int world_size);
  std::string reason;  ///< e.g. "tensor parallelism arrives with chapter 03"
  std::string fix;     ///< the override that turns it off, e.g. "--training.tensor_parallel_degree 1"
};

/// @brief Every gate: the one list to shorten as features land.
const std::vector<FeatureGate>& feature_gates();

/// @brief One line per gate that `cfg` trips, e.g. "[training]
/// tensor_parallel_degree = 4 (tensor parallelism arrives with chapter 03;
/// for now use --training.tensor_parallel_degree 1)".
std::vector<std::string> unsupported_features(const JobConfig& cfg, int world_size = 1);

/// @brief Throws titan::Error "not supported yet: <first>" (and names the
/// other tripped options) when `cfg` asks for a feature not built yet.
/// The trainer calls it at start; `world_size` resolves
/// data_parallel_shard_degree = -1.
void check_supported(const JobConfig& cfg, int world_size = 1);

}  // namespace titan::config
