// `titan run`: the torchrun-standalone equivalent for one machine.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "titan/launch/local_launcher.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"

namespace titan::cli {

static int cmd_run(int argc, char** argv) {
  try {
    launch::LaunchOptions opts;
    int i = 2;
    auto value = [&](const char* flag) -> std::string {
      const size_t len = std::strlen(flag);
      if (std::strncmp(argv[i], flag, len) == 0 && argv[i][len] == '=') return argv[i] + len + 1;
      TITAN_CHECK(i + 1 < argc, flag, " needs a value");
      return argv[++i];
    };
    auto number = [](const std::string& s, const char* flag, int lo) {
      char* end = nullptr;
      long v = std::strtol(s.c_str(), &end, 10);
      TITAN_CHECK(end != s.c_str() && *end == '\0' && v >= lo && v <= 65535, flag, " must be an integer ≥ ", lo,
                  " (got '", s, "')");
      return static_cast<int>(v);
    };
    for (; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--") { ++i; break; }
      if (a.rfind("--nproc", 0) == 0 || a.rfind("--nproc_per_node", 0) == 0) {
        opts.nproc = number(value(a.rfind("--nproc_per_node", 0) == 0 ? "--nproc_per_node" : "--nproc"), "--nproc", 1);
      } else if (a.rfind("--master-port", 0) == 0) {
        opts.master_port = number(value("--master-port"), "--master-port", 1);
      } else if (a == "--no-prefix") {
        opts.prefix_output = false;
      } else if (a == "--keep-going") {
        opts.stop_on_failure = false;
      } else if (a == "--help" || a == "-h") {
        std::printf("usage: titan run --nproc N [--master-port P] [--no-prefix] [--keep-going] -- PROGRAM ARGS...\n");
        return 0;
      } else if (a.rfind("--", 0) == 0) {
        throw Error("titan run: unknown option '" + a + "' (options: --nproc, --master-port, --no-prefix, --keep-going)");
      } else {
        break;  // the program, without a "--" before it
      }
    }
    for (; i < argc; ++i) opts.command.emplace_back(argv[i]);
    return launch::launch_local(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", error_message(e).c_str());
    return 2;
  }
}

}  // namespace titan::cli

TITAN_COMMAND("run", titan::cli::cmd_run, "launch N local ranks: titan run --nproc N -- PROGRAM ARGS...");
