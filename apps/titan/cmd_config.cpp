// `titan config`: loads a config exactly as `titan train` will (defaults <
// --job.config_file < overrides, then validation) and prints the effective
// values as TOML, so a user can see what a run would use before starting it.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "titan/config/config.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"

namespace titan::cli {

static int cmd_config(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::vector<std::string> own;
    config::JobConfig cfg = config::parse_job_config(argc, argv, 2, &own);
    bool check = false, markdown = false;
    for (const std::string& a : own) {
      if (a == "--check-supported") {
        check = true;
      } else if (a == "--markdown") {
        markdown = true;
      } else if (a == "--help" || a == "-h") {
        std::printf(
            "usage: titan config [--job.config_file F] [--section.key value ...] [--check-supported] [--markdown]\n"
            "Prints the effective config as TOML. --check-supported also fails on features not built yet;\n"
            "--markdown prints the option and alias tables of docs/config.md instead.\n");
        return 0;
      } else {
        throw Error("titan config: unexpected argument '" + a + "' (see titan config --help)");
      }
    }
    if (markdown) {
      std::fputs(config::markdown_reference().c_str(), stdout);
      return 0;
    }
    if (check) config::check_supported(cfg);
    std::fputs(cfg.to_toml().c_str(), stdout);
    return 0;
  });
}

TITAN_COMMAND("config", cmd_config, "print the effective training config (defaults < TOML file < overrides)");

}  // namespace titan::cli
