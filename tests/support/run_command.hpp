#pragma once
// Runs a shell command for tests that check whole programs (exit codes,
// messages, timing).

#include <string>

namespace titan::testing {

struct CommandResult {
  int exit_code = -1;   ///< exit status, or 128+signal
  std::string output;   ///< stdout and stderr together
  double seconds = 0;   ///< wall time
};

/// Runs `command` with /bin/sh, output captured.
CommandResult run_command(const std::string& command);

/// Path of a built program (TITAN_BIN_DIR, set by CTest) or of a source file
/// (TITAN_SOURCE_DIR).
std::string bin_path(const std::string& name);
std::string source_path(const std::string& relative);

/// The Python interpreter CTest passes in TITAN_PYTHON (the venv's, with the
/// reference packages), or "" when the test runs outside CTest.
std::string ctest_python();
/// ctest_python(), or "python3" outside CTest.
std::string python();

}  // namespace titan::testing
