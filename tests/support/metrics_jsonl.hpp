#pragma once
// Reading back what `titan train` logged: each step's loss as
// <dump_folder>/metrics.jsonl records it (full precision, rank 0).

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace titan::testing {

inline std::vector<double> jsonl_losses(const std::string& path) {
  std::vector<double> losses;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  return losses;
}

}  // namespace titan::testing
