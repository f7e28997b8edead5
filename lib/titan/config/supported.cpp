// The "not supported yet" list. When a chapter lands its feature, delete its
// line here (and the matching row in docs/config.md).
#include "titan/config/supported.hpp"

#include "titan/config/schema.hpp"
#include "titan/config/torchtitan.hpp"
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
      {"model.norm_type",
       [](const JobConfig& c, int) { return value_if(c, "model.norm_type", c.model.norm_type != "rmsnorm"); },
       "only rmsnorm is implemented", "--model.norm_type rmsnorm"},
      {"activation_checkpoint.mode",
       [](const JobConfig& c, int) {
         return value_if(c, "activation_checkpoint.mode", c.activation_checkpoint.mode == "memory_budget");
       },
       "memory-budget activation checkpointing (torch.compile's min-cut) is not implemented",
       "--activation_checkpoint.mode selective"},
      {"model.converters",
       [](const JobConfig& c, int) {
         for (const std::string& s : c.model.converters)
           if (s != "float8" && s != "quantize.linear.float8") return value_if(c, "model.converters", true);
         return std::string();
       },
       "titan converts linear layers to float8 only", "--model.converters float8"},
  };
  return gates;
}

namespace {

// A section whose feature is switched off by its `enable` key
// ([compile], [fault_tolerance], [memory_estimation], [checkpoint], ...):
// torchtitan reads the section's other keys only when it is on, so they
// change nothing while it is off.
bool switched_off(const JobConfig& cfg, const std::string& section, const std::string& key) {
  if (key == "enable") return false;
  const Field* on = resolve(section, "enable").field;
  if (!on || on->type != FieldType::Bool) return false;
  return !std::get<bool>(on->get(cfg));
}

}  // namespace

std::vector<std::string> unsupported_features(const JobConfig& cfg, int world_size) {
  std::vector<std::string> out;
  for (const FeatureGate& g : feature_gates()) {
    const std::string setting = g.asks(cfg, world_size);
    if (setting.empty()) continue;
    out.push_back(field(g.option).display() + " " + setting + " (" + g.reason + "; for now use " + g.fix + ")");
  }
  // torchtitan keys titan has no feature for: the same gate, one per key,
  // open only at torchtitan's default.
  for (const auto& [name, value] : cfg.torchtitan_only) {
    const size_t dot = name.rfind('.');
    const Field* f = resolve(name.substr(0, dot), name.substr(dot + 1)).field;
    if (!f || !f->torchtitan || f->torchtitan->accepts(value)) continue;
    if (switched_off(cfg, f->section, f->key)) continue;
    const TorchtitanKey& k = *f->torchtitan;
    out.push_back(k.display() + " = " + to_toml_value(value) + " (torchtitan v0.2 option; titan lacks it: " + k.note +
                  "; for now " +
                  (k.default_value ? "use its default " + to_toml_value(*k.default_value) : std::string("leave it out")) +
                  ")");
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
