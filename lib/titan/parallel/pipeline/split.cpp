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

std::vector<LayerRange> split_layers(int64_t n_layers, int64_t num_stages, int64_t input_weight,
                                     int64_t output_weight) {
  TITAN_CHECK(num_stages >= 1, "pipeline: need at least 1 stage, got ", num_stages);
  TITAN_CHECK(input_weight >= 0 && output_weight >= 0, "pipeline_parallel_first/last_stage_less_layers must be >= 0, got ",
              input_weight, " and ", output_weight);
  if (num_stages == 1) return {{0, n_layers}};
  const int64_t effective = n_layers + input_weight + output_weight;
  TITAN_CHECK(num_stages <= effective, "pipeline: ", num_stages, " stages but only ", effective,
              " layers to spread (the model's ", n_layers, " + pipeline_parallel_first_stage_less_layers ", input_weight,
              " + pipeline_parallel_last_stage_less_layers ", output_weight, ")");
  const int64_t per = effective / num_stages, extra = effective % num_stages;
  TITAN_CHECK(input_weight <= per, "pipeline_parallel_first_stage_less_layers ", input_weight,
              " exceeds the layers per stage (", per, ": ", n_layers, " layers + weights over ", num_stages, " stages)");
  TITAN_CHECK(output_weight <= per, "pipeline_parallel_last_stage_less_layers ", output_weight,
              " exceeds the layers per stage (", per, ": ", n_layers, " layers + weights over ", num_stages, " stages)");
  std::vector<int64_t> sizes;
  for (int64_t s = 0; s < num_stages; ++s) {
    int64_t n = per + (s < extra ? 1 : 0);
    if (s == 0) n -= input_weight;
    if (s == num_stages - 1) n -= output_weight;
    sizes.push_back(n);
  }
  return from_sizes(sizes);
}

int64_t stages_for_layers_per_stage(int64_t n_layers, int64_t layers_per_stage, int64_t input_weight,
                                    int64_t output_weight) {
  TITAN_CHECK(layers_per_stage >= 1, "pipeline_parallel_layers_per_stage must be >= 1, got ", layers_per_stage);
  return (n_layers + input_weight + output_weight + layers_per_stage - 1) / layers_per_stage;
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
    if (r.size() == 0) s += "none";
    else s += r.size() == 1 ? std::to_string(r.begin) : std::to_string(r.begin) + "-" + std::to_string(r.end - 1);
  }
  return s;
}

}  // namespace titan::pp
