// `titan`: the one command-line program of titan.cpp. Each subcommand lives
// in its own cmd_*.cpp; this file only dispatches.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "titan/launch/program.hpp"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"run", titan::cli::cmd_run, "launch N local ranks: titan run --nproc N -- PROGRAM ARGS..."},
    {"collectives", titan::cli::cmd_collectives, "run every collective and print what each rank holds"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: titan COMMAND [ARGS...]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands)
    if (std::strcmp(argv[1], c.name) == 0) {
      // The subcommand sees argv[0] = "titan", argv[1..] = its own arguments,
      // but self-launch must re-run "titan <command>", so keep the name.
      return c.fn(argc, argv);
    }
  std::fprintf(stderr, "titan: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
