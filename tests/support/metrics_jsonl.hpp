#pragma once
// Reading back what `titan train` logged: each step's loss as
// <dump_folder>/metrics.jsonl records it (full precision, rank 0).

#include <fstream>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace titan::testing {

/// The training steps' losses, in order (validation records, which have
/// no "loss", are skipped).
inline std::vector<double> jsonl_losses(const std::string& path) {
  std::vector<double> losses;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j.at("loss").get<double>());
  }
  return losses;
}

/// The validation records' losses by the step after which each ran.
inline std::vector<std::pair<int64_t, double>> jsonl_validation_losses(const std::string& path) {
  std::vector<std::pair<int64_t, double>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("validation_loss")) out.push_back({j.at("step").get<int64_t>(), j.at("validation_loss").get<double>()});
  }
  return out;
}

}  // namespace titan::testing
