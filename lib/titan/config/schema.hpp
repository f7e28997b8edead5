#pragma once
/// @file
/// @brief The list of every config section and key, and of the aliases that
/// map other spellings onto them.
///
/// One table drives TOML loading, command-line overrides, printing,
/// validation of enumerated values and the reference in docs/config.md, so a
/// new option is one line in schema.cpp (plus its member in JobConfig).

#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/config/value.hpp"

namespace titan::config {

struct TorchtitanKey;

/// @brief "a boolean", "an integer", "a float", "a string", "a list of
/// strings": for messages.
const char* type_phrase(FieldType t);

/// @brief One option: where it lives in TOML and in JobConfig.
struct Field {
  std::string section;  ///< TOML section, e.g. "training"
  std::string key;      ///< key in the section, e.g. "seq_len"
  FieldType type;       ///< value type
  void* (*member)(JobConfig&);  ///< the member in a JobConfig (of `type`'s C++ type); null for a torchtitan-only key
  std::string help;     ///< one-line meaning, for docs/config.md
  std::vector<std::string> choices;  ///< allowed values of a string option (empty = any)
  /// For a torchtitan-only key (no JobConfig member; its value lives in
  /// JobConfig::torchtitan_only): its row of torchtitan_keys().
  const TorchtitanKey* torchtitan = nullptr;

  /// "section.key"
  std::string name() const { return section + "." + key; }
  /// "[section] key", the spelling used in error messages.
  std::string display() const { return "[" + section + "] " + key; }
  /// Reads this option from `c`.
  Value get(const JobConfig& c) const;
  /// Writes `v` (which must hold this option's type) into `c`.
  void set(JobConfig& c, const Value& v) const;
};

/// @brief Another name for an option: a current torchtitan (v0.2) name, an
/// older one, or an older torchtitan placement of a key that now lives elsewhere.
struct Alias {
  std::string section;  ///< alias section, e.g. "parallelism"
  std::string key;      ///< alias key, e.g. "tensor_parallel_degree"
  std::string target;   ///< canonical "section.key"
  bool invert = false;  ///< a boolean whose meaning is the target's negation
  std::string note;     ///< where the name comes from, for docs/config.md
};

/// @brief Every option, in the order config printouts use.
const std::vector<Field>& fields();

/// @brief The torchtitan v0.2 keys titan has no option for, as Fields (so
/// the TOML loader and the command line treat them as any option); built
/// from torchtitan_keys().
const std::vector<Field>& torchtitan_only_fields();

/// @brief Every alias (the one table of them; docs/config.md lists it).
const std::vector<Alias>& aliases();

/// @brief What a (section, key) pair names after alias resolution.
struct Resolved {
  const Field* field = nullptr;  ///< null when the name is unknown
  bool invert = false;           ///< the value is a negated boolean
  const Alias* alias = nullptr;  ///< the alias used, or null for a canonical name
};

/// @brief Looks up a canonical, alias or torchtitan-only name.
Resolved resolve(const std::string& section, const std::string& key);

/// @brief True when `section` has any canonical or alias key.
bool is_section(const std::string& section);

/// @brief Every section name, canonical and alias-only.
std::vector<std::string> section_names();

/// @brief Every key name valid in `section` (canonical and aliases).
std::vector<std::string> keys_of(const std::string& section);

/// @brief The canonical field named "section.key"; throws titan::Error if none.
const Field& field(const std::string& name);

/// @brief A value as TOML writes it: strings quoted and escaped, floats
/// with a '.' or exponent so they stay floats.
std::string to_toml_value(const Value& v);

/// @brief The Markdown tables of docs/config.md (options by section,
/// aliases, then every torchtitan v0.2 key with its status), generated from fields() and aliases(); `titan config
/// --markdown` prints it and a test checks the doc holds it.
std::string markdown_reference();

}  // namespace titan::config
