#include "support/run_command.hpp"

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace titan::testing {

CommandResult run_command(const std::string& command) {
  CommandResult result;
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  int status = pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

std::string bin_path(const std::string& name) {
  const char* dir = std::getenv("TITAN_BIN_DIR");
  return std::string(dir ? dir : "./bin") + "/" + name;
}

std::string source_path(const std::string& relative) {
  const char* dir = std::getenv("TITAN_SOURCE_DIR");
  return std::string(dir ? dir : "..") + "/" + relative;
}

std::string ctest_python() {
  const char* p = std::getenv("TITAN_PYTHON");
  return p ? p : "";
}

std::string python() {
  const std::string p = ctest_python();
  return p.empty() ? "python3" : p;
}

}  // namespace titan::testing
