#pragma once
/// @file
/// @brief OptionParser: the command-line options of chapter, lab and bench
/// programs — `--name value`, `--name=value` and flags, a generated
/// `--help` with the defaults, and one-line errors that name the option.
///
/// ```
/// Options o;                                     // its members hold the defaults
/// OptionParser p("ch01_data_parallel", "DDP against a single-process reference");
/// p.add("--dtype", &o.dtype, "parameter dtype", {"fp32", "bf16"});
/// p.add("--steps", &o.steps, "optimizer steps");
/// p.flag("--offload", &o.offload, "keep shards in CPU memory");
/// p.parse(argc, argv);
/// ```
///
/// Programs run through titan::run_main, which has already taken `--nproc`
/// and `--master-port` out of argv by the time the body parses; the usage
/// lists them all the same, since the user types them on the same line.
/// Range checks (a positive count, a divisible batch) stay with the program:
/// the parser only knows types.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace titan {

/// @brief A small declarative parser for `--name value` options.
///
/// Each add()/flag() binds an option to a variable; the variable's value at
/// that moment is the default the usage shows. parse() writes the values it
/// reads into the variables. Every mistake (unknown option, missing value,
/// a value that is not of the option's type or not one of its choices)
/// throws titan::Error with one line that names the option.
class OptionParser {
 public:
  /// @brief `program` heads the usage line; `description` (one line) follows it.
  OptionParser(std::string program, std::string description);

  /// @brief `--name TEXT`: any string, or with `choices` one of them.
  void add(const std::string& name, std::string* target, const std::string& help,
           std::vector<std::string> choices = {});
  /// @brief `--name N`: a decimal integer (the whole value, in int64 range).
  void add(const std::string& name, int64_t* target, const std::string& help);
  /// @brief `--name X`: a finite floating-point number.
  void add(const std::string& name, double* target, const std::string& help);
  /// @brief `--name` without a value: sets `*target` to true.
  void flag(const std::string& name, bool* target, const std::string& help);

  /// @brief Reads argv[1..argc) into the bound variables. `--help` or `-h`
  /// prints usage() to stdout and exits 0; anything else that is not a
  /// registered option throws titan::Error.
  void parse(int argc, char** argv);

  /// @brief The help text: usage line, description, one line per option
  /// with its default, then --nproc, --master-port and --help.
  std::string usage() const;

 private:
  struct Option {
    std::string name;
    std::string metavar;       // "N", "X", "TEXT", "a|b"; empty for a flag
    std::string help;
    std::string default_text;  // empty: no default worth showing
    std::function<void(const std::string& value)> set;  // throws naming the option
  };

  void add_option(Option option);
  const Option* find(const std::string& name) const;

  std::string program_;
  std::string description_;
  std::vector<Option> options_;
};

}  // namespace titan
