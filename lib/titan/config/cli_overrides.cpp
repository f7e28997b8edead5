// Command-line overrides, and the defaults < file < command line pipeline.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>

#include <nlohmann/json.hpp>

#include "titan/config/load.hpp"
#include "titan/config/schema.hpp"
#include "titan/config/suggest.hpp"
#include "titan/config/validate.hpp"
#include "titan/util/error.hpp"

namespace titan::config {
namespace {

const char* kCommandLine = "command line";

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::optional<bool> parse_bool(const std::string& s) {
  const std::string l = lower(s);
  if (l == "true" || l == "1") return true;
  if (l == "false" || l == "0") return false;
  return std::nullopt;
}

// "a,b,c" cut at `separator`; "" is the empty list.
StringList split(const std::string& text, char separator) {
  StringList out;
  size_t start = 0;
  while (!text.empty()) {
    const size_t at = text.find(separator, start);
    out.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return out;
}

// Text to the field's type, strictly: "12abc" is not an integer.
Value convert(const Field& f, const std::string& text, bool invert, const std::string& flag) {
  auto fail = [&]() -> Error {
    return Error(f.display() + ": expected " + type_phrase(f.type) + ", got " + to_toml_value(Value{text}) + " (" +
                 kCommandLine + " " + flag + ")");
  };
  switch (f.type) {
    case FieldType::Bool: {
      auto b = parse_bool(text);
      if (!b) throw fail();
      return invert ? !*b : *b;
    }
    case FieldType::Int: {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) throw fail();
      return static_cast<int64_t>(v);
    }
    case FieldType::Float: {
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) throw fail();
      return v;
    }
    case FieldType::String: return text;
    case FieldType::StringList: return split(text, ',');  // torchtitan's command line: a,b,c
    case FieldType::StringLists: {
      // Lists separated by ';', names by ','; or the Python literal a
      // torchtitan user writes ([['a', 'b'], ['c']]). "" is the empty list.
      StringLists out;
      if (!text.empty() && text.front() == '[') {
        std::string json = text;
        for (char& ch : json) ch = ch == '\'' ? '"' : ch;
        const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
        if (!parsed.is_array()) throw fail();
        for (const nlohmann::json& inner : parsed) {
          if (!inner.is_array()) throw fail();
          StringList names;
          for (const nlohmann::json& name : inner) {
            if (!name.is_string()) throw fail();
            names.push_back(name.get<std::string>());
          }
          out.push_back(std::move(names));
        }
        return out;
      }
      for (const std::string& part : split(text, ';')) out.push_back(split(part, ','));
      return out;
    }
  }
  throw fail();
}

// "--section.key" names an option when the part before the first '.' has
// no '=' (a value such as --foo=a.b is not one).
bool is_config_flag(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return false;
  const size_t dot = arg.find('.');
  const size_t eq = arg.find('=');
  return dot != std::string::npos && (eq == std::string::npos || dot < eq) && dot > 2;
}

std::vector<std::string> all_option_names() {
  std::vector<std::string> names;
  for (const std::string& s : section_names())
    for (const std::string& k : keys_of(s)) names.push_back(s + "." + k);
  return names;
}

}  // namespace

void apply_overrides(JobConfig& cfg, const std::vector<std::string>& args, std::vector<std::string>* unparsed) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!is_config_flag(arg)) {
      TITAN_CHECK(unparsed, "unexpected argument '", arg, "' (config options look like --section.key value)");
      unparsed->push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string flag = "--" + name;
    // Nested sections have dots too (--training.dataloader.num_workers):
    // the key is after the last one.
    const size_t dot = name.rfind('.');
    Resolved r = resolve(name.substr(0, dot), name.substr(dot + 1));
    TITAN_CHECK(r.field, "unknown option ", flag, " (", kCommandLine, "); did you mean --",
                closest(name, all_option_names()), "?");

    std::string text;
    if (eq != std::string::npos) {
      text = arg.substr(eq + 1);
    } else if (r.field->type == FieldType::Bool) {
      // A bare flag means true; an explicit true/false may follow.
      text = "true";
      if (i + 1 < args.size() && parse_bool(args[i + 1]) && !is_config_flag(args[i + 1])) text = args[++i];
    } else {
      // The next word is the value even when it starts with '-' (-1).
      TITAN_CHECK(i + 1 < args.size(), flag, " needs a value (", type_phrase(r.field->type), ")");
      text = args[++i];
    }
    r.field->set(cfg, convert(*r.field, text, r.invert, flag));
    cfg.origin[r.field->name()] = std::string(kCommandLine) + " " + flag;
  }
}

void normalize(JobConfig& cfg) {
  // torchtitan turns float8 on by naming its converter.
  for (const std::string& s : cfg.model.converters)
    if (s == "float8" || s == "quantize.linear.float8") cfg.float8.enable_float8_linear = true;
  for (const Field& f : fields()) {
    if (f.choices.empty()) continue;
    const std::string v = std::get<std::string>(f.get(cfg));
    for (const std::string& c : f.choices)
      if (lower(c) == lower(v)) f.set(cfg, Value{c});
  }
}

JobConfig parse_job_config(const std::vector<std::string>& args, std::vector<std::string>* unparsed) {
  // The file is read first wherever --job.config_file stands, so that every
  // other override beats it.
  std::vector<std::string> rest;
  std::optional<std::string> file;
  const std::string opt = "--job.config_file";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == opt) {
      TITAN_CHECK(i + 1 < args.size(), opt, " needs a value (a TOML file)");
      file = args[++i];
    } else if (args[i].compare(0, opt.size() + 1, opt + "=") == 0) {
      file = args[i].substr(opt.size() + 1);
    } else {
      rest.push_back(args[i]);
    }
  }
  JobConfig cfg;
  if (file) {
    TITAN_CHECK(!file->empty(), opt, " needs a value (a TOML file)");
    apply_toml_file(cfg, *file);
    cfg.job.config_file = *file;
    cfg.origin["job.config_file"] = std::string(kCommandLine) + " " + opt;
  }
  apply_overrides(cfg, rest, unparsed);
  normalize(cfg);
  validate(cfg);
  return cfg;
}

JobConfig parse_job_config(int argc, char** argv, int first, std::vector<std::string>* unparsed) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return parse_job_config(args, unparsed);
}

JobConfig load_job_config(const std::string& path) {
  return parse_job_config(std::vector<std::string>{"--job.config_file", path});
}

}  // namespace titan::config
