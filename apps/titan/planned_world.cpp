#include "planned_world.hpp"

#include <cstdlib>

#include "titan/util/error.hpp"

namespace titan::cli {

const char* const kPlannedNproc = "--planned-nproc";

std::string rename_nproc_for_planning(int argc, char** argv, const std::string& command) {
  static char world_flag[] = "--planned-nproc";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc") argv[i] = world_flag;
    if (a.rfind("--nproc=", 0) == 0)
      return "titan " + command + ": write '--nproc " + a.substr(8) + "' (a space, not '=')";
  }
  return "";
}

int64_t parse_planned_world(const std::string& command, const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n < 1)
    throw Error("titan " + command + ": " + (flag == kPlannedNproc ? "--nproc" : flag) + " wants a positive number of ranks, got '" + value + "'");
  return n;
}

}  // namespace titan::cli
