#pragma once
// The subcommands of the `titan` program. Each cmd_*.cpp registers itself
// with a static TITAN_COMMAND(...) line, so adding a subcommand touches no
// other file.

#include <map>
#include <string>

namespace titan::cli {

/// A subcommand: gets the whole argv (argv[1] is its name, so that a
/// self-launch with --nproc re-runs "titan <command> ...").
using CommandFn = int (*)(int argc, char** argv);

struct CommandInfo {
  CommandFn fn;
  std::string help;
};

/// Every registered subcommand by name.
std::map<std::string, CommandInfo>& commands();

/// Registers a subcommand at static-initialisation time.
struct RegisterCommand {
  RegisterCommand(const char* name, CommandFn fn, const char* help) { commands()[name] = {fn, help}; }
};

}  // namespace titan::cli

#define TITAN_CLI_CONCAT2(a, b) a##b
#define TITAN_CLI_CONCAT(a, b) TITAN_CLI_CONCAT2(a, b)
/// Registers subcommand `name` (a string) run by `fn`, with one line of help.
#define TITAN_COMMAND(name, fn, help) \
  static ::titan::cli::RegisterCommand TITAN_CLI_CONCAT(titan_command_, __LINE__)(name, fn, help)
