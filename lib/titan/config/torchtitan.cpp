// What titan does with each torchtitan key, and the doc table of it.
#include "titan/config/torchtitan.hpp"

#include <sstream>

#include "titan/config/schema.hpp"

namespace titan::config {

bool TorchtitanKey::accepts(const Value& v) const {
  if (own_status == TorchtitanStatus::Cosmetic) return true;
  if (default_value && v == *default_value) return true;
  return also_accepts && also_accepts(v);
}

TorchtitanStatus status_of(const TorchtitanKey& k) {
  const Resolved r = resolve(k.section, k.key);
  if (r.field && r.field->member) return r.alias ? TorchtitanStatus::Alias : TorchtitanStatus::Honoured;
  return k.own_status == TorchtitanStatus::Honoured ? TorchtitanStatus::DefaultOnly : k.own_status;
}

const char* status_phrase(TorchtitanStatus s) {
  switch (s) {
    case TorchtitanStatus::Honoured: return "honoured";
    case TorchtitanStatus::Alias: return "alias";
    case TorchtitanStatus::DefaultOnly: return "default only";
    case TorchtitanStatus::Cosmetic: return "cosmetic";
  }
  return "?";
}

std::string torchtitan_markdown() {
  std::ostringstream os;
  os << "### torchtitan v0.2 keys\n\n"
     << "Every key of torchtitan 0.2.2's JobConfig, then the keys torchtitan's own `custom_config_module`s "
        "(v0.2.0-v0.2.2: fault tolerance, its experiments, FLUX) add, known whichever module a config names. "
        "*honoured*: titan's option of the same name; *alias*: "
        "another name of the titan option shown; *default only*: titan lacks the feature, the key loads and "
        "`titan train` refuses any value but torchtitan's default (\"not supported\"); *cosmetic*: no effect on "
        "training, any value loads.\n\n"
     << "| torchtitan key | torchtitan default | status | titan |\n| --- | --- | --- | --- |\n";
  for (const TorchtitanKey& k : torchtitan_keys()) {
    const TorchtitanStatus st = status_of(k);
    std::string titan;
    if (st == TorchtitanStatus::Honoured || st == TorchtitanStatus::Alias) {
      const Resolved r = resolve(k.section, k.key);
      titan = std::string(r.invert ? "not " : "") + "`" + r.field->display() + "`";
    } else {
      titan = k.note;
    }
    os << "| `" << k.display() << "` | " << (k.default_value ? "`" + to_toml_value(*k.default_value) + "`" : "None")
       << " | " << status_phrase(st) << " | " << titan << " |\n";
  }
  return os.str();
}

}  // namespace titan::config
