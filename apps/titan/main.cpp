// `titan`: the one command-line program of titan.cpp. Each subcommand lives
// in its own cmd_*.cpp and registers itself; this file only dispatches.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "commands.hpp"
#include "titan/util/host_allocator.hpp"

namespace titan::cli {
std::map<std::string, CommandInfo>& commands() {
  static std::map<std::string, CommandInfo> table;
  return table;
}
}  // namespace titan::cli

namespace {
void usage(FILE* out) {
  std::fprintf(out, "usage: titan COMMAND [ARGS...]\n\ncommands:\n");
  int width = 0;  // the longest command's name: the help texts line up after it
  for (const auto& entry : titan::cli::commands()) width = std::max(width, static_cast<int>(entry.first.size()));
  for (const auto& [name, info] : titan::cli::commands())
    std::fprintf(out, "  %-*s  %s\n", width, name.c_str(), info.help.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  // A file that outgrows the file-size limit (`ulimit -f`, a quota) makes
  // write() fail with EFBIG, which the checkpoint writer turns into one
  // error naming the file; left at its default, SIGXFSZ would kill the
  // process with no word about what it was writing.
  std::signal(SIGXFSZ, SIG_IGN);
  // A CPU training step frees and allocates the same activations every
  // step; keeping freed blocks in the process spares the page faults of
  // mapping them again (util/host_allocator.hpp).
  titan::keep_freed_host_memory();
  auto& table = titan::cli::commands();
  auto it = table.find(argv[1]);
  if (it == table.end()) {
    std::fprintf(stderr, "error: unknown command '%s' (run 'titan --help')\n", argv[1]);
    return 2;
  }
  return it->second.fn(argc, argv);
}
