// TOML files through toml++. toml++ keeps the source position of every key
// and value, which is what lets each error name file:line.
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "titan/config/load.hpp"
#include "titan/config/schema.hpp"
#include "titan/config/suggest.hpp"
#include "titan/util/error.hpp"

namespace titan::config {
namespace {

std::string where(const std::string& file, const toml::source_region& src) {
  return file + ":" + std::to_string(src.begin.line);
}

std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

// "string \"abc\"", "float 2.5", "array", ...: what the file holds, for a
// wrong-type message.
std::string describe(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string: return "string " + to_toml_value(Value{std::string(*v.as_string())});
    case toml::node_type::integer: return "integer " + std::to_string(v.as_integer()->get());
    case toml::node_type::floating_point: return "float " + to_toml_value(Value{v.as_floating_point()->get()});
    case toml::node_type::boolean: return std::string("boolean ") + (v.as_boolean()->get() ? "true" : "false");
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

// The node as the field's type; integers are welcome where floats are
// expected (lr = 1), as Python's TOML-to-dataclass path accepts them.
Value convert(const Field& f, const toml::node& v, bool invert, const std::string& name, const std::string& at) {
  switch (f.type) {
    case FieldType::Bool:
      if (auto b = v.as_boolean()) return invert ? !b->get() : b->get();
      break;
    case FieldType::Int:
      if (auto i = v.as_integer()) return static_cast<int64_t>(i->get());
      break;
    case FieldType::Float:
      if (auto d = v.as_floating_point()) return d->get();
      if (auto i = v.as_integer()) return static_cast<double>(i->get());
      break;
    case FieldType::String:
      if (auto s = v.as_string()) return std::string(s->get());
      break;
    case FieldType::StringList:
      if (auto a = v.as_array()) {
        StringList out;
        for (const toml::node& e : *a) {
          if (!e.is_string())
            throw Error(name + ": expected a list of strings, got an array holding " + describe(e) + " (" + at + ")");
          out.push_back(std::string(*e.as_string()));
        }
        return out;
      }
      break;
    case FieldType::StringLists:
      if (auto a = v.as_array()) {
        StringLists out;
        for (const toml::node& inner : *a) {
          const toml::array* list = inner.as_array();
          if (!list)
            throw Error(name + ": expected a list of lists of strings, got an array holding " + describe(inner) + " (" +
                        at + ")");
          StringList names;
          for (const toml::node& e : *list) {
            if (!e.is_string())
              throw Error(name + ": expected a list of lists of strings, got an inner array holding " + describe(e) +
                          " (" + at + ")");
            names.push_back(std::string(*e.as_string()));
          }
          out.push_back(std::move(names));
        }
        return out;
      }
      break;
  }
  throw Error(name + ": expected " + type_phrase(f.type) + ", got " + describe(v) + " (" + at + ")");
}

// An unknown key: prefer the same key in another section (older torchtitan
// configs put some keys where torchtitan 0.2 does not), else the closest key here.
std::string suggest_key(const std::string& section, const std::string& key) {
  for (const std::string& s : section_names())
    if (s != section && resolve(s, key).field) return "[" + s + "] " + key;
  const std::vector<std::string> here = keys_of(section);
  if (!here.empty()) return "[" + section + "] " + closest(key, here);
  // Only the start of a nested section ([quantize] of [quantize.linear.float8]).
  std::vector<std::string> nested;
  for (const std::string& s : section_names())
    if (s.rfind(section + ".", 0) == 0) nested.push_back("[" + s + "] " + closest(key, keys_of(s)));
  return closest(key, nested);
}

// A table's entries in file order (toml++ keeps them sorted by name), so the
// first error reported is the first in the file.
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> out;
  for (auto&& [k, v] : t) out.emplace_back(&k, &v);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return out;
}

// field -> (name as written, where): one option set twice in a file
// through an alias is ambiguous, so it is an error.
using Seen = std::map<const Field*, std::pair<std::string, std::string>>;

// A section, or the start of a nested one: "quantize" of [quantize.linear.float8].
bool opens_section(const std::string& name) {
  for (const std::string& s : section_names())
    if (s == name || s.rfind(name + ".", 0) == 0) return true;
  return false;
}

// The keys of one section (dotted when nested: [training.dataloader] is
// the table "dataloader" inside "training").
void apply_section(JobConfig& cfg, const toml::table& table, const std::string& section, const std::string& file,
                   Seen& seen) {
  for (auto [key_ptr, value_ptr] : in_file_order(table)) {
    const toml::key& key_node = *key_ptr;
    const toml::node& value = *value_ptr;
    const std::string key(key_node.str());
    if (value.is_table() && opens_section(section + "." + key)) {
      apply_section(cfg, *value.as_table(), section + "." + key, file, seen);
      continue;
    }
    const std::string at = where(file, key_node.source());
    const std::string written = "[" + section + "] " + key;
    Resolved r = resolve(section, key);
    TITAN_CHECK(r.field, "unknown config key ", written, " (", at, "); did you mean ", suggest_key(section, key), "?");
    auto [it, fresh] = seen.emplace(r.field, std::make_pair(written, at));
    TITAN_CHECK(fresh, written, " (", at, ") sets the same option as ", it->second.first, " (", it->second.second,
                "); keep one");
    r.field->set(cfg, convert(*r.field, value, r.invert, written, at));
    cfg.origin[r.field->name()] = at;
  }
}

void apply_table(JobConfig& cfg, const toml::table& root, const std::string& file) {
  Seen seen;

  for (auto [section_key_ptr, section_node_ptr] : in_file_order(root)) {
    const toml::key& section_key = *section_key_ptr;
    const toml::node& section_node = *section_node_ptr;
    const std::string section(section_key.str());
    const std::string section_at = where(file, section_key.source());
    if (!section_node.is_table()) {
      // `training = 5`, [[training]], or a key written before any header.
      TITAN_CHECK(!is_section(section), "[", section, "] must be a table (", section_at, ")");
      std::vector<std::string> all;
      for (const std::string& s : section_names())
        for (const std::string& k : keys_of(s)) {
          if (k == section)
            throw Error("key " + section + " is outside any section (" + section_at + "); did you mean [" + s +
                        "] " + k + "?");
          all.push_back(k);
        }
      std::string best = closest(section, all);
      for (const std::string& s : section_names())
        if (resolve(s, best).field) best = "[" + s + "] " + best;
      throw Error("key " + section + " is outside any section (" + section_at + "); did you mean " + best + "?");
    }
    TITAN_CHECK(opens_section(section), "unknown config section [", section, "] (", section_at,
                "); did you mean [", closest(section, section_names()), "]?");
    apply_section(cfg, *section_node.as_table(), section, file, seen);
  }
}

}  // namespace

void apply_toml_string(JobConfig& cfg, const std::string& text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw Error("malformed TOML in " + source_name + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                ": " + one_line(std::string(e.description())));
  }
  apply_table(cfg, root, source_name);
}

void apply_toml_file(JobConfig& cfg, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TITAN_CHECK(fs::exists(path, ec), "config file not found: ", path, " (given with --job.config_file)");
  TITAN_CHECK(!fs::is_directory(path, ec), "config file ", path, " is a directory, not a TOML file");
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in, "cannot read config file ", path);
  std::ostringstream text;
  text << in.rdbuf();
  apply_toml_string(cfg, text.str(), path);
}

}  // namespace titan::config
