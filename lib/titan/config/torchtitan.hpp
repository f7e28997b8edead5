#pragma once
/// @file
/// @brief Every section and key of torchtitan v0.2's JobConfig
/// (torchtitan/config/job_config.py), and what titan does with each.
///
/// A torchtitan user's TOML file and command line must load unchanged, and
/// nothing in them may be dropped silently when it would change the
/// training. So each torchtitan key is one of: titan's own option under the
/// same name (honoured), an alias of one (aliases.cpp), or a key titan has
/// no option for: then it is accepted at torchtitan's default and any other
/// value is refused by check_supported() ("default only"), or, for keys
/// that only touch logging or Python plumbing, accepted with any value
/// ("cosmetic"). The status of a key titan knows is derived from resolve(),
/// so the table cannot disagree with the schema.

#include <optional>
#include <string>
#include <vector>

#include "titan/config/value.hpp"

namespace titan::config {

/// @brief What titan does with a torchtitan key.
enum class TorchtitanStatus {
  Honoured,     ///< titan's own option of the same name
  Alias,        ///< another name of titan's option (aliases.cpp)
  DefaultOnly,  ///< titan lacks the feature: only torchtitan's default passes check_supported()
  Cosmetic,     ///< no effect on training; any value accepted
};

/// @brief One key of torchtitan v0.2's JobConfig.
struct TorchtitanKey {
  std::string section;  ///< TOML section, dotted when nested: "quantize.linear.float8"
  std::string key;      ///< key in the section
  FieldType type;       ///< the value's type (lists of strings for Python list[str])
  /// torchtitan's default; empty when it is None (TOML cannot write None,
  /// so any value given asks for something).
  std::optional<Value> default_value;
  /// Titan has no option of this name: DefaultOnly or Cosmetic. Ignored
  /// (and derived from resolve()) when titan has one.
  TorchtitanStatus own_status;
  std::string note;  ///< why, for docs/config.md and the "not supported" line
  /// Further values titan honours although it has no option for them
  /// (e.g. custom_config_module naming a torchtitan module); null = none.
  bool (*also_accepts)(const Value& v) = nullptr;
  /// "" for a key of torchtitan's JobConfig itself; else the
  /// `custom_config_module` of torchtitan's that adds it
  /// ("torchtitan.components.ft.config", an experiment's job_config, ...).
  /// Known whichever module a config names: every one of them is
  /// torchtitan's own, and a key that would turn on what titan lacks is
  /// refused at any rate.
  std::string module;

  /// "section.key"
  std::string name() const { return section + "." + key; }
  /// "[section] key"
  std::string display() const { return "[" + section + "] " + key; }
  /// True when the value changes nothing titan cannot honour.
  bool accepts(const Value& v) const;
};

/// @brief Every key of torchtitan v0.2's JobConfig, in its section order,
/// then those its own custom config modules add (TorchtitanKey::module).
const std::vector<TorchtitanKey>& torchtitan_keys();

/// @brief The status of `k` now: Honoured / Alias when resolve() finds a
/// titan option for it, else k.own_status.
TorchtitanStatus status_of(const TorchtitanKey& k);

/// @brief "honoured", "alias", "default only", "cosmetic".
const char* status_phrase(TorchtitanStatus s);

/// @brief The "### torchtitan v0.2 keys" table of docs/config.md.
std::string torchtitan_markdown();

}  // namespace titan::config
