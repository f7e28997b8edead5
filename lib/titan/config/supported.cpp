// The "not supported yet" list. When a chapter lands its feature, delete its
// line here (and the matching row in docs/config.md).
#include "titan/config/supported.hpp"

#include "titan/config/schema.hpp"
#include "titan/util/error.hpp"

namespace titan::config {
namespace {

// The option's current value as "= v" when `on`, else "".
std::string value_if(const JobConfig& cfg, const char* name, bool on) {
  return on ? "= " + to_toml_value(field(name).get(cfg)) : "";
}

}  // namespace

const std::vector<FeatureGate>& feature_gates() {
  static const std::vector<FeatureGate> gates = {
      {"profiling.enable_memory_snapshot",
       [](const JobConfig& c, int) {
         return value_if(c, "profiling.enable_memory_snapshot", c.profiling.enable_memory_snapshot);
       },
       "memory snapshots arrive with chapter 09", "--profiling.enable_memory_snapshot=false"},
      {"training.context_parallel_degree",
       [](const JobConfig& c, int) {
         return value_if(c, "training.context_parallel_degree", c.training.context_parallel_degree > 1);
       },
       "context parallelism arrives with chapter 11", "--training.context_parallel_degree 1"},
      {"model.norm_type",
       [](const JobConfig& c, int) { return value_if(c, "model.norm_type", c.model.norm_type != "rmsnorm"); },
       "only rmsnorm is implemented", "--model.norm_type rmsnorm"},
  };
  return gates;
}

std::vector<std::string> unsupported_features(const JobConfig& cfg, int world_size) {
  std::vector<std::string> out;
  for (const FeatureGate& g : feature_gates()) {
    const std::string setting = g.asks(cfg, world_size);
    if (setting.empty()) continue;
    out.push_back(field(g.option).display() + " " + setting + " (" + g.reason + "; for now use " + g.fix + ")");
  }
  return out;
}

void check_supported(const JobConfig& cfg, int world_size) {
  const std::vector<std::string> found = unsupported_features(cfg, world_size);
  if (found.empty()) return;
  std::string msg = "not supported yet: " + found.front();
  if (found.size() > 1) {
    msg += "; also not supported yet:";
    for (size_t i = 1; i < found.size(); ++i) {
      const std::string& s = found[i];
      msg += (i > 1 ? "," : "") + std::string(" ") + s.substr(0, s.find(" ("));
    }
  }
  throw Error(msg);
}

}  // namespace titan::config
