#include "titan/launch/options.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "titan/config/suggest.hpp"
#include "titan/util/error.hpp"

namespace titan {
namespace {

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// "a", "a or b", "a, b or c": the choices as a sentence says them.
std::string either(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return out;
}

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The names run_main owns or the parser answers itself; a program that
// registered one would never see it.
bool reserved(const std::string& name) {
  return name == "--help" || name == "--nproc" || name == "--master-port";
}

}  // namespace

OptionParser::OptionParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void OptionParser::add_option(Option option) {
  TITAN_CHECK(option.name.size() > 2 && option.name.rfind("--", 0) == 0 &&
                  option.name.find('=') == std::string::npos,
              program_, ": option name '", option.name, "' must look like --name");
  TITAN_CHECK(!reserved(option.name), program_, ": ", option.name, " is taken by every titan program");
  TITAN_CHECK(!find(option.name), program_, ": option ", option.name, " registered twice");
  options_.push_back(std::move(option));
}

const OptionParser::Option* OptionParser::find(const std::string& name) const {
  for (const Option& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

void OptionParser::add(const std::string& name, std::string* target, const std::string& help,
                       std::vector<std::string> choices) {
  Option o{name, choices.empty() ? "TEXT" : join(choices, "|"), help, *target, nullptr};
  o.set = [name, target, choices](const std::string& v) {
    bool allowed = choices.empty();
    for (const std::string& c : choices) allowed = allowed || v == c;
    TITAN_CHECK(allowed, name, " takes ", either(choices), ", got '", v, "'");
    *target = v;
  };
  add_option(std::move(o));
}

void OptionParser::add(const std::string& name, int64_t* target, const std::string& help) {
  Option o{name, "N", help, std::to_string(*target), nullptr};
  o.set = [name, target](const std::string& v) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    TITAN_CHECK(!v.empty() && *end == '\0' && errno != ERANGE, name, ": '", v, "' is not an integer");
    *target = static_cast<int64_t>(x);
  };
  add_option(std::move(o));
}

void OptionParser::add(const std::string& name, double* target, const std::string& help) {
  Option o{name, "X", help, format_double(*target), nullptr};
  o.set = [name, target](const std::string& v) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    // "inf" and "nan" parse, but no option means them.
    TITAN_CHECK(!v.empty() && *end == '\0' && std::isfinite(x), name, ": '", v, "' is not a number");
    *target = x;
  };
  add_option(std::move(o));
}

void OptionParser::flag(const std::string& name, bool* target, const std::string& help) {
  add_option({name, "", help, *target ? "on" : "", [target](const std::string&) { *target = true; }});
}

void OptionParser::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage().c_str(), stdout);
      std::fflush(stdout);
      std::exit(0);
    }
    TITAN_CHECK(arg.rfind("--", 0) == 0 && arg.size() > 2, "unexpected argument '", arg,
                "' (options start with --; try --help)");
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const Option* o = find(name);
    if (!o) {
      std::vector<std::string> names;
      for (const Option& known : options_) names.push_back(known.name);
      const std::string best = config::closest(name, names);
      // Only a near miss is worth naming; a distant "closest" misleads.
      const bool near = !best.empty() && config::edit_distance(name, best) <= std::max<size_t>(2, name.size() / 3);
      throw Error("unknown option '" + name + "'" + (near ? " (did you mean " + best + "?)" : "") +
                  " (try --help)");
    }
    if (o->metavar.empty()) {
      TITAN_CHECK(eq == std::string::npos, name, " takes no value (got '", arg, "')");
      o->set("");
      continue;
    }
    if (eq != std::string::npos) {
      o->set(arg.substr(eq + 1));
    } else {
      TITAN_CHECK(i + 1 < argc, name, " needs a value (", o->metavar, ")");
      o->set(argv[++i]);
    }
  }
}

std::string OptionParser::usage() const {
  struct Line {
    std::string left, right;
  };
  std::vector<Line> lines;
  for (const Option& o : options_) {
    std::string right = o.help;
    if (!o.default_text.empty()) right += (right.empty() ? "" : " ") + std::string("(default: ") + o.default_text + ")";
    lines.push_back({o.name + (o.metavar.empty() ? "" : " " + o.metavar), right});
  }
  lines.push_back({"--nproc N", "run as N local processes (emulated ranks)"});
  lines.push_back({"--master-port P", "rendezvous port for --nproc (default: a free port)"});
  lines.push_back({"-h, --help", "print this help and exit"});
  size_t width = 0;
  for (const Line& l : lines) width = std::max(width, l.left.size());

  std::string out = "usage: " + program_ + " [options]\n";
  if (!description_.empty()) out += description_ + "\n";
  out += "\noptions:\n";
  for (const Line& l : lines) {
    out += "  " + l.left + std::string(width - l.left.size() + 2, ' ') + l.right;
    // No trailing blanks on an option without help.
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  return out;
}

}  // namespace titan
