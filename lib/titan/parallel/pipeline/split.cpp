#include "titan/parallel/pipeline/split.hpp"

#include <cstdlib>

#include "titan/util/error.hpp"

namespace titan::pp {
namespace {

std::vector<LayerRange> from_sizes(const std::vector<int64_t>& sizes) {
  std::vector<LayerRange> out;
  int64_t begin = 0;
  for (int64_t n : sizes) {
    out.push_back({begin, begin + n});
    begin += n;
  }
  return out;
}

}  // namespace

std::vector<LayerRange> split_layers_evenly(int64_t n_layers, int64_t num_stages) {
  TITAN_CHECK(num_stages >= 1, "pipeline: need at least 1 stage, got ", num_stages);
  TITAN_CHECK(n_layers >= num_stages, "pipeline: the model has ", n_layers, " layers, fewer than the ", num_stages,
              " pipeline stages (every stage needs at least one layer)");
  std::vector<int64_t> sizes(static_cast<size_t>(num_stages), n_layers / num_stages);
  int64_t extra = n_layers % num_stages;
  // Middle stages first, then the first, then the last.
  for (int64_t s = 1; s + 1 < num_stages && extra > 0; ++s, --extra) ++sizes[static_cast<size_t>(s)];
  if (extra > 0) ++sizes.front(), --extra;
  if (extra > 0) ++sizes.back(), --extra;
  return from_sizes(sizes);
}

std::vector<LayerRange> split_layers_per_stage(int64_t n_layers, int64_t layers_per_stage) {
  TITAN_CHECK(layers_per_stage >= 1, "pipeline_parallel_layers_per_stage must be >= 1, got ", layers_per_stage);
  TITAN_CHECK(n_layers % layers_per_stage == 0, "pipeline_parallel_layers_per_stage ", layers_per_stage,
              " does not divide the model's ", n_layers, " layers");
  return from_sizes(std::vector<int64_t>(static_cast<size_t>(n_layers / layers_per_stage), layers_per_stage));
}

std::vector<LayerRange> split_layers_at(int64_t n_layers, const std::vector<std::string>& points) {
  std::vector<int64_t> sizes;
  int64_t prev = 0;
  for (const std::string& point : points) {
    std::string digits = point.rfind("layers.", 0) == 0 ? point.substr(7) : point;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str(), &end, 10);
    TITAN_CHECK(!digits.empty() && end && *end == '\0', "pipeline split point '", point,
                "' is not a layer (\"layers.N\" or N)");
    TITAN_CHECK(v > prev && v < n_layers, "pipeline split point '", point, "' must lie after ", prev,
                " and before the last layer ", n_layers, " (points strictly increasing, every stage non-empty)");
    sizes.push_back(v - prev);
    prev = v;
  }
  sizes.push_back(n_layers - prev);
  return from_sizes(sizes);
}

std::string describe_split(const std::vector<LayerRange>& ranges) {
  std::string s;
  for (const LayerRange& r : ranges) {
    if (!s.empty()) s += " | ";
    s += r.size() == 1 ? std::to_string(r.begin) : std::to_string(r.begin) + "-" + std::to_string(r.end - 1);
  }
  return s;
}

}  // namespace titan::pp
