#pragma once
/// @file
/// @brief Building a JobConfig: defaults < TOML file < command line.

#include <string>
#include <vector>

#include "titan/config/job_config.hpp"

namespace titan::config {

/// @brief Applies the TOML file at `path` on top of `cfg`.
///
/// Every key must be a known option or alias (schema.hpp) of the right
/// type; otherwise throws titan::Error with one line naming the file, line
/// and, for unknown names, the closest valid one. A missing file or
/// malformed TOML (with line and column) are errors too. Setting one option
/// twice in a file (say [training] warmup_steps and [lr_scheduler]
/// warmup_steps) is an error rather than a silent choice.
void apply_toml_file(JobConfig& cfg, const std::string& path);

/// @brief As apply_toml_file, for TOML text; `source_name` stands for the
/// file in messages.
void apply_toml_string(JobConfig& cfg, const std::string& text, const std::string& source_name);

/// @brief Applies command-line overrides `--section.key value`,
/// `--section.key=value`, `--section.flag` (true) and `--section.flag=false`
/// (also `--section.flag true|false`), in order, the last one winning.
///
/// Aliases are accepted. Arguments that are not `--section.key` options go
/// to `unparsed` when it is given (a subcommand's own flags such as
/// `--print-config`); without it they are an error. An unknown
/// `--section.key` is always an error naming the closest valid option.
void apply_overrides(JobConfig& cfg, const std::vector<std::string>& args,
                     std::vector<std::string>* unparsed = nullptr);

/// @brief The whole pipeline: defaults, then the file named by
/// `--job.config_file F` (wherever it stands), then the other overrides,
/// then normalisation of enumerated values' letter case and validate().
///
/// `unparsed` as in apply_overrides. Throws titan::Error (one line).
JobConfig parse_job_config(const std::vector<std::string>& args, std::vector<std::string>* unparsed = nullptr);

/// @brief parse_job_config over argv[first..argc): `first` is 1 for a
/// program's own argv and 2 for a `titan` subcommand (argv[1] is its name).
JobConfig parse_job_config(int argc, char** argv, int first = 1, std::vector<std::string>* unparsed = nullptr);

/// @brief Loads one TOML file over the defaults and validates it.
JobConfig load_job_config(const std::string& path);

/// @brief Rewrites enumerated values to their canonical spelling when they
/// match one ignoring letter case ("1f1b" -> "1F1B"), so that later code
/// compares exactly. Values matching none are left for validate() to reject.
void normalize(JobConfig& cfg);

}  // namespace titan::config
